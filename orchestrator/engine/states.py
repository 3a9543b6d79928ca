"""Run and step states, and the one table of legal transitions (a test walks it)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

__all__ = [
    "RUN_MOVES",
    "RUN_TRANSITIONS",
    "STEP_MOVES",
    "STEP_TRANSITIONS",
    "Move",
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


class Released(StrEnum):
    """How releasing a claimed row to wait went (a durable driver's, a gate's, a lock's
    line): the wait is recorded and the lease let go (`OK`); something landed meanwhile,
    look again, the lease is still yours (`POKED`); the run is being stopped, the lease is
    still yours, end the row (`STOPPING`); or the lease is someone else's (`LOST`)."""

    OK = "ok"
    POKED = "poked"
    STOPPING = "stopping"
    LOST = "lost"


@dataclass(frozen=True)
class Move:
    """One guarded write of a row's status, as the store makes it: the statuses its
    condition accepts and the status it sets (None: it sets none, e.g. a flag). A move
    the transition table does not allow cannot be made: it fails at import time."""

    name: str
    sources: frozenset[StrEnum]
    target: StrEnum | None = None

    def __post_init__(self) -> None:
        table: dict[Any, frozenset[Any]] = (
            STEP_TRANSITIONS if isinstance(next(iter(self.sources)), StepStatus)
            else RUN_TRANSITIONS
        )
        for src in self.sources:
            if self.target is not None and self.target not in table[src]:
                raise ValueError(f"move {self.name}: {src} -> {self.target} is not in the table")
            if self.target is None and src.terminal:  # type: ignore[attr-defined]
                raise ValueError(f"move {self.name}: writes a terminal {src} row")


def _step(name: str, sources: set[StepStatus], target: StepStatus | None = None) -> Move:
    return Move(name, frozenset(sources), target)


def _run(name: str, sources: set[RunStatus], target: RunStatus | None = None) -> Move:
    return Move(name, frozenset(sources), target)


B, RD, D = S.BLOCKED, S.READY, S.DISPATCHED
# Every guarded write of a step row (adapters/store/step_writes.py and the step_* modules
# beside it, and journal.py, name their move).
STEP_MOVES = {
    m.name: m
    for m in (
        _step("promote", {B}, RD),
        _step("promote+claim", {B}, D),
        _step("satisfy", {B}),
        _step("claim", {RD, D}, D),
        _step("succeed", {D}, S.SUCCESS),
        # A step whose `if:` is false ends skipped, promoting its dependants as a
        # success does (engine/transitions: not a skip below a failure).
        _step("skip-if", {D}, S.SKIPPED),
        _step("retry", {D}, D),
        _step("fail", {D}, S.FAILED),
        _step("skip", {B, RD, D}, S.SKIPPED),
        _step("flag-counted", {B, RD, D}),
        _step("redispatch", {RD, D}),
        _step("stop-in-flight", {D}),
        _step("abandon", {D}, S.SKIPPED),
        # A durable run's drivers (adapters/store/journal.py): a leased one released to
        # wait or its lease renewed, a free one poked (look again) or held by an
        # operator, a parallel branch's row ended once its result is counted (taken
        # first if its dispatch was not: another call ran the branch to its end).
        _step("suspend", {D}),
        _step("renew", {D}),
        _step("poke", {D}),
        _step("hold", {RD, D}, D),
        _step("take-branch", {RD}, D),
        _step("settle-branch", {D}, S.SUCCESS),
    )
}
# Every guarded write of a run row (adapters/store/run_rows.py names its move).
RUN_MOVES = {
    m.name: m
    for m in (
        _run("admit", {R.QUEUED}, R.RUNNING),
        _run("throttle-slot", {R.QUEUED}),
        _run("debounce", {R.QUEUED}),
        _run("batch", {R.QUEUED}),
        _run("skip-queued", {R.QUEUED}, R.SKIPPED),
        _run("kill-queued", {R.QUEUED}, R.KILLED),
        _run("count", {R.RUNNING}),
        _run("halt", {R.RUNNING}),
        _run("pause", {R.RUNNING}),
        _run("note", {R.RUNNING}),
        _run("request-kill", {R.RUNNING}),
        _run("succeed", {R.RUNNING}, R.SUCCESS),
        _run("fail", {R.RUNNING}, R.FAILED),
        _run("kill", {R.RUNNING}, R.KILLED),
    )
}
