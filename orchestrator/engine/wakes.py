"""Wake times: when a row must next be looked at if nobody moves it on before then.

Every write that moves a row also stamps its `wake_at` (in the same request): the time
by which its next move is due. A healthy row is moved on before its wake and gets a new
one; a row whose mover died is still there when its wake passes, and the sweeper finds
it in the `wake` index (partitioned into `WAKE_SHARDS` shards by run id) by reading only
the wakes that passed since its last pass. A sweep therefore reads what may need
attention, never every running run.

- a step ready, or dispatched and not claimed: when it was sent + `redispatch_after`
  (the wait doubling with each resend);
- a step claimed: its lease's end;
- a step blocked: none (the step that completes its dependencies moves it);
- a step terminal: when it finished (its follow-ups, the promotions, the count and a
  halt, are checked at the next sweep); except a success recorded while its lease held,
  which keeps its claim's wake (its lease's end): a crash between its record and its
  follow-ups (its dependants' promotions, or a sink's count and its run's finish) is
  then repaired when a crash just before the record would have been, and the record
  costs no write to the wake index (moving a row in an index is a delete and a put: two
  of the three index writes a step would cost otherwise). A sink of a run whose finish
  has follow-ups (see below) takes its finish time: others wait for that finish;
- a run created, queued, admitted or asked to stop: + `settle` (its rows, admission or
  stop pass are checked);
- a run finished with follow-ups (RunRecord.follow_ups: a concurrency group's lock to
  release, a parent waiting for it): when it finished, for the sweeper to check them.
  Without any, its wake stays as it was: the sweeper finds it finished there, with
  nothing to do, and the finish costs no write to the wake index.

Pure: no I/O."""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from orchestrator.engine.records import RunRecord, StepRecord
from orchestrator.engine.states import RunStatus, StepStatus

__all__ = ["WAKE_SHARDS", "WakeTimes", "resend_wake", "run_wake", "shard_of", "step_wake"]

# Fixed for the life of a deployment: a row's shard is written when the row is created.
WAKE_SHARDS = 4


def shard_of(run_id: str) -> int:
    """The wake shard of every row of a run."""
    return zlib.crc32(run_id.encode()) % WAKE_SHARDS


@dataclass(frozen=True)
class WakeTimes:
    # An unclaimed dispatch older than this is presumed lost and sent again.
    redispatch_after: float = 5.0
    # How long a run's own follow-ups (a start's rows, an admission, a stop pass) may take.
    settle: float = 5.0
    # The longest a resent dispatch waits before it is sent again.
    ceiling: float = 900.0


def step_wake(row: StepRecord, times: WakeTimes) -> float | None:
    """The wake of a step row as it stands (None: it waits for another step)."""
    if row.status.terminal:
        return row.finished_at
    if row.claimed:
        return row.lease_until
    if row.status in (StepStatus.READY, StepStatus.DISPATCHED):
        return max(row.ready_at or 0.0, row.due_at or 0.0) + times.redispatch_after
    return None


def resend_wake(resends: int, now: float, times: WakeTimes) -> float:
    """The wake of a dispatch sent again for the `resends`-th time (1, 2, ...): the wait
    doubles, so a step whose message is only slow behind a backlog is resent a handful of
    times at most, while a lost one is resent after `redispatch_after`."""
    backoff: float = times.redispatch_after * 2.0 ** max(0, resends - 1)
    return now + min(times.ceiling, backoff)


def run_wake(run: RunRecord, times: WakeTimes) -> float:
    """The wake of a run row as it stands."""
    if run.status.terminal:
        if not run.follow_ups and run.wake_at is not None:
            return run.wake_at
        return run.finished_at or run.created_at
    if run.status is RunStatus.QUEUED:
        return max(run.created_at, run.admit_at or 0.0) + times.settle
    return (run.started_at or run.created_at) + times.settle
