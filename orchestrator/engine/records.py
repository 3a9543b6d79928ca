"""Run and step rows as frozen dataclasses: what the engine decides on.

How they are stored in DynamoDB is adapters/store/codec.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orchestrator.engine.definition import Definition, Gate, Trigger
from orchestrator.engine.policies import OnFailure
from orchestrator.engine.states import RunStatus, StepStatus

__all__ = [
    "RunRecord",
    "StepRecord",
]


@dataclass(frozen=True)
class StepRecord:
    run_id: str
    step: str
    status: StepStatus
    backend: str
    route: str
    deps: tuple[str, ...] = ()
    dependants: tuple[str, ...] = ()
    satisfied: frozenset[str] = frozenset()
    payload: dict[str, Any] = field(default_factory=dict)
    attempt: int = 0
    max_attempts: int = 4
    timeout: float = 60.0
    retry_strategy: str = "linear"
    retry_delay: float = 1.0
    retry_max_delay: float = 300.0
    lease_owner: str | None = None
    lease_until: float | None = None
    due_at: float | None = None
    ready_at: float | None = None
    started_at: float | None = None
    # When the current attempt's claim was written (its own landing is known by it).
    attempt_started: float | None = None
    finished_at: float | None = None
    has_output: bool = False
    output: Any = None
    output_ref: str | None = None
    output_size: int = 0
    error: dict[str, Any] | None = None
    expires_at: float | None = None
    # Set on the rows a finishing run still waits for (see Executor.finish_if_done).
    count_me: bool = False
    # Set on an in-flight step of a stopping run: it lands, and is never tried again.
    stopping: bool = False
    # When a sweep must look at this row if nobody moved it on (engine/wakes.py), and
    # how often its dispatch was sent again.
    wake_at: float | None = None
    resends: int = 0
    # A durable run's driver (engine/durable_waits.py): what it waits for while nobody holds
    # it, and how often it was poked (a signal landed: look again).
    waiting: dict[str, Any] | None = None
    pokes: int = 0
    # Every transition of this row with its time (appended in the same conditional
    # writes that make them, so history costs no extra request).
    history: tuple[dict[str, Any], ...] = ()
    # The AWS requests made for this step's attempts, by "service.Operation", as its
    # own writes carried them (adapters/metering.py).
    requests: dict[str, int] = field(default_factory=dict)

    @property
    def claimed(self) -> bool:
        return self.lease_owner is not None

    @property
    def counted(self) -> bool:
        """Does this step's terminal transition decrement the run's `remaining` hint?
        Sinks do (a run whose sinks all succeeded has succeeded everywhere), and so do
        the steps a failing run was found still waiting for."""
        return not self.dependants or self.count_me


@dataclass(frozen=True)
class RunRecord:
    run_id: str
    workflow: str
    status: RunStatus
    input: Any
    definition: Definition
    created_at: float
    total: int
    remaining: int
    on_failure: OnFailure = OnFailure.HALT
    updated_at: float | None = None
    kill_requested: bool = False
    kill_reason: str | None = None
    halted: bool = False
    # The run's stop instant: when a step's final failure under `halt`, or a cancel, was
    # committed (with the same write). No step whose start check reads it set is called.
    stop_at: float | None = None
    error: dict[str, Any] | None = None
    finished_at: float | None = None
    expires_at: float | None = None
    # Where the run came from (api, webhook, event, schedule, manual, rerun; with ids).
    trigger: Trigger | None = None
    rerun_of: str | None = None
    # Admission (status queued): the concurrency group and throttle, and the throttle
    # slot (a time before which the run may not start).
    gate: Gate | None = None
    admit_at: float | None = None
    started_at: float | None = None
    # When a sweep must look at this run if nobody moved it on (engine/wakes.py).
    wake_at: float | None = None
    # A durable run stopped by a replay mismatch (both operations): it is `running`
    # in the state machine and shown as `paused` until resumed, reset or cancelled.
    paused: dict[str, Any] | None = None
    # A durable run's version of its backend's code (services/versions/): it is called
    # there while it lives, unless a migration the check allowed moves it. None: the
    # backend has no versions registered (the backend's url).
    version: str | None = None
    # It took a lock (`ctx.lock`, a step's `lock:`) at some point: its end releases
    # what it still holds (set in the lock's own transaction; a run that never locks
    # pays nothing at its end).
    holds_locks: bool = False
    # Copied from another stack (`orchestrator runs pull`): the API it came from. Such
    # a run is inert here: no sweep repairs it, no worker advances it (its status is
    # the one it had there).
    imported: str | None = None
    history: tuple[dict[str, Any], ...] = ()
    # The AWS requests made for the run that its run-row writes carried (the rest are
    # on its step rows), by "service.Operation" (adapters/metering.py).
    requests: dict[str, int] = field(default_factory=dict)

    @property
    def stopping(self) -> bool:
        """Cancelled, halted, or halting: no step of it starts any more."""
        return self.kill_requested or self.halted or self.stop_at is not None

    @property
    def follow_ups(self) -> bool:
        """Whether its finish is followed by work another process must redo if the
        finisher dies: a concurrency group's lock to release, a parent run waiting for
        it or to notify. Only then does the finish move its wake (engine/wakes.py)."""
        gate, trigger = self.gate, self.trigger
        return bool(gate is not None and gate.group) or self.holds_locks or (
            trigger is not None and trigger.source == "parent"
            and ("row" in trigger.detail or "notify" in trigger.detail))

    @property
    def shown_status(self) -> str:
        """The status as users see it: `paused` for a paused running run."""
        if self.paused is not None and self.status is RunStatus.RUNNING:
            return "paused"
        return self.status.value
