"""Cancel on an event (`cancelOn: [{event, if}]`), over real moto, real served functions
and a real durable workflow: an event whose `if` holds for an open run's input cancels
it, whatever it is doing (a DAG step running, a run queued in a concurrency group, a
durable run waiting for a signal), and names itself in the kill reason; an event that
does not match, and a repeat of one handled, cancel nothing. A DAG run's `pack` holds
at its latch until the test has sent its events: a sleep could end first on a loaded
machine, and the run with it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from functions.sdk.serving import BackgroundServer
from orchestrator.api.app import create_app
from tests.integration.test_durable import until
from tests.support.cli import cli
from tests.support.harness import Harness, steps_of
from tests.support.testfns import Recorder
from tests.support.versioned_fns import waiting_for_signal

MANIFEST = """
backends:
  app: { url: "${APP}", secret: durable-secret }
  fn: { url: "${FN}", timeout: 30s }
workflows:
  ship:
    cancelOn: { event: order.cancelled, if: "${{ input.order == event.data.order }}" }
    steps:
      pack: { backend: fn, route: /latch }
      send: { backend: fn, route: /echo, dependsOn: [pack] }
  one-at-a-time:
    concurrency: { group: dock, policy: queue }
    cancelOn:
      - { event: order.cancelled, if: "input.order == event.data.order" }
      - { event: dock.closed }
    steps:
      pack: { backend: fn, route: /latch }
  approval:
    backend: app
    timeout: 30s
    cancelOn: [{ event: order.cancelled, if: "input.order == event.data.order" }]
"""


@pytest.fixture
def h(build_harness: Any, tmp_path: Any, app_url: str, testfns: str) -> Iterator[Harness]:
    harness = build_harness(MANIFEST, tmp_path, {"APP": app_url, "FN": testfns})
    harness.start_workers(1, threads=4)
    harness.start_sweeper()
    yield harness
    harness.close()


def cancel_event(h: Harness, eid: str, order: Any) -> dict[str, Any]:
    return h.rt.events.emit("order.cancelled", {"order": order}, event_id=eid)


def test_a_matching_event_cancels_a_running_dag_run_and_names_itself(
        h: Harness, recorder: Recorder) -> None:
    doomed = h.start("ship", {"order": 1})
    kept = h.start("ship", {"order": 2})
    for run_id in (doomed, kept):
        h.wait_for_step(run_id, "pack", ("dispatched",))
    miss = cancel_event(h, "evt-0", 3)  # no open run is order 3
    assert miss["cancelled"] == []
    hit = cancel_event(h, "evt-1", 1)
    assert hit["cancelled"] == [doomed]
    recorder.latch(doomed).set()
    recorder.latch(kept).set()
    view = h.wait(doomed, timeout=20)
    assert view["status"] == "killed"
    assert view["kill_reason"] == "cancelled by event order.cancelled (evt-1)"
    assert steps_of(view)["send"]["status"] == "skipped"  # nothing started after it
    other = h.wait(kept, timeout=20)
    assert other["status"] == "success" and other["kill_reason"] is None
    # The same event again is a repeat: it cancels nothing, even a run open now.
    late = h.start("ship", {"order": 1})
    again = cancel_event(h, "evt-1", 1)
    assert again["duplicate"] is True and again["cancelled"] == []
    recorder.latch(late).set()
    assert h.wait(late, timeout=20)["status"] == "success"


def test_a_matching_event_cancels_a_run_queued_in_a_concurrency_group(
        h: Harness, recorder: Recorder) -> None:
    holder = h.start("one-at-a-time", {"order": 10})
    queued = h.start("one-at-a-time", {"order": 11})
    assert h.rt.runs.get(queued).status.value == "queued"
    with BackgroundServer(create_app(h.rt)) as server, httpx.Client(
            base_url=server.url, timeout=30) as c:
        resp = c.post("/events", json={"name": "order.cancelled", "id": "evt-11",
                                       "data": {"order": 11}})
        assert resp.status_code == 201, resp.text
        assert resp.json()["cancelled"] == [queued]
    view = h.rt.runs.view(queued)  # a queued run ends at once
    assert view["status"] == "killed"
    assert view["kill_reason"] == "cancelled by event order.cancelled (evt-11)"
    recorder.latch(holder).set()
    assert h.wait(holder, timeout=20)["status"] == "success"
    # A cancelOn without `if` takes every open run of its workflow.
    first = h.start("one-at-a-time", {"order": 12})
    second = h.start("one-at-a-time", {"order": 13})
    closed = h.rt.events.emit("dock.closed", None, event_id="close-1")
    assert sorted(closed["cancelled"]) == sorted([first, second])
    recorder.latch(first).set()
    recorder.latch(second).set()
    assert h.wait(first, timeout=20)["status"] == "killed"
    assert h.wait(second, timeout=20)["kill_reason"] == "cancelled by event dock.closed (close-1)"


def test_a_matching_event_cancels_a_running_durable_run(h: Harness) -> None:
    doomed = h.start("approval", {"order": 20})
    kept = h.start("approval", {"order": 21})
    for run_id in (doomed, kept):
        until(lambda run_id=run_id: waiting_for_signal(h.rt.store, run_id))
    assert cancel_event(h, "evt-20", 20)["cancelled"] == [doomed]
    view = h.wait(doomed, timeout=20)
    assert view["status"] == "killed"
    assert view["kill_reason"] == "cancelled by event order.cancelled (evt-20)"
    # The other goes on: a signal finishes it.
    assert h.rt.runs.get(kept).status.value == "running"
    h.rt.signals.send(kept, "approve", {"ok": True})
    done = h.wait(kept, timeout=20)
    assert done["status"] == "success" and done["output"] == {"decision": {"ok": True}}


def test_the_cli_emit_cancels_and_says_so(h: Harness, recorder: Recorder) -> None:
    doomed = h.start("ship", {"order": 30})
    h.wait_for_step(doomed, "pack", ("dispatched",))
    with BackgroundServer(create_app(h.rt)) as server:
        res = cli("event", "emit", "order.cancelled", "--id", "evt-cli",
                  "--data", '{"order": 30}', "--url", server.url)
    assert res.exit_code == 0, res.output
    assert f"cancelled {doomed}" in res.output
    recorder.latch(doomed).set()
    view = h.wait(doomed, timeout=20)
    assert view["status"] == "killed"
    assert view["kill_reason"] == "cancelled by event order.cancelled (evt-cli)"
