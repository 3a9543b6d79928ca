"""The executor: applies the engine's commands through the store and the queue, one
small method per command, each a conditional write (plus the dispatches it causes).

The decisions themselves are the engine's (engine/attempts.py for one attempt,
engine/transitions.py for the run, engine/reconcile.py for repairs); this module only
carries them out. Shared by the worker (after each attempt), the sweeper (repairs) and
the API (cancel).

`Executor` is composed of parts by concern: promotions.py (a success's dependants),
run_stops.py (skipping and stopping), run_finishes.py (counting and finishing runs), on
executor_base.py (the ports they share); this module keeps an attempt's outputs and
what follows the attempt (a success, a retry, a failure)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from orchestrator.adapters.messages import Dispatch, Promote
from orchestrator.adapters.store import Lease
from orchestrator.engine.attempts import Fail, Retry
from orchestrator.engine.commands import SkipBranch
from orchestrator.engine.context import RunContext
from orchestrator.engine.policies import OnFailure
from orchestrator.engine.records import StepRecord
from orchestrator.engine.transitions import after_failure
from orchestrator.errors import ConditionFailed
from orchestrator.services.execution.promotions import Fold, Promotions
from orchestrator.services.execution.recording import recorded
from orchestrator.services.execution.run_stops import RunStops
from orchestrator.services.execution.tally import Tally

__all__ = ["LATE_RECORD", "Executor"]

# Seconds a success's record may take before its dependant is no longer run inline.
LATE_RECORD = 1.0


def _attempt_of(row: StepRecord) -> tuple[str, str, int, str]:
    """(run, step, attempt, lease owner): what names an attempt in the store's writes."""
    return row.run_id, row.step, row.attempt, row.lease_owner or ""


@dataclass(frozen=True)
class Executor(Promotions, RunStops):
    """The executor: the parts composed (promotions.py, run_stops.py, run_finishes.py on
    executor_base.py), with an attempt's outputs and what follows it (a success, a
    retry, a failure)."""

    # ---- outputs --------------------------------------------------------------------

    def store_output(self, row: StepRecord, raw: bytes) -> tuple[str | None, str | None]:
        """(inline JSON, blob key): bodies too large for a row go to the blob store."""
        if len(raw) > self.settings.inline_output_limit:
            key = f"outputs/{row.run_id}/{row.step}/{row.attempt}.json"
            return None, self.blobs.put(key, raw)
        return (raw.decode("utf-8") if raw else "null"), None

    def load_output(self, row: StepRecord) -> Any:
        if row.output_ref is not None:
            return json.loads(self.blobs.get(row.output_ref))
        return row.output

    # ---- after an attempt ------------------------------------------------------------

    def succeed(
        self,
        row: StepRecord,
        ctx: RunContext,
        output_json: str | None,
        output_ref: str | None,
        size: int,
        tally: Tally,
        *,
        keep_one: Lease | None,
        on_recorded: Callable[[], None] | None = None,
        fold: Fold | None = None,
        skipped: str | None = None,
    ) -> tuple[StepRecord | None, StepRecord] | None:
        """Record success and promote dependants. Returns (the dependant promoted straight
        into `keep_one`'s lease for the caller to run inline, the recorded row), or None
        if our lease was lost (someone else owns the attempt now). `skipped`: the step's
        condition was false; it ends skipped for that reason, and its dependants go on
        as after a success (its output is null)."""
        now = self.clock()
        done: StepRecord | None = None
        # A success keeps its claim's wake: a crash between this record and its
        # follow-ups (its dependants' promotions, a sink's count or its run's finish) is
        # repaired at the lease's end, like a crash just before it, and the record costs
        # no wake-index write (engine/wakes.py). Not a sink of a run whose finish others
        # wait for (a group's next run, a parent): its wake is now, for the next sweep.
        # Only while the lease holds: a record landing after it (a stalled worker) may
        # find the sweeper past that wake already, and takes the finish time instead.
        keep_wake = (now < (row.lease_until or 0.0)
                     and (bool(row.dependants) or not ctx.follow_ups))
        try:
            # Most rows carry no flag: the row as its claim answered it, moved on, is
            # put whole (store.steps.put_success). A flagged row (its run is stopping or
            # failing) fails that guard and takes the full write, which reads the flags
            # back.
            done = recorded(lambda: self.store.steps.put_success(
                row, output_json=output_json, output_ref=output_ref, size=size, now=now,
                keep_wake=keep_wake, skipped=skipped), lease_until=row.lease_until,
                clock=self.clock)
        except ConditionFailed:
            pass
        if done is None:
            try:
                done = recorded(lambda: self.store.steps.record_success(
                    *_attempt_of(row), output_json=output_json, output_ref=output_ref,
                    size=size, now=now, skipped=skipped), lease_until=row.lease_until,
                    clock=self.clock)
            except ConditionFailed:
                return None
        ended = (not done.stopping and done.step == ctx.ends_with
                 and self.end_with(done, ctx, output_json))
        if done.counted and not ended:
            tally.add(row.run_id)
        if on_recorded is not None:
            on_recorded()
        if done.stopping:
            # It landed in a stopping run: nothing below it starts (rows the stop pass
            # could not see, written by a launch still under way, are skipped here).
            self.skip_branch(row.run_id, SkipBranch(done.step, done.dependants, "run stopped"),
                             tally, ctx)
            return None, done
        hi, size = len(done.dependants), self.settings.fanout_slice
        if hi > 2 * size:
            # A wide fan-out: its other slices go to the queue first, for any worker
            # (its own worker promotes the first).
            self.queues.dispatch([Promote(run_id=done.run_id, step=done.step, lo=lo,
                                          hi=min(lo + size, hi))
                                  for lo in range(size, hi, size)])
            hi = size
        if keep_one is not None and self.clock() - now > LATE_RECORD:
            # The record was throttled and sent again (recording.py): the lease the caller
            # took for running a dependant inline was counted from before; the dependant
            # goes to the queue, with a lease of its own when a worker claims it.
            keep_one = None
        inline, sends = self.promote_dependants(done, ctx, keep_one, fold, hi=hi)
        if sends:
            self.queues.dispatch(sends)
        return inline, done

    def retry(
        self,
        row: StepRecord,
        decision: Retry,
        tally: Tally,
        *,
        expired_before: float | None = None,
    ) -> bool:
        """Record a failed attempt and send the timer of the next. A step of a stopping
        run (flagged `stopping` while this attempt ran) is skipped instead."""
        now = self.clock()
        try:
            waiting = recorded(lambda: self.store.steps.record_retry(
                *_attempt_of(row), next_attempt=decision.next_attempt, due_at=decision.due_at,
                error=decision.error, now=now, expired_before=expired_before),
                lease_until=row.lease_until, clock=self.clock)
        except ConditionFailed:
            return False
        if waiting.stopping:
            self.stop_step(row.run_id, row.step, "run stopped: not retried", tally)
            return True
        self.queues.timer(
            Dispatch(
                run_id=row.run_id,
                step=row.step,
                attempt=decision.next_attempt,
                due_at=decision.due_at,
            ),
            now,
        )
        return True

    def fail(
        self,
        row: StepRecord,
        ctx: RunContext,
        decision: Fail,
        tally: Tally,
        *,
        expired_before: float | None = None,
    ) -> bool:
        """Record a step's failure, then what the engine says it does to its run. Under
        `halt` the failure's write is the run's stop instant too (`stop_run`): the pass
        that skips the rest may come late (this process may die first), no start will."""
        try:
            stop_run = ctx.definition is not None and ctx.on_failure is OnFailure.HALT
            now = self.clock()
            failed = recorded(lambda: self.store.steps.record_failure(
                *_attempt_of(row), error=decision.error, now=now,
                expired_before=expired_before, stop_run=stop_run),
                lease_until=row.lease_until, clock=self.clock)
        except ConditionFailed:
            return False
        if failed.counted:
            tally.add(row.run_id)
        then = after_failure(ctx.on_failure, failed)
        if isinstance(then, SkipBranch):
            self.skip_branch(row.run_id, then, tally, ctx)
        else:
            self.halt(row.run_id, then, tally, ctx)
        return True
