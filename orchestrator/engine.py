"""The engine's decisions: pure functions of rows, a clock reading and a random number.

Nothing here does I/O. The worker, the sweeper and the tests all call these functions
and hand the resulting commands to the store and the queue, so there is one definition
of what a finished attempt, a lost message or a halted run changes."""

from __future__ import annotations

import email.utils
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from orchestrator.records import RunRecord, StepRecord
from orchestrator.states import RunStatus, StepStatus

__all__ = [
    "Outcome",
    "OutcomeKind",
    "StepSpec",
    "after_attempt",
    "backoff",
    "classify_response",
    "final_status",
    "plan_steps",
    "reconcile",
]

# Status codes in 4xx that mean "try again later", not "your request is wrong".
RETRYABLE_4XX = frozenset({408, 409, 425, 429})
MAX_RETRY_AFTER = 24 * 3600.0


@dataclass(frozen=True)
class StepSpec:
    """What the engine needs to know about one declared step."""

    name: str
    backend: str
    route: str
    deps: tuple[str, ...] = ()
    payload: Mapping[str, Any] = field(default_factory=dict)
    retry_max: int = 3
    retry_strategy: str = "linear"
    retry_delay: float = 1.0
    retry_max_delay: float = 300.0
    timeout: float = 60.0


def plan_steps(run_id: str, specs: Sequence[StepSpec], now: float) -> list[StepRecord]:
    """Rows for a new run. Roots start `ready` at attempt 1 (their dispatch is the run's
    first act); everything else starts `blocked`. Reverse edges are stored on each row so
    that a finished step touches only its dependants (O(out-degree))."""
    dependants: dict[str, list[str]] = {s.name: [] for s in specs}
    for s in specs:
        for d in s.deps:
            dependants[d].append(s.name)
    rows = []
    for s in specs:
        root = not s.deps
        rows.append(
            StepRecord(
                run_id=run_id,
                step=s.name,
                status=StepStatus.READY if root else StepStatus.BLOCKED,
                backend=s.backend,
                route=s.route,
                deps=tuple(s.deps),
                dependants=tuple(dependants[s.name]),
                payload=dict(s.payload),
                attempt=1 if root else 0,
                max_attempts=s.retry_max + 1,
                timeout=s.timeout,
                retry_strategy=s.retry_strategy,
                retry_delay=s.retry_delay,
                retry_max_delay=s.retry_max_delay,
                ready_at=now if root else None,
                history=({"at": round(now, 3), "type": "step.ready"},) if root else (),
            )
        )
    return rows


class OutcomeKind(StrEnum):
    SUCCESS = "success"
    RETRYABLE = "retryable"
    PERMANENT = "permanent"


@dataclass(frozen=True)
class Outcome:
    kind: OutcomeKind
    output: Any = None
    error: dict[str, Any] | None = None
    retry_after: float | None = None


def parse_retry_after(value: str | None, now: float) -> float | None:
    """`Retry-After` is either delta-seconds or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - now
    if math.isnan(seconds) or seconds < 0:
        return 0.0
    return min(seconds, MAX_RETRY_AFTER)


def _error_reason(body: Any) -> Any:
    if isinstance(body, dict) and "error" in body:
        return body["error"]
    return body


def classify_response(
    status: int, body: Any, *, retry_after: str | None, now: float, body_is_json: bool
) -> Outcome:
    """The function contract: 2xx+JSON is success, 4xx is permanent except 408/409/425/429,
    5xx is retryable; Retry-After is honoured."""
    if 200 <= status < 300:
        if not body_is_json:
            return Outcome(
                OutcomeKind.PERMANENT,
                error={
                    "code": "invalid_output",
                    "status": status,
                    "message": "2xx response body is not JSON",
                },
            )
        return Outcome(OutcomeKind.SUCCESS, output=body)
    err = {"code": "http_error", "status": status, "reason": _error_reason(body)}
    if 400 <= status < 500 and status not in RETRYABLE_4XX:
        return Outcome(OutcomeKind.PERMANENT, error=err)
    return Outcome(
        OutcomeKind.RETRYABLE, error=err, retry_after=parse_retry_after(retry_after, now)
    )


def backoff(strategy: str, base: float, cap: float, attempt: int, rand: float) -> float:
    """Delay before attempt `attempt + 1`, after `attempt` failed.

    linear: base * attempt; exponential: base * 2^(attempt-1); both capped, then
    "equal jitter" (half fixed, half random) so retries of a fan-out spread out."""
    if strategy == "exponential":
        raw = base * float(2 ** max(0, attempt - 1))
    else:
        raw = base * max(1, attempt)
    d = min(raw, cap)
    return d / 2 + d / 2 * max(0.0, min(1.0, rand))


@dataclass(frozen=True)
class Succeed:
    output: Any


@dataclass(frozen=True)
class Retry:
    next_attempt: int
    due_at: float
    error: dict[str, Any]


@dataclass(frozen=True)
class Fail:
    error: dict[str, Any]


Decision = Succeed | Retry | Fail


def after_attempt(step: StepRecord, outcome: Outcome, now: float, rand: float) -> Decision:
    """What one finished attempt changes on its own row."""
    if outcome.kind is OutcomeKind.SUCCESS:
        return Succeed(outcome.output)
    error = dict(outcome.error or {})
    error.setdefault("attempt", step.attempt)
    if outcome.kind is OutcomeKind.RETRYABLE and step.attempt < step.max_attempts:
        if outcome.retry_after is not None:
            delay = outcome.retry_after
        else:
            delay = backoff(
                step.retry_strategy, step.retry_delay, step.retry_max_delay, step.attempt, rand
            )
        return Retry(step.attempt + 1, now + delay, error)
    if outcome.kind is OutcomeKind.RETRYABLE:
        error["exhausted"] = True
    return Fail(error)


def final_status(run: RunRecord, steps: Iterable[StepRecord]) -> RunStatus | None:
    """The run's terminal status, or None while anything can still move."""
    any_failed = False
    for s in steps:
        if not s.status.terminal:
            return None
        if s.status is StepStatus.FAILED:
            any_failed = True
    if run.kill_requested:
        return RunStatus.KILLED
    if any_failed or run.halted:
        return RunStatus.FAILED
    return RunStatus.SUCCESS


# ---- reconciliation (the sweeper) -------------------------------------------------


@dataclass(frozen=True)
class CreateStep:
    record: StepRecord


@dataclass(frozen=True)
class Promote:
    step: str
    ndeps: int


@dataclass(frozen=True)
class SkipStep:
    step: str
    statuses: tuple[StepStatus, ...]
    reason: str


@dataclass(frozen=True)
class Redispatch:
    step: str
    attempt: int
    due_at: float | None


@dataclass(frozen=True)
class ExpireLease:
    step: str
    attempt: int
    owner: str
    decision: Retry | Fail


@dataclass(frozen=True)
class Finalize:
    status: RunStatus


Command = CreateStep | Promote | SkipStep | Redispatch | ExpireLease | Finalize


@dataclass(frozen=True)
class SweepPolicy:
    # An unclaimed dispatch older than this is presumed lost and sent again.
    redispatch_after: float
    # Leave fresh work to the normal path: only repair a promotion this long overdue.
    settle: float = 30.0


def awaiting_message(steps: Iterable[StepRecord], now: float, older_than: float = 0.0) -> int:
    """Steps whose next move is a message no worker has acted on for `older_than` s."""
    return sum(
        1
        for s in steps
        if not s.claimed
        and (s.status is StepStatus.READY
             or (s.status is StepStatus.DISPATCHED and (s.due_at or 0.0) <= now))
        and now - max(s.ready_at or 0.0, s.due_at or 0.0) >= older_than
    )


def redispatch_grace(
    backlog: int | None, awaiting: int, settings: Any, *, read_time: float = 0.0
) -> float:
    """How old an unclaimed dispatch must be before a sweep presumes its message lost.

    Empty queues: nothing can be waiting in them, so after one sweep interval the message
    is gone. More steps awaiting a message for longer than `redispatch_after` than there
    are messages queued: some are lost, resend the old ones. Otherwise every awaited
    message may simply be queued behind a backlog: only a long ceiling, so a busy queue
    is not flooded with duplicates.

    `read_time` is how long a sweep takes to read the rows: a promoter stalled behind
    a slow sweep may hold promoted-but-unsent dispatches that long, so it is added twice."""
    if backlog == 0:
        return float(settings.sweep_interval) + 2 * read_time
    if backlog is not None and awaiting > backlog:
        return float(settings.redispatch_after)
    return float(settings.redispatch_ceiling)


def not_started_statuses(run: RunRecord) -> tuple[StepStatus, ...]:
    """Halt skips what has not started; kill also stops steps waiting for a retry."""
    if run.kill_requested:
        return (StepStatus.BLOCKED, StepStatus.READY, StepStatus.DISPATCHED)
    return (StepStatus.BLOCKED, StepStatus.READY)


def reconcile(
    run: RunRecord,
    steps: Sequence[StepRecord],
    planned: Sequence[StepRecord],
    now: float,
    policy: SweepPolicy,
    rand: float = 0.5,
) -> list[Command]:
    """Everything a sweep must repair in one run, from a snapshot of its rows.

    The snapshot may be stale; every command is applied as a conditional write, so a
    decision made on old facts finds its guard false and changes nothing."""
    if run.status.terminal:
        return []
    cmds: list[Command] = []
    by_name = {s.step: s for s in steps}
    # A start still writing a wide run's rows is not a crashed one: rows are rebuilt only
    # once the run is as old as a lost message would be.
    started = run.started_at or run.created_at
    missing = [p for p in planned if p.step not in by_name]
    if missing or len(steps) < run.total:
        # Repair the rows first (the next sweep sees a whole run); never judge a run
        # from part of its rows.
        return [CreateStep(p) for p in missing] if now - started >= policy.settle else []

    def progress(dep: StepRecord) -> float:
        # The last sign of life of whoever advances `dep`: its finish, or the latest of
        # its dependants it promoted. A worker promoting a wide fan-out keeps this fresh;
        # one that died mid-way lets it age past `settle`.
        times = [dep.finished_at or 0.0]
        times += [by_name[n].ready_at or 0.0 for n in dep.dependants if n in by_name]
        return max(times)

    stopping = run.kill_requested or run.halted
    stop_statuses = not_started_statuses(run)
    doomed: set[str] = set()
    for s in steps:
        if stopping and s.status in stop_statuses and not s.claimed:
            cmds.append(
                SkipStep(
                    s.step, stop_statuses, "run killed" if run.kill_requested else "run halted"
                )
            )
            doomed.add(s.step)
    for s in steps:
        if s.step in doomed:
            continue
        if s.status is StepStatus.BLOCKED:
            dep_rows = [by_name[d] for d in s.deps if d in by_name]
            if any(d.status in (StepStatus.FAILED, StepStatus.SKIPPED) for d in dep_rows):
                cmds.append(SkipStep(s.step, (StepStatus.BLOCKED,), "dependency did not succeed"))
            elif all(d.status is StepStatus.SUCCESS for d in dep_rows):
                last = max((progress(d) for d in dep_rows), default=0.0)
                if now - last >= policy.settle:
                    cmds.append(Promote(s.step, len(s.deps)))
        elif s.status is StepStatus.READY or (s.status is StepStatus.DISPATCHED and not s.claimed):
            since = max(s.due_at or 0.0, s.ready_at or 0.0)
            if now - since >= policy.redispatch_after:
                cmds.append(Redispatch(s.step, s.attempt, s.due_at))
        elif (
            s.status is StepStatus.DISPATCHED and s.lease_until is not None and now > s.lease_until
        ):
            lost = Outcome(
                OutcomeKind.RETRYABLE,
                error={
                    "code": "lease_expired",
                    "message": f"worker {s.lease_owner} stopped answering",
                },
            )
            decision = after_attempt(s, lost, now, rand)
            assert not isinstance(decision, Succeed)
            cmds.append(ExpireLease(s.step, s.attempt, s.lease_owner or "", decision))
    if not cmds:
        # The `remaining` counter is only a hint that triggers the finish; a decrement
        # lost with a crashed worker leaves it high, and this is where that run ends.
        status = final_status(run, steps)
        if status is not None:
            cmds.append(Finalize(status))
    return cmds
