"""The run's own transitions, decided from its rows: what a failed step does to the rest
of the run (halt, or continue-independent), stopping a run (halt, kill and
cancel-running alike), and its finish (status, error, expiry).

**Stopping holds whatever the interleaving.** A stop is a pass over the run's rows: every
step that has not started (blocked, ready, or waiting for a retry) is skipped with a
guard that it holds no lease, and every step running under a lease is flagged
`stopping`. Promotion is guarded by `blocked` and a claim by `ready | dispatched`, no
lease and no `stopping` flag, so once the pass has been over a row nothing can start it:
a promotion racing the pass finds the row skipped, a claim racing it either wins (the
step started before the pass reached it, and lands) or finds it skipped, and a flagged
step that fails is not tried again. A halt is flagged on the run row after its pass, so
no step starts after the run's `run.halted` entry. If the process stopping the run dies
half-way, the sweeper runs the same pass from the same rows (`reconcile`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from orchestrator.engine.commands import Finish, HaltRun, SkipBranch, SkipStep, StopInFlight
from orchestrator.engine.durable_scopes import is_driver
from orchestrator.engine.policies import OnFailure
from orchestrator.engine.records import RunRecord, StepRecord
from orchestrator.engine.states import RunStatus, StepStatus
from orchestrator.errors import Code, error_doc

__all__ = [
    "NOT_STARTED",
    "after_failure",
    "final_status",
    "finish",
    "halt_error",
    "stop_pass",
    "stop_reason",
]

# What a stop skips: steps that have not started, and steps waiting for a retry.
NOT_STARTED = (StepStatus.BLOCKED, StepStatus.READY, StepStatus.DISPATCHED)


def halt_error(failed: StepRecord) -> dict[str, Any]:
    if is_driver(failed.step) and failed.error:
        # A durable run failed: its workflow's own error is the run's (no "$run" step).
        return dict(failed.error)
    return error_doc(Code.STEP_FAILED, failed_message([failed]), step=failed.step,
                     reason=failed.error)


def failed_message(failed: Sequence[StepRecord]) -> str:
    first = failed[0]
    why = (first.error or {}).get("message") or ""
    more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
    return f"step {first.step} failed{more}: {why}".rstrip(": ")[:500]


def after_failure(on_failure: OnFailure, failed: StepRecord) -> SkipBranch | HaltRun:
    """What a step's failure does to the rest of its run."""
    if on_failure is OnFailure.CONTINUE_INDEPENDENT:
        return SkipBranch(
            failed.step, failed.dependants, f"dependency {failed.step} did not succeed"
        )
    return HaltRun(halt_error(failed), f"run halted: step {failed.step} failed")


def killed_error(reason: str) -> dict[str, Any]:
    return {"code": Code.KILLED.value, "message": f"cancelled: {reason}".rstrip(": "),
            "reason": reason}


def stop_reason(run: RunRecord) -> str:
    if run.kill_requested:
        return f"run killed: {run.kill_reason or ''}".rstrip(": ")
    return "run halted"


def stop_pass(rows: Iterable[StepRecord], reason: str) -> list[SkipStep | StopInFlight]:
    """The pass that stops a run: skip what has not started, flag what is in flight."""
    cmds: list[SkipStep | StopInFlight] = []
    for s in rows:
        if s.status.terminal:
            continue
        if s.claimed:
            if not s.stopping:
                cmds.append(StopInFlight(s.step))
        else:
            cmds.append(SkipStep(s.step, NOT_STARTED, reason))
    return cmds


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


def finish(
    run: RunRecord,
    steps: Sequence[StepRecord],
    now: float,
    *,
    ttl_success: float,
    ttl_failed: float,
) -> Finish | None:
    """The run's finish from its rows (None while anything can still move): its status,
    the error users see (the kill reason, or the failed steps, first by name) and its
    expiry.

    A successful run is kept `ttl_success`, the others `ttl_failed`. Step rows stamp
    `finished + ttl_failed` in their own terminal write (no extra request), so a
    successful run's rows outlive it (reads go through the run: they are never seen)
    and a failed run's rows would expire up to its duration before it: such a run
    expires with its first row instead, unless that is more than `RESTAMP_AFTER` (or a
    tenth of the retention) early, when the rows that would go first are stamped again
    (`restamp`). The sweeper keeps the finished rows of a run that runs for longer than
    half the retention alive (engine.reconcile)."""
    status = final_status(run, steps)
    if status is None:
        return None
    ttl = ttl_success if status is RunStatus.SUCCESS else ttl_failed
    expires = now + ttl
    error: dict[str, Any] | None = None
    failed = [s for s in steps if s.status is StepStatus.FAILED]
    if status is RunStatus.KILLED:
        error = killed_error(run.kill_reason or "")
    elif status is RunStatus.FAILED:
        error = {
            "code": Code.STEP_FAILED.value,
            "message": failed_message(failed) if failed else "the run was halted",
            "step": failed[0].step if failed else None,
            "steps": [s.step for s in failed],
            "reason": failed[0].error if failed else None,
        }
    early = [s for s in steps if s.expires_at is None or s.expires_at < expires]
    if not early:
        return Finish(status, error, expires)
    first = min(s.expires_at or 0.0 for s in early)
    if first >= expires - min(RESTAMP_AFTER, ttl / 10):
        return Finish(status, error, first)
    return Finish(status, error, expires, tuple(s.step for s in early))


# A run whose first step row would expire more than this (or a tenth of its retention)
# before the run has its early rows stamped again at its finish, rather than being kept
# that much less than its retention.
RESTAMP_AFTER = 3600.0
