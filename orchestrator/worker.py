"""The worker: receive a message, claim the attempt it names, make its start check, and
hand it to the runner of its step's kind (orchestrator/runners/: call, approval,
fan-out, durable), which calls, records and advances the run. Stateless: any number of
them may run, and any may die. The queues' side (the poll loop, deletes, invisibility)
is adapters/receiving.py; the counts attempts end with are folded in services/execution/folds.py.

A worker that promotes a dependant takes the first one straight into its own lease and
runs it next (a chain costs no queue round-trips); the rest go to the queue for any
worker to pick up. A worker dying mid-chain leaves a leased row that the sweeper
re-dispatches when the lease expires."""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

from orchestrator import logs, telemetry
from orchestrator.adapters.invoker import Invoker
from orchestrator.adapters.messages import AdmitRun, AnyMessage, BulkPage, Dispatch, Promote
from orchestrator.adapters.metering import metered
from orchestrator.adapters.queue import Received
from orchestrator.adapters.receiving import Receipts, poll
from orchestrator.adapters.store import Lease
from orchestrator.engine.attempts import timer_hop, wait_before
from orchestrator.engine.context import RunContext
from orchestrator.engine.records import StepRecord
from orchestrator.errors import ConditionFailed
from orchestrator.runners import Attempt, BackendRef, RunCache, Runner, StepKind, kind_of
from orchestrator.runners.base import Fold
from orchestrator.services.execution.executor import Executor
from orchestrator.services.execution.folds import Folds
from orchestrator.services.execution.tally import Tally
from orchestrator.services.health.heartbeat import Heartbeat, process_id

__all__ = ["BackendRef", "Worker"]

log = logging.getLogger("orchestrator.worker")

class Worker:
    def __init__(
        self,
        executor: Executor,
        invoker: Invoker,
        backends: Mapping[str, BackendRef],
        runners: Mapping[StepKind, Runner],
        cache: RunCache,
        *,
        admit: Callable[[str], object] | None = None,
        bulk: Callable[[BulkPage], object] | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], object] = time.sleep,
        worker_id: str | None = None,
    ) -> None:
        # What an attempt is, by its step's kind: the runner that carries it
        # (orchestrator/runners/, the table Runtime builds).
        self.runners = dict(runners)
        self.cache = cache
        self.executor = executor
        self.store = executor.store
        self.queues = executor.queues
        self.settings = executor.settings
        self.invoker = invoker
        self.backends = dict(backends)
        self.clock = clock
        self.id = worker_id or process_id()
        self._claims = itertools.count(1)
        # A deadline the attempts on this thread must end by: (when, margin). Set by
        # `handle_before` (a Lambda invocation's remaining time); none for a process.
        self._limit = threading.local()
        self._lock = threading.Lock()
        # Received messages (acknowledged, deleted, kept invisible: adapters/receiving.py)
        # and the terminal counts and joins' completions of attempts, folded together
        # while the poll loop runs (services/execution/folds.py).
        self.receipts = Receipts(self.queues, self.settings.visibility_timeout)
        self.folds = Folds(executor, cache.context, cache.cached)
        self.sleep = sleep
        # Admission of a queued run whose throttle slot came due.
        self.admit = admit
        # A bulk action's page (services/bulk.py): its message is acknowledged after it.
        self.bulk = bulk
        # What this worker handled since it started, and its attempts running now by
        # backend: told by its heartbeat (services/health/heartbeat.py), which also adds
        # the steps' durations counted here to the stack's (`store.tallies`).
        self._counted = threading.Lock()
        self.handled: Counter[str] = Counter()
        self.in_flight: Counter[str] = Counter()
        self.heartbeat = Heartbeat(self.store, "worker", self.id,
                                   every=self.settings.heartbeat_interval, clock=clock,
                                   handled=self._handled, in_flight=self._in_flight)

    def _handled(self) -> dict[str, int]:
        with self._counted:
            return dict(self.handled)

    def _in_flight(self) -> dict[str, int]:
        with self._counted:
            return dict(self.in_flight)

    def _note(self, what: str) -> None:
        """One more of `what` (messages, attempts) handled."""
        with self._counted:
            self.handled[what] += 1

    def _running(self, backend: str, n: int) -> None:
        """An attempt on `backend` began (n=1) or ended (n=-1)."""
        with self._counted:
            self.in_flight[backend] += n

    # ---- one message -----------------------------------------------------------------

    def lease(self) -> Lease:
        """A lease of this worker's, named apart from every other it takes: its threads
        may claim copies of one message in the same millisecond, and a claim that finds
        the row already leased to its own name takes it for its own landed write
        (tables.landed)."""
        return Lease(f"{self.id}#{next(self._claims)}",
                     self.clock() + self.settings.lease_margin)

    def handle_before(self, msg: AnyMessage, deadline: float, margin: float, *,
                      parent: str | None = None) -> bool:
        """Handle `msg` only if its attempt can end by `deadline` (wall clock): its step's
        timeout plus `margin` must fit, after any wait for its due time; inline
        successors are held to the same terms (sent to the queue instead). False: not
        started, for the caller to hand back (a Lambda batch item failure)."""
        if isinstance(msg, Dispatch) and not self._fits(msg, deadline, margin):
            return False
        self._limit.deadline = (deadline, margin)
        try:
            self.handle(msg, parent=parent)
        finally:
            self._limit.deadline = None
        return True

    def _fits(self, msg: Dispatch, deadline: float, margin: float) -> bool:
        now = self.clock()
        if timer_hop(msg.due_at, now):
            return True  # only sent on as a timer hop: no attempt starts
        ctx = self.context(msg.run_id)
        if ctx is None:
            return True  # nothing will run: the claim finds no run
        wait = max(0.0, (msg.due_at or now) - now)
        need = ctx.timeouts.get(msg.step, self.settings.default_step_timeout)
        return now + wait + need + margin <= deadline

    def _room_for(self, ctx: RunContext | None, steps: tuple[str, ...]) -> bool:
        """Whether the longest of `steps` fits before this thread's deadline, if any."""
        limit = getattr(self._limit, "deadline", None)
        if limit is None or ctx is None:
            return True
        deadline, margin = limit
        need: float = max((ctx.timeouts.get(s, self.settings.default_step_timeout) for s in steps),
                   default=0.0)
        return bool(self.clock() + need + margin <= deadline)

    def handle(self, msg: AnyMessage, receipt: Received | None = None, *,
               parent: str | None = None) -> None:
        """Claim the attempt the message names and run it (and its inline successors).
        Its AWS requests are counted for the message's run (adapters/metering.py).
        `parent`: the sender's span (W3C traceparent) when not on the receipt."""
        self._note("messages")
        with metered(msg.run_id):
            if not telemetry.active():
                self._handle(msg, receipt)
                return
            step = getattr(msg, "step", "")
            if parent is None and receipt is not None:
                parent = receipt.traceparent
            with telemetry.message_span(msg.run_id, msg.op, step, parent):
                self._handle(msg, receipt)

    def _handle(self, msg: AnyMessage, receipt: Received | None) -> None:
        now = self.clock()
        if timer_hop(msg.due_at, now):
            self.queues.timer(msg, now)  # sent on for the rest of its wait
            self.receipts.ack(receipt)
            return
        wait = wait_before(msg.due_at, now)
        if wait > 0:
            self.sleep(wait)
            now = self.clock()  # the attempt starts now, not when its message came
        if isinstance(msg, AdmitRun):
            if self.admit is not None:
                self.admit(msg.run_id)
            self.receipts.ack(receipt)
            return
        if isinstance(msg, BulkPage):
            if self.bulk is not None:
                self.bulk(msg)
            self.receipts.ack(receipt)
            return
        if isinstance(msg, Promote):
            ctx = self.context(msg.run_id)
            if ctx is not None:
                self.executor.promote_slice(msg, ctx, self._fold())
            self.receipts.ack(receipt)
            return
        row: StepRecord | None = None
        if msg.after is not None and msg.attempt == 1:
            # Its only dependency succeeded: promote and claim it in one write. None if it
            # is no longer blocked (a sweep promoted it: claim it below, as ready).
            # The row may not be written yet (its start leaves such steps out): the
            # plan in the run's context creates it in the same write.
            ctx = self.context(msg.run_id)
            row = self.store.steps.satisfy(msg.run_id, msg.step, msg.after, 1, self.lease(), now,
                                           ready_at=msg.ready_at,
                                           plan=ctx.plan(msg.step) if ctx is not None else None)
        elif msg.planned and msg.attempt == 1:
            # A root its run's start left out: its claim creates its row. None if the
            # row exists (a sweep or a stop wrote it): claimed below, as it stands.
            row = self._claim_planned(msg, now)
        if row is None:
            try:
                row = self.store.steps.claim(msg.run_id, msg.step, msg.attempt, self.lease(), now)
            except ConditionFailed:
                # A duplicate, a late message, or a step already taken; or a root its
                # start left out, named by a message that does not say so (one sent
                # before an upgrade, or by hand): its claim creates its row.
                row = None if msg.planned or msg.attempt != 1 else self._claim_planned(msg, now)
        self.receipts.ack(receipt)
        tally = Tally()
        try:
            while row is not None:
                row = self._attempt(row, tally)
        finally:
            self.folds.count(tally)

    def _attempt(self, row: StepRecord, tally: Tally) -> StepRecord | None:
        """`execute`, in its span and with its log fields bound when either is on; its
        end logged with its duration."""
        if not (telemetry.active() or logs.active()):
            return self.execute(row, tally)
        began = time.monotonic()
        with telemetry.attempt_span(row.run_id, row.step, row.attempt, self.id), \
                logs.bound(run_id=row.run_id, step=row.step, attempt=row.attempt,
                           worker_id=self.id):
            try:
                return self.execute(row, tally)
            finally:
                log.info("attempt ended", extra={
                    "duration_ms": round((time.monotonic() - began) * 1000, 1)})

    def _claim_planned(self, msg: Dispatch, now: float) -> StepRecord | None:
        """Claim attempt 1 of a root its run's start left out, creating its row; None if
        it is not such a root or its row exists."""
        ctx = self.context(msg.run_id)
        plan = ctx.plan(msg.step) if ctx is not None else None
        if ctx is None or plan is None or plan.deps:
            return None
        return self.store.steps.claim_planned(plan, self.lease(), now,
                                              ready_at=msg.ready_at or ctx.started_at)

    def _fold(self) -> Fold | None:
        """Where a wide join's completion goes now: folded while folding, else None."""
        return self.folds.fold if self.folds.on else None

    @contextmanager
    def folding(self) -> Iterator[None]:
        """Fold the terminal counts and wide joins' completions of what is handled
        inside, and write them once at the end: a Lambda invocation's batch costs one
        count write per run and one per join, as a poll loop's flush does, not one per
        record. Lost with the invocation, they are the sweeper's to repair.

        Scopes may overlap (`orchestrator dev --lambda` and the cost bench run a
        mapping's four invocations at once in one process, where AWS gives each its
        own): folding goes on until the last one ends, and each writes what is folded
        when it ends. Were the first to end to stop it, the others' records would each
        count a wide join's completion in a write of its own, which no invocation on
        AWS does."""
        with self._lock:
            self.folds.scopes += 1
            self.folds.on = True
        try:
            yield
        finally:
            with self._lock:
                self.folds.scopes -= 1
                if not self.folds.scopes:
                    self.folds.on = False
            self.flush()

    def flush(self, *, force: bool = True) -> None:
        """Write the folded counts and joins' completions, and delete the acknowledged
        messages (at once with `force`, else when due: adapters/receiving.py)."""
        self.folds.flush()
        self.receipts.flush(force=force)

    # ---- one attempt -------------------------------------------------------------------

    def start_check(self, run_id: str) -> RunContext | None:
        """The start check (runners/cache.py)."""
        return self.cache.start_check(run_id)

    def context(self, run_id: str) -> RunContext | None:
        """The run's context, cached (runners/cache.py)."""
        return self.cache.context(run_id)

    def execute(self, row: StepRecord, tally: Tally) -> StepRecord | None:
        """Run one claimed attempt; return the next row to run inline, if any."""
        # The start check (DESIGN.md, invariant 5): with the lease taken, right before
        # the call, one strongly consistent read of the run's stop flags. A halt's
        # failure and a cancel set them in the write that commits them, so a step whose
        # check comes after that instant is never called, however late the stop's pass
        # over the rows. The attempt is given up as if its claim had been refused.
        ctx = self.start_check(row.run_id)
        if ctx is not None and ctx.stopping:
            gone = self.store.steps.abandon(
                row.run_id, row.step, row.attempt, row.lease_owner or "",
                "run stopped before the step started", self.clock(), unstart=row)
            if gone is not None and gone.counted:
                tally.add(row.run_id)
            return None
        attempt = Attempt(row, ctx, tally, self.backends.get(row.backend),
                          room=lambda steps: self._room_for(ctx, steps), lease=self.lease,
                          fold=self._fold())
        # A call's duration (from its start check to its recorded outcome) goes to the
        # stack's histogram at the next beat, at no request of its own: only an attempt
        # whose function answered (its `outcome`), not one that waited for its
        # backend's slot, nor a durable run's driver, an approval or a fan-out.
        began = time.monotonic()
        self._note("attempts")
        self._running(row.backend, 1)
        try:
            return self.runners[kind_of(attempt)].run(attempt)
        finally:
            self._running(row.backend, -1)
            if ctx is not None and attempt.outcome is not None:
                self.store.tallies.step_took(ctx.workflow, time.monotonic() - began)

    # ---- the loop ----------------------------------------------------------------------

    def run(self, stop: threading.Event, *, threads: int | None = None, wait: int = 2) -> None:
        """Poll both queues until `stop` is set; run attempts on a thread pool. Its
        heartbeat beats meanwhile, on a thread of its own."""
        self.folds.on = True
        beats = threading.Event()
        beating = self.heartbeat.start(beats)
        try:
            poll(self.queues, self.receipts, stop, threads=threads or self.settings.worker_threads,
                 wait=wait, handle=self.handle, flush=lambda: self.flush(force=False))
        finally:
            self.folds.on = False
            try:
                self.flush()
            except Exception:  # the messages not deleted come back, and find their rows moved on
                log.exception("the last flush failed")
            beats.set()
            beating.join(timeout=5.0)
            self.heartbeat.stopped()
