"""A YAML step that waits without a worker (an approval gate, a lock's line): its row is
released as a durable run's driver is (no lease, `waiting` naming what it waits for), with
a timer message when the wait has an end within the queue's reach (a far one is the
sweeper's to hand over); a poke (an answer, a hand-over) brings it back sooner."""

from __future__ import annotations

from orchestrator.adapters.messages import Dispatch
from orchestrator.engine.durable_moves import release_of
from orchestrator.engine.durable_waits import Waiting
from orchestrator.engine.records import StepRecord
from orchestrator.engine.states import Released
from orchestrator.services.execution.executor import Executor
from orchestrator.services.execution.tally import Tally

__all__ = ["park"]


def park(executor: Executor, row: StepRecord, pokes: int, waiting: Waiting, now: float,
         tally: Tally) -> Released:
    """Release the claimed `row` to wait for `waiting`; on `STOPPING` the step is given
    up here."""
    store = executor.store
    out = release_of(waiting, now, redispatch_after=store.wake.redispatch_after)
    left = store.drivers.suspend_driver(
        row.run_id, row.lease_owner or "", row.attempt, pokes, waiting.to_json(),
        out.due, out.wake, now, step=row.step)
    if left is Released.OK and out.timer:
        executor.queues.timer(Dispatch(run_id=row.run_id, step=row.step, attempt=row.attempt,
                                       due_at=out.due), now)
    elif left is Released.STOPPING:
        gone = store.steps.abandon(row.run_id, row.step, row.attempt, row.lease_owner or "",
                                   "run stopped", now)
        if gone is not None and gone.counted:
            tally.add(row.run_id)
    return left
