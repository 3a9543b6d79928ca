"""Reconciliation: what a sweep must repair in one run, from a snapshot of its rows.

Pure: nothing here does I/O; the sweeper applies the commands as conditional writes."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from orchestrator.engine.attempts import Outcome, OutcomeKind, Succeed, after_attempt
from orchestrator.engine.commands import (
    Command,
    CreateStep,
    ExpireLease,
    Finalize,
    Promote,
    Redispatch,
    Restamp,
    SkipStep,
)
from orchestrator.engine.policies import OnFailure
from orchestrator.engine.records import RunRecord, StepRecord
from orchestrator.engine.states import StepStatus
from orchestrator.engine.transitions import after_failure, final_status, stop_pass, stop_reason
from orchestrator.errors import Code, error_doc

__all__ = ["SweepPolicy", "awaiting_message", "reconcile", "redispatch_grace"]


@dataclass(frozen=True)
class SweepPolicy:
    # An unclaimed dispatch older than this is presumed lost and sent again.
    redispatch_after: float
    # Leave fresh work to the normal path: only repair a promotion this long overdue.
    settle: float = 30.0
    # How long a finished step row is kept (its terminal write stamps it): a run still
    # going renews rows due to expire within half of it.
    step_retention: float = 30 * 24 * 3600.0


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
        if now - started < policy.settle:
            return []
        if run.kill_requested or run.halted:  # nothing of a stopping run starts
            missing = [_skipped(p, now, stop_reason(run)) for p in missing]
        return [CreateStep(p) for p in missing]

    def progress(dep: StepRecord) -> float:
        # The last sign of life of whoever advances `dep`: its finish, or the latest of
        # its dependants it promoted. A worker promoting a wide fan-out keeps this fresh;
        # one that died mid-way lets it age past `settle`.
        times = [dep.finished_at or 0.0]
        times += [by_name[n].ready_at or 0.0 for n in dep.dependants if n in by_name]
        return max(times)

    doomed: set[str] = set()
    if run.kill_requested or run.halted:
        # A stop whose process died half-way: the same pass, from these rows.
        for stop in stop_pass(steps, stop_reason(run)):
            cmds.append(stop)
            if isinstance(stop, SkipStep):
                doomed.add(stop.step)
    elif run.on_failure is OnFailure.HALT:
        failed = [s for s in steps if s.status is StepStatus.FAILED]
        if failed and now - max(s.finished_at or 0.0 for s in failed) >= policy.settle:
            # A step failed and its worker died before halting the run.
            return [after_failure(OnFailure.HALT, failed[0])]
    for s in steps:
        if s.step in doomed:
            continue
        if s.status.terminal:
            if s.expires_at is not None and s.expires_at - now < policy.step_retention / 2:
                cmds.append(Restamp(s.step, now + policy.step_retention))
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
                error=error_doc(Code.LEASE_EXPIRED, f"worker {s.lease_owner} stopped answering"),
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


def _skipped(row: StepRecord, now: float, reason: str) -> StepRecord:
    return replace(
        row, status=StepStatus.SKIPPED, attempt=0, ready_at=None, finished_at=now,
        at_launch=False, error=error_doc(Code.SKIPPED, reason),
        history=({"at": round(now, 3), "type": "step.skipped", "reason": reason},),
    )
