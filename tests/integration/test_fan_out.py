"""`fan_out` steps: the route called once per item of a list from the input or a
dependency's output, at most `max_parallel` at once (counted in the served function),
`rate` starts per second, results in item order; a failed item fails the step once the
others settle, unless `tolerate` allows it; retries per item with one idempotency key;
the cap and a non-list are refused with what to use instead."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.errors import ManifestError
from orchestrator.manifest.loader import manifest_from_text
from tests.support.harness import Harness, steps_of
from tests.support.testfns import Recorder

MANIFEST = """
backends:
  fn: { url: "${FN}", timeout: 10s }
workflows:
  probe:
    steps:
      regions:
        backend: fn
        route: /item
        fanOut: { items: "${{ input.regions }}", maxParallel: 2 }
  chained:
    steps:
      list: { backend: fn, route: /echo, payload: { regions: [a, b, c] } }
      each:
        backend: fn
        route: /item
        dependsOn: [list]
        fanOut: { items: "steps.list.output.payload.regions", rate: 20 }
      after: { backend: fn, route: /echo, dependsOn: [each] }
  tolerant:
    steps:
      each:
        backend: fn
        route: /item
        retry: { max: 2, delay: 100ms }
        fanOut: { items: "input.items", tolerate: 1 }
  strict:
    steps:
      each:
        backend: fn
        route: /item
        retry: { max: 0 }
        fanOut: { items: "input.items" }
"""


def test_results_in_item_order_never_more_than_max_parallel(
        harness_factory: Any, recorder: Recorder) -> None:
    h: Harness = harness_factory(MANIFEST)
    h.start_workers(threads=4)
    regions = [f"r{i}" for i in range(7)]
    run_id = h.start("probe", {"regions": regions})
    view = h.wait(run_id)
    assert view["status"] == "success", view
    out = steps_of(view)["regions"]["output"]
    assert [o["item"] for o in out] == regions and [o["index"] for o in out] == list(range(7))
    assert recorder.peak[run_id] == 2  # at most two in flight, and two did overlap
    keys = {c.key for c in recorder.calls if c.body["run"]["run_id"] == run_id}
    assert keys == {f"{run_id}/regions[{i}]" for i in range(7)}


def test_items_from_a_dependency_at_a_rate(harness_factory: Any, recorder: Recorder) -> None:
    h: Harness = harness_factory(MANIFEST)
    h.start_workers(threads=4)
    run_id = h.start("chained", {})
    view = h.wait(run_id)
    assert view["status"] == "success"
    assert [o["item"] for o in steps_of(view)["each"]["output"]] == ["a", "b", "c"]
    starts = sorted(c.at for c in recorder.calls
                    if c.body["run"]["run_id"] == run_id and c.route == "/item")
    # 20 a second: the third starts no earlier than 0.1 s after the first.
    assert starts[2] - starts[0] >= 0.1 - 0.01
    [after] = recorder.for_step(run_id, "after")
    assert [o["item"] for o in after.body["steps"]["each"]] == ["a", "b", "c"]


def test_a_failed_item_fails_the_step_after_the_others_unless_tolerated(
        harness_factory: Any, recorder: Recorder) -> None:
    h: Harness = harness_factory(MANIFEST)
    h.start_workers(threads=4)
    items = [{"n": 0}, {"fail": True}, {"flaky": True}, {"n": 3}]
    ok = h.wait(h.start("tolerant", {"items": items}))
    assert ok["status"] == "success"
    out = steps_of(ok)["each"]["output"]
    assert out[1] is None and out[2]["calls"] == 2 and out[3]["item"] == {"n": 3}
    bad_id = h.start("strict", {"items": [*items[:2], {"n": 2}, {"n": 3}]})
    bad = h.wait(bad_id)
    assert bad["status"] == "failed"
    error = steps_of(bad)["each"]["error"]
    assert error["code"] == "fan_out_failed" and error["failed"] == [1]
    assert "1 of 4 items failed (tolerate 0); item 1" in error["message"]
    # The others settled: every item was called.
    assert sorted(c.body["index"] for c in recorder.calls
                  if c.body["run"]["run_id"] == bad_id) == [0, 1, 2, 3]


def test_the_cap_and_a_non_list_are_refused(harness_factory: Any) -> None:
    h: Harness = harness_factory(MANIFEST)
    h.start_workers()
    capped = h.wait(h.start("probe", {"regions": list(range(1001))}))
    error = steps_of(capped)["regions"]["error"]
    assert "1001 items, over the cap of 1000" in error["message"]
    assert "forEach" in error["message"] and "child runs" in error["message"]
    text = h.wait(h.start("probe", {"regions": "eu"}))
    assert "a list is required, got str" in steps_of(text)["regions"]["error"]["message"]


def test_lint_checks_what_items_read() -> None:
    text = """
backends:
  fn: { url: "http://127.0.0.1:1" }
workflows:
  w:
    steps:
      a: { backend: fn, route: /a }
      b: { backend: fn, route: /b, fanOut: { items: "steps.a.output" } }
"""
    with pytest.raises(ManifestError, match=r"steps\.b\.fanOut\.items: steps\.a reads step 'a'"):
        manifest_from_text(text, "orchestrator.yml", environ={})
