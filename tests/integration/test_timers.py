"""Timers longer than SQS's 15-minute ceiling hop through the timer queue, with an
injected clock (no real waiting)."""

from __future__ import annotations

from typing import Any

from orchestrator.adapters.queue import Dispatch
from orchestrator.engine.states import StepStatus
from tests.support.harness import steps_of

ONE = """
backends:
  fn: { url: "${FN}" }
workflows:
  one:
    steps:
      only: { backend: fn, route: /echo }
"""


def delayed(h: Any) -> int:
    attrs = h.rt.clients.sqs.get_queue_attributes(
        QueueUrl=h.rt.queues.timer_url, AttributeNames=["ApproximateNumberOfMessagesDelayed"]
    )["Attributes"]
    return int(attrs["ApproximateNumberOfMessagesDelayed"])


def test_a_timer_beyond_15_minutes_is_redelayed_not_run(harness_factory: Any) -> None:
    h = harness_factory(ONE)
    h.rt.queues.tamper = lambda msgs: [m for m in msgs if m.due_at is not None]
    run_id = h.start("one")
    now = [1_000_000.0]
    worker = h.rt.worker()
    worker.clock = lambda: now[0]
    due = now[0] + 3600  # an hour away: four hops of at most 900 s
    worker.handle(Dispatch(run_id=run_id, step="only", attempt=1, due_at=due))
    # Not claimed early: the root's row, which its claim would create, is not written.
    assert h.rt.store.steps.get_step(run_id, "only") is None
    assert steps_of(h.rt.runs.view(run_id))["only"]["status"] == StepStatus.READY.value
    assert delayed(h) == 1  # sent on, delayed

    now[0] = due + 1  # the due time has come: the same message now runs the step
    worker.clock = lambda: now[0]
    worker.handle(Dispatch(run_id=run_id, step="only", attempt=1, due_at=due))
    row = h.rt.store.steps.get_step(run_id, "only")
    assert row is not None and row.status is StepStatus.SUCCESS


def test_an_attempt_waited_out_in_the_worker_starts_at_its_due_time(harness_factory: Any) -> None:
    # A timer message a little early (SQS delays are whole seconds) is waited out in the
    # worker: the attempt's start is stamped after the wait, never before its due time.
    h = harness_factory(ONE)
    run_id = h.start("one")
    now = [2_000_000.0]
    worker = h.rt.worker(sleep=lambda s: now.__setitem__(0, now[0] + s))
    worker.clock = lambda: now[0]
    due = now[0] + 0.6
    worker.handle(Dispatch(run_id=run_id, step="only", attempt=1, due_at=due))
    (started,) = [e for e in h.rt.runs.history(run_id) if e["type"] == "step.started"]
    assert started["at"] >= due
