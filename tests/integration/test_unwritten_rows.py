"""A root, and a step blocked on one dependency, have no row until something moves them:
the start writes only the joins, a root's claim, a promotion, a sweep's redispatch or a
skip creates the row as planned, and every reader sees the rows the start left out as
planned (a root ready since its run's launch, any other step blocked). What a run shows,
how it stops and how it fails are the same as when every row was written."""

from __future__ import annotations

import time
from typing import Any

import pytest

from orchestrator.adapters.messages import Dispatch
from orchestrator.adapters.store import Lease
from orchestrator.errors import ConditionFailed
from tests.support.harness import claim_step, steps_of
from tests.support.testfns import Recorder

MANIFEST = """
backends:
  fn: { url: "${FN}" }
workflows:
  chain:
    steps:
      one:   { backend: fn, route: /echo }
      two:   { backend: fn, route: /echo, dependsOn: [one] }
      three: { backend: fn, route: /echo, dependsOn: [two] }
      join:  { backend: fn, route: /echo, dependsOn: [one, three] }
  branches:
    onFailure: continue-independent
    steps:
      root: { backend: fn, route: /echo }
      bad:  { backend: fn, route: /status, payload: { code: 422 }, dependsOn: [root] }
      below: { backend: fn, route: /echo, dependsOn: [bad] }
      good: { backend: fn, route: /echo, dependsOn: [root] }
  fan:
    steps:
      root: { backend: fn, route: /echo }
      x:    { backend: fn, route: /echo, dependsOn: [root] }
      y:    { backend: fn, route: /echo, dependsOn: [root] }
"""


def written(h: Any, run_id: str) -> set[str]:
    return {r.step for r in h.rt.store.steps.query_steps(run_id)}


def test_the_start_writes_the_joins_and_a_view_shows_every_step(
    harness_factory: Any, recorder: Recorder,
) -> None:
    h = harness_factory(MANIFEST)
    run_id = h.start("chain")  # no worker yet
    assert written(h, run_id) == {"join"}
    view = h.rt.runs.view(run_id)
    assert {s["step"]: s["status"] for s in view["steps"]} == {
        "one": "ready", "two": "blocked", "three": "blocked", "join": "blocked"}
    h.start_workers()
    view = h.wait(run_id)
    assert view["status"] == "success"
    assert written(h, run_id) == {"one", "two", "three", "join"}
    assert all(len(recorder.for_step(run_id, s)) == 1 for s in ("one", "two", "three", "join"))
    two = steps_of(view)["two"]
    history = h.rt.runs.history(run_id)
    for name in ("one", "two"):
        assert [e["type"] for e in history if e.get("step") == name] == [
            "step.ready", "step.started", "step.succeeded"]
    assert two["attempts"] == 1
    # The root was ready when its run was launched, as if its row had been written then.
    ready = next(e for e in history if e.get("step") == "one" and e["type"] == "step.ready")
    assert ready["at"] == round(view["started_at"], 3)


def test_a_roots_claim_creates_its_row_and_a_second_copy_calls_nothing(
    harness_factory: Any, recorder: Recorder,
) -> None:
    h = harness_factory(MANIFEST)
    sent: list[Any] = []
    h.rt.queues.tamper = lambda msgs: sent.extend(msgs) or []
    run_id = h.start("fan")
    (msg,) = [m for m in sent if isinstance(m, Dispatch) and m.run_id == run_id]
    assert msg.step == "root" and msg.planned and msg.ready_at is not None
    assert written(h, run_id) == set()
    w = h.rt.worker()
    w.handle(msg)
    w.handle(msg)  # delivered twice
    h.rt.worker().handle(msg)  # and to another worker
    assert len(recorder.for_step(run_id, "root")) == 1
    root = h.rt.store.steps.get_step(run_id, "root")
    assert root is not None and root.status.value == "success"
    assert [e["type"] for e in root.history] == ["step.ready", "step.started", "step.succeeded"]


def test_a_roots_message_that_does_not_say_it_was_left_out_still_claims_it(
    harness_factory: Any, recorder: Recorder,
) -> None:
    """A message sent before an upgrade (or by hand) names the root plainly: the claim
    finds no row, and creates it as the marked message would."""
    h = harness_factory(MANIFEST)
    h.rt.queues.tamper = lambda msgs: []
    run_id = h.start("fan")
    h.rt.queues.tamper = None
    h.rt.worker().handle(Dispatch(run_id=run_id, step="root", attempt=1))
    assert len(recorder.for_step(run_id, "root")) == 1


def test_a_roots_lost_message_is_sent_again_by_the_sweep_which_writes_its_row(
    harness_factory: Any, recorder: Recorder,
) -> None:
    h = harness_factory(MANIFEST, redispatch_after=30.0)
    h.rt.queues.tamper = lambda msgs: []  # the start's dispatch is lost
    run_id = h.start("fan")
    assert written(h, run_id) == set()
    assert steps_of(h.rt.runs.view(run_id))["root"]["status"] == "ready"
    h.rt.queues.tamper = None
    report = h.rt.sweeper(clock=lambda: time.time() + 10).sweep()
    assert report.redispatched == 0 and written(h, run_id) == set()  # not lost yet
    report = h.rt.sweeper(clock=lambda: time.time() + 31).sweep(since=0)
    assert report.redispatched == 1
    root = h.rt.store.steps.get_step(run_id, "root")
    assert root is not None and root.status.value == "ready" and root.resends == 1
    assert [e["type"] for e in root.history] == ["step.ready", "step.redispatched"]
    h.start_workers()
    assert h.wait(run_id)["status"] == "success"
    assert len(recorder.for_step(run_id, "root")) == 1


def test_a_cancel_skips_the_rows_the_start_left_out_and_a_late_promotion_creates_nothing(
    harness_factory: Any, recorder: Recorder,
) -> None:
    h = harness_factory(MANIFEST)
    sent: list[Any] = []
    h.rt.queues.tamper = lambda msgs: sent.extend(msgs) or []
    run_id = h.start("chain")
    h.rt.worker().handle(Dispatch(run_id=run_id, step="one", attempt=1))
    assert "two" not in written(h, run_id)  # its message is sent, its row not written
    hint = next(m for m in sent if isinstance(m, Dispatch) and m.step == "two")
    h.rt.runs.kill(run_id, "enough")
    view = h.rt.runs.view(run_id)
    assert view["status"] == "killed"
    assert {s["step"]: s["status"] for s in view["steps"]} == {
        "one": "success", "two": "skipped", "three": "skipped", "join": "skipped"}
    assert written(h, run_id) == {"one", "two", "three", "join"}  # the skips made them
    # two's message, sent before the cancel, comes late: nothing starts.
    h.rt.worker().handle(hint)
    assert recorder.for_step(run_id, "two") == []
    assert steps_of(h.rt.runs.view(run_id))["two"]["status"] == "skipped"


def test_a_failed_branch_is_skipped_below_and_the_run_finishes(
    harness_factory: Any, recorder: Recorder,
) -> None:
    h = harness_factory(MANIFEST)
    h.start_workers()
    run_id = h.start("branches")
    view = h.wait(run_id)
    assert view["status"] == "failed"
    assert {s["step"]: s["status"] for s in view["steps"]} == {
        "root": "success", "bad": "failed", "below": "skipped", "good": "success"}
    assert recorder.for_step(run_id, "below") == []


def test_a_step_whose_promotion_was_lost_with_its_worker_is_created_by_the_sweep(
    harness_factory: Any, recorder: Recorder,
) -> None:
    h = harness_factory(MANIFEST, redispatch_after=30.0)
    # root's worker runs y inline and sends x's message, which is lost.
    h.rt.queues.tamper = lambda msgs: [m for m in msgs
                                       if not (isinstance(m, Dispatch) and m.step == "x")]
    run_id = h.start("fan")
    h.start_workers()
    h.wait_for_step(run_id, "y", ("success",))
    assert "x" not in written(h, run_id)  # its message is gone, its row never written
    assert steps_of(h.rt.runs.view(run_id))["x"]["status"] == "blocked"
    h.rt.queues.tamper = None
    report = h.rt.sweeper(clock=lambda: time.time() + 31).sweep()
    assert report.promoted == 1
    assert h.wait(run_id)["status"] == "success"
    assert len(recorder.for_step(run_id, "x")) == 1


def test_a_rerun_writes_every_row_at_its_start(harness_factory: Any, recorder: Recorder) -> None:
    # Its reused steps, and the steps they make ready, are not as planned: a sweep that
    # filled a missing row in as planned would run a reused step again.
    h = harness_factory(MANIFEST)
    h.start_workers()
    first = h.start("branches")
    assert h.wait(first)["status"] == "failed"
    h.stop.set()
    for t in h.threads:
        t.join(timeout=10)
    rerun, _ = h.rt.runs.rerun(first)
    assert written(h, rerun.run_id) == {"root", "bad", "below", "good"}
    statuses = {s["step"]: s["status"] for s in h.rt.runs.view(rerun.run_id)["steps"]}
    assert statuses == {"root": "success", "good": "success", "bad": "ready",
                        "below": "blocked"}
    assert len(recorder.for_step(first, "root")) == 1


def test_a_first_write_puts_the_row_as_planned_and_a_written_row_is_promoted_by_update(
    harness_factory: Any,
) -> None:
    """A row's first write (promote, or promote and claim) is one put guarded by its
    absence, of the row the start would have written, moved on; a row that exists (a
    repair wrote it as planned) is promoted by the guarded update, once."""
    h = harness_factory(MANIFEST)
    run_id = h.start("fan")  # no worker: root is ready, x and y left out
    ctx = h.rt.executor.context(run_id)
    now = time.time()
    lease = Lease("w1", 30.0)
    x = h.rt.store.steps.satisfy(run_id, "x", "root", 1, lease, now, plan=ctx.plan("x"))
    assert x is not None and x.status.value == "dispatched" and x.lease_owner == "w1"
    read = h.rt.store.steps.get_step(run_id, "x")
    assert read == x  # what the put answers is what was written
    planned = ctx.plan("x")
    assert planned is not None
    assert (read.deps, read.dependants, read.payload, read.timeout, read.max_attempts) == (
        planned.deps, planned.dependants, planned.payload, planned.timeout,
        planned.max_attempts)
    assert read.lease_until == 30.0 + planned.timeout and read.satisfied == {"root"}
    assert [e["type"] for e in read.history] == ["step.ready", "step.started"]
    # Again (a duplicate message): the row exists and is no longer blocked.
    assert h.rt.store.steps.satisfy(run_id, "x", "root", 1, Lease("w2", 30.0), now,
                                    plan=ctx.plan("x")) is None
    # y's row written by a repair, as planned (blocked): the update promotes it.
    y_plan = ctx.plan("y")
    assert y_plan is not None
    h.rt.store.steps.create_step_if_absent(y_plan)
    y = h.rt.store.steps.satisfy(run_id, "y", "root", 1, None, now, plan=y_plan)
    assert y is not None and y.status.value == "ready"
    assert h.rt.store.steps.get_step(run_id, "y").satisfied == {"root"}  # type: ignore[union-attr]


def test_a_success_put_whole_writes_what_the_full_update_writes(harness_factory: Any) -> None:
    """A plain success is one put of the claimed row moved on (store.steps.put_success): the row
    it leaves is the row the full update leaves, attribute for attribute; a flagged
    row refuses it (the caller then makes the full write)."""
    h = harness_factory(MANIFEST)
    runs = [h.start("fan") for _ in range(3)]
    now = time.time()
    rows = [claim_step(h.rt, r, "root", 1, Lease("w", 30.0), now - 1) for r in runs]
    put = h.rt.store.steps.put_success(rows[0], output_json='{"a": 1,  "b": [1, 2]}',
                                       output_ref=None, size=22, now=now, keep_wake=True)
    h.rt.store.steps.record_success(runs[1], "root", 1, "w", output_json='{"a": 1,  "b": [1, 2]}',
                                    output_ref=None, size=22, now=now, keep_wake=True)
    table = h.rt.settings.names.steps_table

    def item(run_id: str) -> dict[str, Any]:
        got = h.rt.clients.dynamodb.get_item(TableName=table, Key={
            "run_id": {"S": run_id}, "step": {"S": "root"}}, ConsistentRead=True)["Item"]
        # What differs between two runs started apart: their ids and start times.
        for key in ("run_id", "wake_shard", "ready_at"):
            got.pop(key)
        got["history"]["L"] = got["history"]["L"][1:]  # step.ready, at each run's start
        # The requests each write carries (adapters/metering.py): its own, a put's a
        # PutItem and the update's an UpdateItem, and those its start left for it.
        got["requests"] = {k: got.pop(k) for k in list(got) if k.startswith("$")}
        return got  # type: ignore[no-any-return]

    put_row, updated_row = item(runs[0]), item(runs[1])
    assert put_row["requests"].pop("$dP") == updated_row["requests"].pop("$dU") == {"N": "1"}
    assert put_row == updated_row
    assert put.status.value == "success" and put.lease_owner is None
    assert h.rt.store.steps.get_step(runs[0], "root").output == {"a": 1, "b": [1, 2]}  # type: ignore[union-attr]
    # A row flagged meanwhile (its run is stopping) refuses the put.
    assert h.rt.store.steps.mark_stopping(runs[2], "root", now)
    with pytest.raises(ConditionFailed):
        h.rt.store.steps.put_success(rows[2], output_json="1", output_ref=None, size=1, now=now)


PAYLOADS = """
backends:
  fn: { url: "${FN}" }
workflows:
  paid:
    steps:
      root: { backend: fn, route: /echo, payload: { amount: 42 } }
      then: { backend: fn, route: /echo, dependsOn: [root] }
"""


def test_a_roots_payload_survives_its_message_being_resent_twice(
    harness_factory: Any, recorder: Recorder,
) -> None:
    """The first resend writes the root's row from the plan; the second finds it, read
    without its payload (a sweep reads states only), and must leave the row's own."""
    h = harness_factory(PAYLOADS, redispatch_after=30.0)
    h.rt.queues.tamper = lambda msgs: []  # every dispatch is lost
    run_id = h.start("paid")
    for offset in (31.0, 62.0):
        report = h.rt.sweeper(clock=lambda o=offset: time.time() + o).sweep(since=0)
        assert report.redispatched == 1, offset
    root = h.rt.store.steps.get_step(run_id, "root")
    assert root is not None and root.resends == 2 and root.payload == {"amount": 42}
    h.rt.queues.tamper = None
    h.rt.worker().handle(Dispatch(run_id=run_id, step="root", attempt=1))
    (call,) = recorder.for_step(run_id, "root")
    assert call.body["amount"] == 42


def test_a_run_id_used_again_after_its_run_row_was_deleted_runs_again(
    harness_factory: Any, recorder: Recorder,
) -> None:
    """DynamoDB's TTL deleted a finished run's row; its step rows, kept longer, are still
    there. A new run of that id must run its steps, not find them done."""
    h = harness_factory(MANIFEST)
    h.start_workers()
    first, _ = h.rt.runs.start("chain", {"n": 1}, "report-2026-09")
    assert h.wait(first.run_id)["status"] == "success"
    h.rt.clients.dynamodb.delete_item(TableName=h.rt.settings.names.runs_table,
                                      Key={"run_id": {"S": "report-2026-09"}})
    again, created = h.rt.runs.start("chain", {"n": 2}, "report-2026-09")
    assert created
    view = h.wait(again.run_id)
    assert view["status"] == "success"
    for step in ("one", "two", "three", "join"):
        assert len(recorder.for_step("report-2026-09", step)) == 2, step
    assert steps_of(view)["join"]["output"]["input"] == {"n": 2}
