"""Run and step states, and the one table of legal transitions (a test walks it)."""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "RUN_TRANSITIONS",
    "STEP_TRANSITIONS",
    "RunStatus",
    "StepStatus",
    "can_move",
]


class RunStatus(StrEnum):
    QUEUED = "queued"  # created, waiting for admission (a concurrency group or throttle)
    RUNNING = "running"
    SUCCESS = "success"
    FAILED = "failed"
    KILLED = "killed"  # cancelled: by request, or replaced by a newer run of its group
    SKIPPED = "skipped"  # never started: its group was busy (policy skip) or over its rate

    @property
    def terminal(self) -> bool:
        return self not in (RunStatus.QUEUED, RunStatus.RUNNING)


class StepStatus(StrEnum):
    BLOCKED = "blocked"  # waiting on a dependency
    READY = "ready"  # dependencies satisfied, claimed for dispatch, message sent
    DISPATCHED = "dispatched"  # its job is pending a retry, or running under a lease
    SUCCESS = "success"
    FAILED = "failed"  # retries exhausted or a permanent error
    SKIPPED = "skipped"  # an ancestor failed, or the run was halted or killed

    @property
    def terminal(self) -> bool:
        return self in _TERMINAL_STEPS


_TERMINAL_STEPS = frozenset({StepStatus.SUCCESS, StepStatus.FAILED, StepStatus.SKIPPED})

S = StepStatus
STEP_TRANSITIONS: dict[StepStatus, frozenset[StepStatus]] = {
    # blocked -> dispatched is a promotion that the promoting worker claims at once.
    S.BLOCKED: frozenset({S.READY, S.DISPATCHED, S.SKIPPED}),
    S.READY: frozenset({S.DISPATCHED, S.SKIPPED}),
    # dispatched -> dispatched is a retry (attempt + 1) or a lease taken over.
    S.DISPATCHED: frozenset({S.DISPATCHED, S.SUCCESS, S.FAILED, S.SKIPPED}),
    S.SUCCESS: frozenset(),
    S.FAILED: frozenset(),
    S.SKIPPED: frozenset(),
}

R = RunStatus
RUN_TRANSITIONS: dict[RunStatus, frozenset[RunStatus]] = {
    R.QUEUED: frozenset({R.RUNNING, R.KILLED, R.SKIPPED}),
    R.RUNNING: frozenset({R.SUCCESS, R.FAILED, R.KILLED}),
    R.SUCCESS: frozenset(),
    R.FAILED: frozenset(),
    R.KILLED: frozenset(),
    R.SKIPPED: frozenset(),
}


def can_move(old: StepStatus, new: StepStatus) -> bool:
    return new in STEP_TRANSITIONS[old]
