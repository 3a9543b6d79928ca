"""Starting, viewing and killing runs: the service the API, the CLI and the tests share.

A run row stores the workflow definition it started with (timeouts resolved), so a run
never changes under its feet when the manifest is edited, and the sweeper can rebuild
any step row a crashed start left out."""

from __future__ import annotations

import heapq
import logging
import re
import secrets
import time
from collections.abc import Callable
from typing import Any

from orchestrator import telemetry
from orchestrator.adapters.metering import metered
from orchestrator.adapters.queue import Dispatch
from orchestrator.engine.admission import gate_of
from orchestrator.engine.context import RunContext
from orchestrator.engine.definition import Definition, Gate, Trigger
from orchestrator.engine.plan import plan_steps, unwritten
from orchestrator.engine.records import RunRecord, StepRecord
from orchestrator.engine.rerun import with_reused
from orchestrator.engine.states import RunStatus, StepStatus
from orchestrator.engine.transitions import killed_error
from orchestrator.errors import ConditionFailed, Conflict, NotFound, UsageError
from orchestrator.services.admission import Outcome, Started
from orchestrator.services.admission.debounce import Debouncer
from orchestrator.services.executor import Executor
from orchestrator.services.journal_follow import JournalFollower
from orchestrator.services.step_follow import StepFollower
from orchestrator.services.values import MAX_VALUE_BYTES, check_value
from orchestrator.services.views import entry_step, render, run_view, view_json

__all__ = ["MAX_INPUT_BYTES", "RUN_ID_RE", "RunService"]

log = logging.getLogger("orchestrator.runs")

RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$")
MAX_INPUT_BYTES = MAX_VALUE_BYTES


class _Keep:
    """Sentinel: keep the old run's input."""


_KEEP: Any = _Keep()


class RunService:
    def __init__(
        self,
        executor: Executor,
        manifest: Any,
        *,
        default_timeout: float,
        arrive: Callable[[RunRecord], RunRecord],
        release: Callable[[RunRecord], None],
        children_of: Callable[[str], list[str]] | None = None,
    ) -> None:
        # `arrive` and `release` are admission's: a gated run waits for its group and
        # throttle; a cancelled queued run gives its place up.
        self.executor = executor
        # Durable runs' journals as followers read them: what changed since the last look.
        self.follow = JournalFollower(executor.store.journal.read_entries,
                                              lambda e: render(entry_step(e)))
        # A DAG run's step rows as followers read them: what can have changed since.
        store = executor.store
        self.follow_steps = StepFollower(
            lambda run_id, span: store.steps.query_steps(run_id, shown=True, live=span is not None,
                                                         span=span),
            store.steps.get_shown)
        self.store = executor.store
        self.debouncer = Debouncer(executor.store, executor.clock)
        self.manifest = manifest
        self.default_timeout = default_timeout
        self.arrive = arrive
        self.release = release
        # A durable run's children: cancelling it cancels them.
        self.children_of = children_of

    def new_run_id(self, workflow: str, now: float) -> str:
        return f"{workflow}-{int(now * 1000)}-{secrets.token_hex(3)}"

    def workflow(self, name: str) -> Any:
        wf = self.manifest.workflows.get(name)
        if wf is None:
            known = ", ".join(sorted(self.manifest.workflows)) or "none"
            raise NotFound(f"workflow {name!r} is not defined (known: {known})")
        return wf

    def start(
        self,
        workflow: str,
        input: Any = None,
        run_id: str | None = None,
        *,
        trigger: dict[str, Any] | None = None,
        overlap: str | None = None,
        fire_key: str = "",
    ) -> tuple[RunRecord, bool]:
        """Start a run; returns (run, created). A caller-chosen run id that exists
        already returns the existing run (created=False). `admit` says more."""
        started = self.admit(workflow, input, run_id, trigger=trigger, overlap=overlap,
                             fire_key=fire_key)
        return started.run, started.created

    def admit(
        self,
        workflow: str,
        input: Any = None,
        run_id: str | None = None,
        *,
        trigger: dict[str, Any] | None = None,
        overlap: str | None = None,
        fire_key: str = "",
    ) -> Started:
        """Take one trigger of `workflow` through admission (services/admission): the
        run it made or joined, and how (`Outcome`). `run_id` is the trigger's id: a run
        of that id, or a burst that took it, answers a repeat as a duplicate.

        `overlap` (skip | allow | replace) is what a schedule fire does while the
        previous run for `fire_key` is still going; a workflow's own concurrency group
        takes precedence."""
        wf = self.workflow(workflow)
        definition = Definition.of(wf, self.manifest.backends, self.default_timeout, workflow)
        gate = gate_of(wf, workflow, input, overlap, fire_key)
        trig = Trigger.from_json(trigger or {"source": "api"})
        if getattr(wf, "debounce", None) is not None:
            # One run per burst (services/admission/debounce.py): the run id the trigger
            # came with names the trigger, not the burst's run.
            def record(admit_at: float) -> RunRecord:
                return self.record(workflow, definition, input, None, trigger=trig,
                                   gate=gate or Gate(), admit_at=admit_at)

            def begin(run: RunRecord, also: list[dict[str, Any]]) -> RunRecord:
                with metered(run.run_id):
                    self.store.runs.create_run_with(run, also)
                    return self.arrive(run)

            return self.debouncer.trigger(workflow, wf.debounce, input, record, begin,
                                          trigger_id=run_id)
        run, created = self.create(workflow, definition, input, run_id, trigger=trig,
                                   gate=gate)
        return Started.new(run) if created else Started(run, Outcome.DUPLICATE)

    def create(
        self,
        workflow: str,
        definition: Definition,
        input: Any,
        run_id: str | None,
        *,
        trigger: Trigger,
        gate: Gate | None,
        rerun_of: str | None = None,
        kept_input: bool = False,
    ) -> tuple[RunRecord, bool]:
        run = self.record(workflow, definition, input, run_id, trigger=trigger, gate=gate,
                          rerun_of=rerun_of, kept_input=kept_input)
        with metered(run.run_id):  # the start's requests are the run's (adapters/metering.py)
            return self._create(run, run_id)

    def record(
        self,
        workflow: str,
        definition: Definition,
        input: Any,
        run_id: str | None,
        *,
        trigger: Trigger,
        gate: Gate | None,
        rerun_of: str | None = None,
        kept_input: bool = False,
        admit_at: float | None = None,
    ) -> RunRecord:
        """A new run's record (checked), not yet written."""
        if run_id is not None and not RUN_ID_RE.fullmatch(run_id):
            raise UsageError(f"run_id {run_id!r}: use 1-200 of A-Z a-z 0-9 _ . : -")
        if not kept_input:  # a rerun's kept input passed this check when it was sent
            check_value(*_sent(input, trigger))
        now = self.executor.clock()
        rid = run_id or self.new_run_id(workflow, now)
        reused = set(definition.reused)
        status = RunStatus.QUEUED if gate else RunStatus.RUNNING
        run = RunRecord(
            run_id=rid,
            workflow=workflow,
            status=status,
            input=input,
            definition=definition,
            created_at=now,
            total=len(definition.steps),
            # A hint that triggers the verified finish: only sinks count down (see
            # StepRecord.counted), so a fan-out pays no per-step write on the run row.
            remaining=len(definition.sinks - reused),
            on_failure=definition.on_failure,
            updated_at=now,
            trigger=trigger,
            rerun_of=rerun_of,
            gate=gate,
            started_at=None if gate else now,
            admit_at=admit_at,
            history=(
                {"at": round(now, 3), "type": f"run.{status.value}",
                 "trigger": trigger.to_json()},
            ),
        )
        return run

    def _create(self, run: RunRecord, run_id: str | None) -> tuple[RunRecord, bool]:
        rid, now, gate = run.run_id, run.created_at, run.gate
        # Order matters for crash safety: the run row first (the sweeper can rebuild
        # missing step rows from its definition), then the steps, then the roots' dispatch.
        began = time.time()  # the root span's start (wall clock, as spans are)
        try:
            self.store.runs.create_run(run)
        except ConditionFailed:
            existing = self.store.runs.get_run(rid, now)
            if existing is None:
                raise UsageError(f"run_id {rid!r} was used by a run that has expired") from None
            return existing, False
        if run_id is not None and self.store.steps.forget(rid):
            # A run of this id expired and its row was deleted (DynamoDB's TTL), while
            # its steps' rows, kept longer, were not: they are not this run's.
            log.info("run %s: the rows a finished run of this id left were deleted", rid)
        with telemetry.run_span(rid, run.workflow, run.trigger.source if run.trigger else "api",
                                began):
            if gate:
                return self.arrive(run), True
            self.launch(run)
        return run, True

    def rows_for(self, run: RunRecord) -> list[StepRecord]:
        """The step rows a run starts with: planned from its definition, with the steps
        a rerun reuses already successful (their outputs copied from the old run)."""
        now = self.executor.clock()
        rows = plan_steps(run.run_id, run.definition.steps, now)
        reused = run.definition.reused
        if not reused:
            return rows
        old: dict[str, StepRecord] = {}
        for source in set(reused.values()):
            names = [n for n, src in reused.items() if src == source]
            old.update(self.store.steps.get_outputs(source, names))
        return with_reused(rows, reused, old, now)

    def launch(self, run: RunRecord) -> None:
        """Write a started run's step rows and dispatch the ones that are ready."""
        rows = self.rows_for(run)
        # A sweep rebuilds the rows of a start that looks dead `settle` after it began:
        # a start that stalled (paused, retried) past half of that creates the rest of its
        # rows one by one, each only if absent, rather than overwrite them.
        began = run.started_at or run.created_at
        # A root and a step blocked on one dependency are left out (engine.plan): the
        # write that first moves each creates its row (a root's, its claim).
        self.store.steps.put_steps(
            [r for r in rows if not unwritten(r, run.definition)],
            fence=began + self.store.wake.settle / 2, clock=self.executor.clock)
        # Each claim makes its own start check (Worker.execute): the launch reads nothing.
        self.executor.queues.dispatch([
            Dispatch(run_id=run.run_id, step=r.step, attempt=1, planned=True,
                     ready_at=began) if unwritten(r, run.definition)
            else Dispatch(run_id=run.run_id, step=r.step, attempt=1)
            for r in rows if r.status is StepStatus.READY
        ])
        if all(r.status.terminal for r in rows):
            self.executor.finish_if_done(run.run_id)

    def get(self, run_id: str) -> RunRecord:
        if not RUN_ID_RE.fullmatch(run_id):  # no run can have it; spare DynamoDB the key
            raise NotFound(f"run {run_id[:200]!r} not found (not a run id)")
        run = self.store.runs.get_run(run_id, self.executor.clock())
        if run is None:
            raise NotFound(f"run {run_id!r} not found (or expired)")
        return run

    def view(self, run_id: str, *, steps: bool = True) -> dict[str, Any]:
        """The run with its steps, or (steps=False) the run alone: one read of its row."""
        run = self.get(run_id)
        rows = self._rows(run) if steps else None
        journal = (self.follow.read(run_id, _version(run))
                   if steps and run.definition.durable is not None else None)
        return self._waiting(run, run_view(run, rows, self.executor.load_output, journal))

    def view_body(self, run_id: str, *, steps: bool = True) -> bytes:
        """`view` as the API sends it (JSON). A durable run's top-scope operations come
        as the journal's follower keeps them rendered: a look at a long run renders
        what changed, not every operation again."""
        run = self.get(run_id)
        if not steps or run.definition.durable is None:
            return view_json(self._waiting(run, run_view(run, self._rows(run) if steps else None,
                                                         self.executor.load_output)), [])
        look = self.follow.look(run_id, _version(run))
        return view_json(run_view(run, self._rows(run), self.executor.load_output, look.rest,
                                       look.shown), look.head)

    def _waiting(self, run: RunRecord, view: dict[str, Any]) -> dict[str, Any]:
        """A durable run's view without its steps still says what the run waits for (a
        sleep, a signal, a lock...): one more read, of its driver row."""
        if run.definition.durable is not None and "waiting" not in view:
            driver = (None if run.status.terminal
                      else self.store.drivers.get_driver(run.run_id))
            view["waiting"] = (None if driver is None or driver.status.terminal
                               else driver.waiting)
        return view

    def _rows(self, run: RunRecord) -> list[StepRecord]:
        return self.follow_steps.read(run, lambda r, read: RunContext.of(r).rows(read))

    def history(self, run_id: str) -> list[dict[str, Any]]:
        """Every transition of the run and its steps, oldest first."""
        run = self.get(run_id)
        rows = [[dict(e) for e in run.history]]
        rows += [[{**e, "step": s.step} for e in s.history]
                 for s in self.store.steps.query_steps(run_id)]
        # Merged by time, each row's own entries kept in the order they were written: a
        # write that landed late (its process stalled after reading the clock) carries
        # an earlier time than the entry before it, and must not be shown before it.
        return list(heapq.merge(
            *rows, key=lambda e: (e.get("at", 0.0), _ORDER.get(e.get("type", ""), 5))))

    def kill(self, run_id: str, reason: str) -> dict[str, Any]:
        run = self.get(run_id)
        if run.status.terminal:
            raise Conflict(
                "run_finished", f"run {run_id} already finished ({run.status.value})"
            )
        if not self.cancel(run_id, reason):
            raise Conflict("run_finished", f"run {run_id} already finished")
        return self.view(run_id)

    def cancel(self, run_id: str, reason: str) -> bool:
        """Cancel a queued or running run; False if it had already finished. Its
        requests are the run's (adapters/metering.py)."""
        with metered(run_id):
            return self._cancel(run_id, reason)

    def _cancel(self, run_id: str, reason: str) -> bool:
        now = self.executor.clock()
        run = self.store.runs.get_run(run_id, now)
        if run is None or run.status.terminal:
            return False
        if run.status is RunStatus.QUEUED:
            try:
                done = self.store.runs.finish_queued(
                    run_id, RunStatus.KILLED, killed_error(reason), now,
                    now + self.executor.settings.ttl_failed, kill_reason=reason,
                )
            except ConditionFailed:
                return self.cancel(run_id, reason)  # it was admitted meanwhile
            self.release(done)
            return True
        try:
            self.executor.kill(run_id, reason)
        except ConditionFailed:
            return False
        if self.children_of is not None and run.definition.durable is not None:
            for child in self.children_of(run_id):
                self.cancel(child, f"its parent {run_id} was cancelled: {reason}")
        return True

    def rerun(
        self, run_id: str, *, input: Any = _KEEP, new_run_id: str | None = None
    ) -> tuple[RunRecord, bool]:
        """A new run of a finished run's definition that reuses every successful step
        and runs the rest (the failed, skipped or cancelled ones) again."""
        old = self.get(run_id)
        if not old.status.terminal:
            raise Conflict("run_not_finished", f"run {run_id} is still {old.status.value}:"
                           " cancel it or wait for it to finish")
        if old.status is RunStatus.SUCCESS:
            raise Conflict("nothing_to_rerun", f"run {run_id} succeeded: every step has its"
                           " output; start a new run instead")
        steps = self.store.steps.query_steps(run_id, states_only=True)
        # A durable run starts again from the top (its journal is not carried over:
        # `reset` replays part of a run instead).
        definition = old.definition.reusing(
            {} if old.definition.durable is not None else
            {s.step: run_id for s in steps if s.status is StepStatus.SUCCESS}
        )
        new_input = old.input if input is _KEEP else input
        wf = self.manifest.workflows.get(old.workflow)
        gate = gate_of(wf, old.workflow, new_input, None, "") if wf is not None else None
        return self.create(
            old.workflow, definition, new_input, new_run_id,
            trigger=Trigger("rerun", {"run_id": run_id}), gate=gate, rerun_of=run_id,
            kept_input=input is _KEEP,
        )


def _sent(input: Any, trigger: Trigger) -> tuple[str, Any]:
    """What of a run's input was sent, and so is capped: all of it, but of an event's
    run (its input is the event) the event's data; the name, key and id around it are
    capped by their own rules."""
    if trigger.source == "event" and isinstance(input, dict):
        return "data (an event's)", input.get("data")
    return "input", input


# Same-instant history entries read best in this order.
_ORDER = {"run.queued": 0, "run.running": 0, "run.started": 1, "step.reused": 2,
          "step.ready": 2, "step.started": 3}


def _version(run: RunRecord) -> Any:
    """What changes when a durable run's kept journal must be forgotten (a reset, a
    resume, a pause change the run's history)."""
    return len(run.history), run.history[-1:]
