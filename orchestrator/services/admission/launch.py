"""The last stage of admission: create the run and launch it.

The run row is written first (the sweeper can rebuild missing step rows from its
definition), then its step rows, then the roots' dispatch. A run that needs admission
(a throttle, a concurrency group, a debounce) is created `queued` and handed to the gate
(`arrive`: throttle.py, concurrency.py) instead of launched; the gate launches it once
admitted. A run id that exists already answers the existing run (not created)."""

from __future__ import annotations

import logging
import re
import secrets
import time
from collections.abc import Callable
from typing import Any

from orchestrator import telemetry
from orchestrator.adapters.metering import metered
from orchestrator.adapters.queue import Dispatch
from orchestrator.engine.definition import Definition, Gate, Trigger
from orchestrator.engine.plan import plan_steps, unwritten
from orchestrator.engine.records import RunRecord, StepRecord
from orchestrator.engine.rerun import with_reused
from orchestrator.engine.states import RunStatus, StepStatus
from orchestrator.errors import ConditionFailed, UsageError
from orchestrator.services.execution.executor import Executor
from orchestrator.services.values import MAX_VALUE_BYTES, check_value

__all__ = ["MAX_INPUT_BYTES", "RUN_ID_RE", "Launcher", "new_run_id"]

log = logging.getLogger("orchestrator.runs")

RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$")
MAX_INPUT_BYTES = MAX_VALUE_BYTES


def new_run_id(workflow: str, now: float) -> str:
    return f"{workflow}-{int(now * 1000)}-{secrets.token_hex(3)}"


class Launcher:
    """`arrive`: the gate's, for a run created queued."""

    def __init__(self, executor: Executor, arrive: Callable[[RunRecord], RunRecord], *,
                 pin: Callable[[Definition], str | None] | None = None) -> None:
        self.executor = executor
        # The version of its backend's code a durable run starts on (services/versions/).
        self.pin = pin
        self.store = executor.store
        self.clock = executor.clock
        self.arrive = arrive

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
        now = self.clock()
        rid = run_id or new_run_id(workflow, now)
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
            version=self._pin(rid, definition),
            history=(
                {"at": round(now, 3), "type": f"run.{status.value}",
                 "trigger": trigger.to_json()},
            ),
        )
        return run

    def _pin(self, run_id: str, definition: Definition) -> str | None:
        """The version the run starts on; the registry's read, when one is made (at
        most once a second a process), is the run's request."""
        if self.pin is None:
            return None
        with metered(run_id):
            return self.pin(definition)

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
        now = self.clock()
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


def _sent(input: Any, trigger: Trigger) -> tuple[str, Any]:
    """What of a run's input was sent, and so is capped: all of it, but of an event's
    run (its input is the event) the event's data; the name, key and id around it are
    capped by their own rules."""
    if trigger.source == "event" and isinstance(input, dict):
        return "data (an event's)", input.get("data")
    return "input", input
