"""Every command the engine returns: frozen facts about what must change, applied by
the executor (services/execution/executor.py) as conditional writes and messages, one method per
command. A command decided on stale rows finds its guard false and changes nothing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.engine.attempts import Fail, Retry
from orchestrator.engine.records import StepRecord
from orchestrator.engine.states import RunStatus, StepStatus

__all__ = [
    "Command",
    "CreateStep",
    "ExpireLease",
    "Finalize",
    "Finish",
    "HaltRun",
    "Promote",
    "Redispatch",
    "Restamp",
    "SkipBranch",
    "SkipStep",
    "StopInFlight",
]


@dataclass(frozen=True)
class CreateStep:
    """Write a step row a crashed start left out."""

    record: StepRecord


@dataclass(frozen=True)
class Promote:
    """blocked -> ready: every dependency succeeded but the promotion was never made."""

    step: str
    ndeps: int


@dataclass(frozen=True)
class SkipStep:
    """Mark a step that has not started (no lease, one of `statuses`) as skipped."""

    step: str
    statuses: tuple[StepStatus, ...]
    reason: str


@dataclass(frozen=True)
class StopInFlight:
    """A stopping run's step that is running under a lease: it lands, but is never tried
    again (its row is flagged `stopping`; claims and retries test the flag)."""

    step: str


@dataclass(frozen=True)
class Restamp:
    """A finished step of a run still going would expire within half its retention:
    give it a new expiry (the run is still reading it)."""

    step: str
    expires_at: float


@dataclass(frozen=True)
class Redispatch:
    """Send a dispatch again: nobody acted on the last one."""

    step: str
    attempt: int
    due_at: float | None


@dataclass(frozen=True)
class ExpireLease:
    """A worker stopped answering: its attempt counts as failed, then retry or fail."""

    step: str
    attempt: int
    owner: str
    decision: Retry | Fail


@dataclass(frozen=True)
class SkipBranch:
    """continue-independent: skip everything below a failed step, nothing else."""

    failed: str
    dependants: tuple[str, ...]
    reason: str


@dataclass(frozen=True)
class HaltRun:
    """onFailure halt: stop every step that has not started, then flag the run halted
    (with `error`); in-flight steps land."""

    error: dict[str, Any]
    reason: str


@dataclass(frozen=True)
class Finalize:
    """The rows say the run is over: verify and finish it."""

    status: RunStatus


@dataclass(frozen=True)
class Finish:
    """Terminalize the run: its status, the error users see, when it expires, and the
    step rows that must be stamped to live as long as it (usually none)."""

    status: RunStatus
    error: dict[str, Any] | None
    expires_at: float
    restamp: tuple[str, ...] = ()


Command = (
    CreateStep
    | Promote
    | SkipStep
    | StopInFlight
    | Restamp
    | Redispatch
    | ExpireLease
    | SkipBranch
    | HaltRun
    | Finalize
)
