"""Reconciliation: what a sweep must repair in one run, from a snapshot of its rows.

Pure: nothing here does I/O; the sweeper applies the commands as conditional writes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

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

__all__ = ["SweepPolicy", "reconcile", "settle_due"]


@dataclass(frozen=True)
class SweepPolicy:
    # An unclaimed dispatch older than this is presumed lost and sent again.
    redispatch_after: float
    # Leave fresh work to the normal path: only repair a promotion this long overdue.
    settle: float = 30.0
    # How long a finished step row is kept (its terminal write stamps it): a run still
    # going renews rows due to expire within half of it.
    step_retention: float = 30 * 24 * 3600.0


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
    decision made on old facts finds its guard false and changes nothing. A run
    imported from another stack is never repaired: it is a copy to read and replay."""
    if run.status.terminal or run.imported is not None:
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
        # A root its start left out is not missing (it is ready as planned), but the
        # start that died before writing the rows died before dispatching it too.
        return [*(CreateStep(p) for p in missing),
                *(Redispatch(s.step, s.attempt, s.due_at) for s in steps
                  if s.status is StepStatus.READY and not s.claimed and _lost(s, now, policy))]

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
        elif s.waiting is not None and not s.claimed and s.wake_at is None:
            continue  # a durable run paused, or waiting for a poke (its wake repairs one)
        elif s.status is StepStatus.READY or (s.status is StepStatus.DISPATCHED and not s.claimed):
            if _lost(s, now, policy):
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


def settle_due(
    run: RunRecord, steps: Sequence[StepRecord], now: float, policy: SweepPolicy
) -> float | None:
    """When a repair that `reconcile` leaves to the normal path for `settle` seconds
    (a start still writing rows, a halt, a promotion) falls due, if one is pending: the
    sweeper wakes the run again then. Rows with a wake of their own are not counted."""
    if run.status.terminal:
        return None
    due: list[float] = []
    by_name = {s.step: s for s in steps}
    if len(steps) < run.total:
        due.append((run.started_at or run.created_at) + policy.settle)
    elif not (run.kill_requested or run.halted):
        failed = [s.finished_at or 0.0 for s in steps if s.status is StepStatus.FAILED]
        if failed and run.on_failure is OnFailure.HALT:
            due.append(max(failed) + policy.settle)
        for s in steps:
            if s.status is not StepStatus.BLOCKED:
                continue
            deps = [by_name[d] for d in s.deps if d in by_name]
            if deps and all(d.status is StepStatus.SUCCESS for d in deps):
                times = [d.finished_at or 0.0 for d in deps]
                times += [by_name[n].ready_at or 0.0 for d in deps for n in d.dependants
                          if n in by_name]
                due.append(max(times) + policy.settle)
    later = [t for t in due if t > now]
    return min(later) if later else None


def _lost(s: StepRecord, now: float, policy: SweepPolicy) -> bool:
    """Whether an unclaimed dispatch counts as lost: its wake says when (doubling with
    each resend), else `redispatch_after` past when it was due or ready."""
    since = max(s.due_at or 0.0, s.ready_at or 0.0)
    due = s.wake_at if s.wake_at is not None else since + policy.redispatch_after
    return now >= due


def _skipped(row: StepRecord, now: float, reason: str) -> StepRecord:
    return replace(
        row, status=StepStatus.SKIPPED, attempt=0, ready_at=None, finished_at=now,
        error=error_doc(Code.SKIPPED, reason),
        history=({"at": round(now, 3), "type": "step.skipped", "reason": reason},),
    )
