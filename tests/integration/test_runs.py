"""The engine end to end: real moto over HTTP, real uvicorn functions, real workers."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.harness import steps_of
from tests.support.polling import until
from tests.support.testfns import Recorder

BACKENDS = """
backends:
  fn: { url: "${FN}" }
"""


def manifest(workflows: str) -> str:
    return BACKENDS + "workflows:\n" + workflows


DIAMOND = manifest("""
  diamond:
    steps:
      a: { backend: fn, route: /echo, payload: { tag: A } }
      b: { backend: fn, route: /echo, dependsOn: [a] }
      c: { backend: fn, route: /echo, dependsOn: [a] }
      d: { backend: fn, route: /echo, dependsOn: [b, c] }
""")


def test_diamond_passes_only_direct_dependencies(harness_factory: Any, recorder: Recorder) -> None:
    h = harness_factory(DIAMOND)
    h.start_workers()
    run_id = h.start("diamond", {"month": "2026-10"})
    view = h.wait(run_id)
    assert view["status"] == "success"
    steps = steps_of(view)
    assert [s["status"] for s in view["steps"]] == ["success"] * 4
    assert steps["a"]["output"]["steps"] is None  # roots get no `steps`
    assert steps["a"]["output"]["payload"] == {"tag": "A"}  # static payload merged in
    assert steps["a"]["output"]["input"] == {"month": "2026-10"}
    assert set(steps["d"]["output"]["steps"]) == {"b", "c"}  # not `a`: direct deps only
    assert steps["d"]["output"]["steps"]["b"]["step"] == "b"
    for name in "abcd":
        calls = recorder.for_step(run_id, name)
        assert len(calls) == 1
        assert calls[0].key == f"{run_id}/{name}"
        assert calls[0].headers["x-orchestrator-run-id"] == run_id


NIGHTLY = """
  nightly:
    onFailure: {policy}
    steps:
      fetch-orders:  {{ backend: fn, route: /status, payload: {{ code: 500 }},
                       retry: {{ max: 1, delay: 50ms }} }}
      load-orders:   {{ backend: fn, route: /echo, dependsOn: [fetch-orders] }}
      fetch-reviews: {{ backend: fn, route: /slow, payload: {{ seconds: 3 }} }}
      load-reviews:  {{ backend: fn, route: /echo, dependsOn: [fetch-reviews] }}
"""


def test_continue_independent_runs_the_other_branch(harness_factory: Any) -> None:
    h = harness_factory(manifest(NIGHTLY.format(policy="continue-independent")))
    h.start_workers()
    view = h.wait(h.start("nightly"))
    steps = steps_of(view)
    assert view["status"] == "failed"
    assert steps["fetch-orders"]["status"] == "failed"
    assert steps["fetch-orders"]["attempts"] == 2
    assert steps["load-orders"]["status"] == "skipped"
    assert steps["fetch-reviews"]["status"] == "success"
    assert steps["load-reviews"]["status"] == "success"
    assert view["error"]["step"] == "fetch-orders"


def test_halt_skips_everything_not_started_but_lets_in_flight_land(
        harness_factory: Any, recorder: Recorder) -> None:
    # fetch-orders fails once fetch-reviews is in flight (a loaded machine may be slow to
    # claim it, and a halt skips a step not yet claimed), and fetch-reviews holds at its
    # latch until fetch-orders has failed (its 3 s sleep could end first, and
    # load-reviews would run).
    latched = NIGHTLY.format(policy="halt").replace(
        "route: /slow, payload: { seconds: 3 }", "route: /latch").replace(
        "route: /status, payload: { code: 500 }",
        "route: /latch, payload: { name: orders, status: 500 }")
    h = harness_factory(manifest(latched))
    h.start_workers()
    run_id = h.start("nightly")
    until("fetch-reviews in flight", lambda: recorder.for_step(run_id, "fetch-reviews"))
    recorder.latch(f"{run_id}:orders").set()
    until("fetch-orders failed",
          lambda: steps_of(h.rt.runs.view(run_id))["fetch-orders"]["status"] == "failed")
    recorder.latch(run_id).set()
    view = h.wait(run_id)
    steps = steps_of(view)
    assert view["status"] == "failed"
    assert steps["fetch-orders"]["status"] == "failed"
    assert steps["load-orders"]["status"] == "skipped"
    # fetch-reviews was in flight when fetch-orders failed: it lands; its dependant doesn't run.
    assert steps["fetch-reviews"]["status"] == "success"
    assert steps["load-reviews"]["status"] == "skipped"


def test_join_with_a_failed_dependency_is_skipped(harness_factory: Any) -> None:
    h = harness_factory(
        manifest("""
  join:
    onFailure: continue-independent
    steps:
      good: { backend: fn, route: /echo }
      bad:  { backend: fn, route: /status, payload: { code: 422 } }
      both: { backend: fn, route: /echo, dependsOn: [good, bad] }
""")
    )
    h.start_workers()
    view = h.wait(h.start("join"))
    steps = steps_of(view)
    assert (steps["good"]["status"], steps["bad"]["status"], steps["both"]["status"]) == (
        "success",
        "failed",
        "skipped",
    )
    assert steps["bad"]["attempts"] == 1  # 422 is permanent: no retry
    assert steps["bad"]["error"]["status"] == 422


def test_flaky_function_retried_with_the_same_idempotency_key(
    harness_factory: Any, recorder: Recorder
) -> None:
    h = harness_factory(
        manifest("""
  flaky:
    steps:
      call: { backend: fn, route: /flaky, payload: { fail: 2 },
              retry: { max: 3, strategy: exponential, delay: 100ms } }
      after: { backend: fn, route: /echo, dependsOn: [call] }
""")
    )
    h.start_workers()
    run_id = h.start("flaky")
    view = h.wait(run_id)
    steps = steps_of(view)
    assert view["status"] == "success"
    assert steps["call"]["attempts"] == 3
    assert steps["call"]["output"] == {"ok": True, "calls": 3}
    calls = recorder.for_step(run_id, "call")
    assert [c.attempt for c in calls] == [1, 2, 3]
    assert {c.key for c in calls} == {f"{run_id}/call"}


@pytest.mark.parametrize("code", [408, 409, 425, 429])
def test_retryable_4xx(harness_factory: Any, code: int) -> None:
    h = harness_factory(
        manifest(f"""
  r:
    steps:
      s: {{ backend: fn, route: /status, payload: {{ code: {code} }},
           retry: {{ max: 1, delay: 50ms }} }}
""")
    )
    h.start_workers()
    view = h.wait(h.start("r"))
    assert steps_of(view)["s"]["attempts"] == 2
    assert steps_of(view)["s"]["error"]["exhausted"] is True


def test_retry_after_is_honoured(harness_factory: Any, recorder: Recorder) -> None:
    h = harness_factory(
        manifest("""
  ra:
    steps:
      s: { backend: fn, route: /flaky, payload: { fail: 1, retry_after: 2 },
           retry: { max: 2, delay: 10ms } }
""")
    )
    h.start_workers()
    run_id = h.start("ra")
    view = h.wait(run_id)
    assert view["status"] == "success"
    calls = recorder.for_step(run_id, "s")
    first, second = (c.at for c in calls)
    assert second - first >= 1.9  # not the 10 ms backoff


def test_timeout_is_retryable_then_fails(harness_factory: Any) -> None:
    h = harness_factory(
        manifest("""
  t:
    steps:
      s: { backend: fn, route: /slow, payload: { seconds: 5 }, timeout: 300ms,
           retry: { max: 1, delay: 50ms } }
""")
    )
    h.start_workers()
    view = h.wait(h.start("t"), timeout=20)
    s = steps_of(view)["s"]
    assert view["status"] == "failed"
    assert s["attempts"] == 2
    assert s["error"]["code"] == "timeout"


def test_an_answer_trickled_past_the_timeout_is_a_timeout(harness_factory: Any) -> None:
    # Every read comes quickly (a byte each 0.2 s), the whole answer (4 s) does not:
    # the step's timeout bounds the call, not each read.
    h = harness_factory(
        manifest("""
  t:
    steps:
      s: { backend: fn, route: /trickle, payload: { every: 0.2, bytes: 20 }, timeout: 1s,
           retry: { max: 0 } }
""")
    )
    h.start_workers()
    run_id = h.start("t")
    view = h.wait(run_id, timeout=20)
    assert view["status"] == "failed"
    assert steps_of(view)["s"]["error"]["code"] == "timeout"
    at = {e["type"]: e["at"] for e in h.rt.runs.history(run_id) if e.get("step") == "s"}
    assert at["step.failed"] - at["step.started"] < 4.0  # not the whole 4 s body


def test_large_output_goes_to_blob_store_and_arrives_intact(harness_factory: Any) -> None:
    h = harness_factory(
        manifest("""
  big:
    steps:
      produce: { backend: fn, route: /big, payload: { bytes: 300000 } }
      consume: { backend: fn, route: /measure, dependsOn: [produce] }
""")
    )
    h.start_workers()
    run_id = h.start("big")
    view = h.wait(run_id)
    steps = steps_of(view)
    assert view["status"] == "success"
    assert steps["consume"]["output"]["blob_sizes"] == {"produce": 300000}
    assert len(steps["produce"]["output"]["blob"]) == 300000
    row = h.rt.store.steps.get_step(run_id, "produce")
    assert row is not None and row.output_ref is not None  # not in the row


def test_output_over_the_hard_cap_fails_clearly(harness_factory: Any) -> None:
    h = harness_factory(
        manifest("""
  huge:
    steps:
      produce: { backend: fn, route: /big, payload: { bytes: 200000 } }
"""),
        output_hard_cap=100_000,
    )
    h.start_workers()
    view = h.wait(h.start("huge"))
    s = steps_of(view)["produce"]
    assert view["status"] == "failed"
    assert s["error"]["code"] == "output_too_large"
    assert s["attempts"] == 1


def test_kill_lets_in_flight_land_and_skips_the_rest(harness_factory: Any,
                                                     recorder: Recorder) -> None:
    h = harness_factory(
        manifest("""
  long:
    steps:
      first: { backend: fn, route: /latch }
      second: { backend: fn, route: /echo, dependsOn: [first] }
      third: { backend: fn, route: /echo, dependsOn: [second] }
""")
    )
    h.start_workers()
    run_id = h.start("long")
    # wait until `first`'s call has reached its function (in flight; a loaded machine
    # may take seconds to get there)
    until("first in flight", lambda: recorder.for_step(run_id, "first"))
    h.rt.runs.kill(run_id, "test says stop")
    recorder.latch(run_id).set()  # held until the kill landed: a sleep could end first
    view = h.wait(run_id)
    steps = steps_of(view)
    assert view["status"] == "killed"
    assert steps["first"]["status"] == "success"  # in flight: landed
    assert steps["second"]["status"] == "skipped"
    assert steps["third"]["status"] == "skipped"
    assert view["error"] == {"code": "killed", "reason": "test says stop",
                             "message": "cancelled: test says stop"}


def test_finished_runs_carry_a_ttl(harness_factory: Any) -> None:
    h = harness_factory(DIAMOND)
    writes: list[str] = []
    h.rt.clients.dynamodb.meta.events.register(
        "before-parameter-build.dynamodb", lambda model, params, **_: writes.append(
            f"{model.name} {params.get('TableName') or ','.join(params.get('RequestItems', ''))}"
            f" {params.get('ConditionExpression')}")
    )
    run_id = h.start("diamond")
    # The launch wrote the rows; nothing after it writes a whole row again but a move
    # under its guard (the first write of a row the launch left out, a plain success):
    # no row is rewritten for its expiry.
    del writes[:]
    h.start_workers()
    h.wait(run_id)
    run = h.rt.store.runs.get_run(run_id, h.rt.clock())
    assert run is not None and run.expires_at is not None
    assert 23 * 3600 < run.expires_at - run.finished_at <= 24 * 3600 + 1
    # Each step row stamped its expiry in its own terminal write: the longest retention,
    # so no row of a run expires before the run does.
    steps = h.rt.store.steps.query_steps(run_id)
    assert all(s.expires_at is not None and s.expires_at >= run.expires_at for s in steps)
    # (The search index's terms, in the control table, are no row: run_search.py.)
    assert not [w for w in writes if w.startswith(("BatchWriteItem", "PutItem"))
                and w.endswith(" None") and "-control " not in w], writes
    assert [w for w in writes if w.startswith("PutItem")]  # the moves above
    # readers ignore a row past its expiry even before DynamoDB deletes it
    assert h.rt.store.runs.get_run(run_id, run.expires_at + 1) is None


def test_a_failed_run_expires_with_its_first_step_row(harness_factory: Any) -> None:
    h = harness_factory(manifest(NIGHTLY.format(policy="continue-independent")))
    h.start_workers()
    run_id = h.start("nightly")
    h.wait(run_id)
    run = h.rt.store.runs.get_run(run_id, h.rt.clock())
    assert run is not None and run.expires_at is not None and run.finished_at is not None
    steps = h.rt.store.steps.query_steps(run_id)
    ttl = h.rt.settings.ttl_failed
    # Kept ttl_failed, less the few seconds it ran: never past one of its rows.
    assert run.expires_at == min(s.expires_at or 0.0 for s in steps)
    assert ttl - 60 < run.expires_at - run.finished_at <= ttl
