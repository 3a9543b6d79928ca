"""Starting, viewing and killing runs: the service the API, the CLI and the tests share.

A run row stores the workflow definition it started with (timeouts resolved), so a run
never changes under its feet when the manifest is edited, and the sweeper can rebuild
any step row a crashed start left out."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from orchestrator.adapters.metering import metered
from orchestrator.engine.context import RunContext
from orchestrator.engine.records import RunRecord, StepRecord
from orchestrator.engine.states import RunStatus, StepStatus
from orchestrator.engine.transitions import killed_error
from orchestrator.errors import ConditionFailed, Conflict, NotFound, imported_run
from orchestrator.services.admission import Started, StartRequest
from orchestrator.services.admission.batch import Batcher
from orchestrator.services.admission.debounce import Debouncer
from orchestrator.services.admission.dedupe import IdempotencyKeys
from orchestrator.services.admission.launch import (
    MAX_INPUT_BYTES,
    RUN_ID_RE,
    Launcher,
    new_run_id,
)
from orchestrator.services.admission.pipeline import Pipeline
from orchestrator.services.execution.executor import Executor
from orchestrator.services.reads.history import merged_history
from orchestrator.services.reads.journal_follow import JournalFollower
from orchestrator.services.reads.step_follow import StepFollower
from orchestrator.services.reads.views import entry_step, render, run_view, view_json

__all__ = ["MAX_INPUT_BYTES", "RUN_ID_RE", "RunService"]

log = logging.getLogger("orchestrator.runs")


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
        store_script: Callable[[str], str] | None = None,
        pin: Callable[[Any], str | None] | None = None,
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
        self.manifest = manifest
        self.default_timeout = default_timeout
        self.arrive = arrive
        self.release = release
        # Admission (services/admission/): its stages, in order, for every trigger.
        # `pin`: the version of its backend's code a new durable run starts on.
        self.launcher = Launcher(executor, arrive, pin=pin)
        self.debouncer = Debouncer(executor.store, executor.clock)
        self.pipeline = Pipeline(
            manifest, self.launcher, self.debouncer,
            IdempotencyKeys(executor.store.control, executor.settings.idempotency_retention),
            default_timeout=default_timeout, clock=executor.clock, store_script=store_script,
            batcher=Batcher(executor.store, executor.clock, self._arrive,
                            remember=executor.settings.event_retention))
        # A durable run's children: cancelling it cancels them.
        self.children_of = children_of

    def _arrive(self, run: RunRecord) -> RunRecord:
        """A full batch's run, carried on through the gate (its requests are its own)."""
        with metered(run.run_id):
            return self.arrive(run)

    def new_run_id(self, workflow: str, now: float) -> str:
        return new_run_id(workflow, now)

    def workflow(self, name: str) -> Any:
        return self.pipeline.workflow(name)

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
        started = self.admit(StartRequest(workflow, input, run_id, trigger, overlap=overlap,
                                          fire_key=fire_key))
        return started.run, started.created

    def admit(self, req: StartRequest) -> Started:
        """Take one trigger through admission (services/admission/pipeline.py): the run
        it made or joined, and how (`Outcome`)."""
        return self.pipeline.admit(req)

    # The create-and-launch stage's, for those that carry a run on (the gate, the sweeper).

    def rows_for(self, run: RunRecord) -> list[StepRecord]:
        return self.launcher.rows_for(run)

    def launch(self, run: RunRecord) -> None:
        self.launcher.launch(run)

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
        return merged_history(run.history, ((s.step, s.history)
                                            for s in self.store.steps.query_steps(run_id)))

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
        if run is not None and run.imported is not None:
            raise imported_run(run_id, run.imported, "a cancel")
        if run is None or run.status.terminal:
            return False
        if run.status is RunStatus.QUEUED:
            try:
                done = self.store.runs.finish_queued(
                    run_id, RunStatus.KILLED, killed_error(reason), now,
                    now + self.executor.settings.ttl_failed, kill_reason=reason,
                    created_at=run.created_at,
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
            {s.step: run_id for s in steps
             if s.status is StepStatus.SUCCESS and not self._rejected(old, s.step)}
        )
        new_input = old.input if input is _KEEP else input
        started = self.admit(StartRequest(
            old.workflow, new_input, new_run_id, {"source": "rerun", "run_id": run_id},
            definition=definition, rerun_of=run_id, kept_input=input is _KEEP))
        return started.run, started.created


    def _rejected(self, run: RunRecord, step: str) -> bool:
        """Whether `step` is an approval gate that was rejected: it ended its step (with
        `approved: false`) but stopped the run, so a rerun asks again rather than reuse
        the rejection (one read, for a gate step only)."""
        spec = run.definition.specs.get(step)
        if spec is None or spec.approval is None:
            return False
        gate = self.store.approvals.get(run.run_id, step)
        return gate is not None and gate.status == "rejected"


def _version(run: RunRecord) -> Any:
    """What changes when a durable run's kept journal must be forgotten (a reset, a
    resume, a pause change the run's history)."""
    return len(run.history), run.history[-1:]
