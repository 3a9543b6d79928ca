"""Wiring: build the adapters once from Settings and a manifest, and hand them out.

Entry points (the local stack, `orchestrator worker`, the API, tests, benchmarks) all
assemble the same parts here, so there is one way the system is put together."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from orchestrator.adapters.aws import Clients, make_clients
from orchestrator.adapters.blobs import Blobs
from orchestrator.adapters.invoker import Invoker
from orchestrator.adapters.queue import Queues
from orchestrator.adapters.store import Store
from orchestrator.adapters.store.control import Control
from orchestrator.engine.backend_limits import Limits
from orchestrator.engine.records import RunRecord
from orchestrator.engine.wakes import WakeTimes
from orchestrator.errors import UsageError
from orchestrator.runners import BackendRef, RunCache, runners
from orchestrator.services.admission import Admission
from orchestrator.services.bulk import BulkActions
from orchestrator.services.coordination.approvals import Approvals
from orchestrator.services.coordination.backend_limits import BackendLimits
from orchestrator.services.coordination.locks import Locks
from orchestrator.services.coordination.state_cells import StateService
from orchestrator.services.durable.admin import DurableAdmin
from orchestrator.services.durable.children import Children
from orchestrator.services.durable.event_waits import EventWaits
from orchestrator.services.durable.hooks import Hooks
from orchestrator.services.durable.signals import Signals
from orchestrator.services.execution.executor import Executor
from orchestrator.services.health.overview import HealthReads
from orchestrator.services.runs import RunService
from orchestrator.services.scripts.catalog import Catalog
from orchestrator.services.scripts.registry import ScriptRegistry
from orchestrator.services.scripts.texts import ScriptTexts, check_script, script_url
from orchestrator.services.triggers.cancel_on import EventCancels
from orchestrator.services.triggers.events import EventService
from orchestrator.services.triggers.scheduler import Scheduler
from orchestrator.services.triggers.webhooks import WebhookService
from orchestrator.services.versions import Checker, Moves, Target, Versions
from orchestrator.settings import Settings
from orchestrator.sweeper import Sweeper
from orchestrator.worker import Worker

__all__ = ["Runtime"]

_MOVES_LOCK = threading.Lock()


@dataclass
class Runtime:
    settings: Settings
    manifest: Any
    clients: Clients
    store: Store
    queues: Queues
    blobs: Blobs
    executor: Executor
    runs: RunService
    clock: Callable[[], float]
    control: Control
    admission: Admission
    events: EventService
    webhooks: WebhookService
    scheduler: Scheduler
    signals: Signals
    durable: DurableAdmin
    event_waits: EventWaits
    hooks: Hooks
    children: Children
    approvals: Approvals
    state: StateService
    locks: Locks
    versions: Versions
    _moves: Moves | None = field(default=None, init=False, repr=False)
    # Bulk actions (services/bulk.py): built from the parts above.
    bulk: BulkActions = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.bulk = BulkActions(self.store, self.queues, self.store.bulk,
                                cancel=self.runs.cancel, rerun=self.runs.rerun,
                                resume=self.durable.resume, clock=self.clock)

    @classmethod
    def build(
        cls,
        settings: Settings,
        manifest: Any,
        *,
        clients: Clients | None = None,
        clock: Callable[[], float] = time.time,
    ) -> Runtime:
        clients = clients or make_clients(settings)
        names = settings.names
        retention = max(settings.ttl_success, settings.ttl_failed)
        wake = WakeTimes(redispatch_after=settings.redispatch_after,
                         settle=settings.redispatch_after, ceiling=settings.redispatch_ceiling)
        blobs = Blobs(clients.s3, names.blob_bucket)
        # A durable run's journal entries past the inline limit go to the blob store.
        # The counters for /metrics count an ad-hoc script's runs under one label: the
        # catalog built below says which workflows are the stack's.
        def declared(workflow: str) -> bool:
            return catalog.declares(workflow)

        store = Store(clients.dynamodb, names, step_retention=retention, wake=wake,
                      blobs=blobs, inline_limit=settings.inline_output_limit,
                      declared=declared)
        queues = Queues(clients.sqs, names)
        control = store.control
        # Admission and runs need each other (a finished run admits the next, which is
        # launched; cancel-running cancels a run): the cycle is closed by these two
        # functions, which call `admission` once it is built just below. Every part is
        # complete when its constructor returns; nothing is patched in afterwards.
        def arrive(run: RunRecord) -> RunRecord:
            return admission.arrive(run)

        def release(run: RunRecord) -> None:
            admission.release(run)
            if run.holds_locks:  # the locks it held go to the next in line
                locks.release_all(run.run_id)
            children.finished(run)  # a durable parent waiting for this run goes on

        def children_of(run_id: str) -> list[str]:
            return children.of(run_id)

        locks = Locks(store, queues, clock)
        versions = Versions(store, clock)
        executor = Executor(store, queues, blobs, settings, clock, on_finish=release)
        # Every workflow a run may name: the manifest's and the stored scripts'.
        catalog = Catalog(manifest, ScriptRegistry(control, clock), ScriptTexts(blobs))
        runs = RunService(
            executor, catalog, default_timeout=settings.default_step_timeout,
            arrive=arrive, release=release, children_of=children_of,
            store_script=catalog.texts.put, pin=versions.pin,
        )
        admission = Admission(
            store, control, queues, clock, launch=runs.launch, cancel=runs.cancel,
            ttl=settings.ttl_success,
        )
        event_waits = EventWaits(control, clock, settings.event_retention)
        signals = Signals(store, queues, clock)
        children = Children(control, store, clock, start=runs.start, wake=signals.wake,
                            signal=signals.send, load_output=executor.load_output)
        events = EventService(control, runs, clock, settings.event_retention,
                              waits=event_waits, wake=signals.wake,
                              cancels=EventCancels(runs, clock))
        webhooks = WebhookService(control, runs, clock, settings.delivery_retention)
        scheduler = Scheduler(
            control, runs, clock, grace=settings.schedule_grace,
            max_body=settings.output_hard_cap,
        )
        hooks = Hooks(control, store, signals, clock, secret=settings.hook_secret,
                      public_url=settings.public_url)
        return cls(
            settings, catalog, clients, store, queues, blobs, executor, runs, clock, control,
            admission, events, webhooks, scheduler, signals,
            DurableAdmin(store, queues, clock), event_waits, hooks, children,
            Approvals(store, queues, hooks, clock), StateService(store, clock), locks,
            versions,
        )

    def backends(self) -> dict[str, BackendRef]:
        return {
            name: BackendRef(url=b.url, secret=b.secret, limits=backend_limits(name, b))
            for name, b in self.manifest.backends.items()
        }

    def worker(self, *, clock: Callable[[], float] | None = None,
               rand: Callable[[], float] = random.random,
               sleep: Callable[[float], object] = time.sleep, transport: Any = None,
               **kwargs: Any) -> Worker:
        """A worker: it takes messages and hands each claimed attempt to the runner of
        its step's kind, from the table built here (orchestrator/runners/). `transport`:
        the Invoker's (adapters/invoker.py)."""
        invoker = Invoker(max_body=self.settings.output_hard_cap, clock=self.clock,
                          transport=transport)
        clock = clock or self.clock
        cache = RunCache(self.store, clock, self.executor.load_output)
        table = runners(self.executor, invoker, cache, clock=clock, rand=rand, sleep=sleep,
                        events=self.event_waits, hooks=self.hooks, children=self.children,
                        approvals=self.approvals, state=self.state, locks=self.locks,
                        versions=self.versions,
                        limits=BackendLimits(self.store, self.queues, clock,
                                             lease_margin=self.settings.lease_margin))
        return Worker(self.executor, invoker, self.backends(), table, cache,
                      admit=self.admission.due, bulk=self.bulk.page, clock=clock, sleep=sleep,
                      **kwargs)

    def health(self) -> HealthReads:
        """The reads of the stack's health: queues, processes, backends
        (services/health/overview.py)."""
        limits = {name: ref.limits for name, ref in self.backends().items()}
        urls = {"dispatch": self.queues.dispatch_url, "timer": self.queues.timer_url}
        return HealthReads(self.store, self.clients.sqs, self.settings.names, urls, limits,
                           self.clock)

    def moves(self) -> Moves:
        """Checks of open durable runs against code, and the moves between versions
        they allow (services/versions/), with an HTTP client of their own (made once)."""
        with _MOVES_LOCK:
            if self._moves is None:
                invoker = Invoker(max_body=self.settings.output_hard_cap, clock=self.clock)
                checker = Checker(self.store, invoker, self.clock)
                secrets = {name: b.secret for name, b in self.manifest.backends.items()}
                self._moves = Moves(self.store, self.versions, checker, self.clock,
                                    secrets=secrets,
                                    cancel=lambda run_id, why: self.runs.cancel(run_id, why),
                                    resume=self.durable.resume, script_host=self._script_target)
            return self._moves

    def _script_target(self, text: str) -> Target:
        """Where script runs are checked against `text`: the shell backend, with the
        text stored (by its hash) for the host to fetch."""
        name = self.manifest.capable("shell")
        if name is None:
            raise UsageError("no backend here runs scripts (capability shell)")
        backend = self.manifest.backends[name]
        sha = self.manifest.texts.put(check_script(text, "script"))
        return Target(backend.url, backend.secret,
                      script={"sha256": sha, "url": script_url(self.blobs, sha)})

    def released(self, run: RunRecord) -> None:
        """A finished run gives up what it holds and wakes a parent waiting for it (the
        sweeper's repair of a release lost with its process: it looks before it
        writes)."""
        self.admission.release(run, looked=False)
        if run.holds_locks:
            self.locks.release_all(run.run_id)
        self.children.finished(run)

    def sweeper(self, *, clock: Callable[[], float] | None = None,
                sweeper_id: str | None = None) -> Sweeper:
        return Sweeper(
            self.executor, control=self.control, plan=self.runs.rows_for,
            clock=clock or self.clock,
            on_queued=self.admission.recheck, on_finished=self.released,
            on_waiting=self.admission.rejoin,
            tasks=(self.scheduler.tick, self.bulk.nudge), sweeper_id=sweeper_id,
        )


def backend_limits(name: str, backend: Any) -> Limits | None:
    """A manifest backend's `limits:` as the runners apply them (None: none declared)."""
    spec = backend.limits
    if spec is None or (spec.concurrency is None and spec.rate is None):
        return None
    count, period = spec.rate_of() or (None, None)
    return Limits(name, spec.concurrency, count, period)
