"""A workflow's health over the last day and week (issue 42, section 3): a heartbeat adds
a process's counts to the hour it falls in as well as to the stack's cumulative item
(the hour's item expires), and `GET /workflows/{name}/stats` over real HTTP counts the
runs that succeeded and failed on the test functions in the hour they ran, estimates
p50/p95 from known buckets, groups the failures by error code and lists the triggers."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from functions.sdk.serving import BackgroundServer
from orchestrator.adapters.store.hourly_counts import HOUR, KEEP, hour_at
from orchestrator.adapters.tallies import bucket_attr
from orchestrator.api.app import create_app
from orchestrator.services.health.heartbeat import Heartbeat
from tests.support.harness import Harness
from tests.support.polling import until

MANIFEST = """
backends:
  fn: { url: "${FN}" }
webhooks:
  hello-hook: { workflow: hello, verify: { scheme: none } }
workflows:
  hello:
    on: [{ event: order.paid }]
    steps:
      one: { backend: fn, route: /echo }
      two: { backend: fn, route: /echo, dependsOn: [one] }
  broken:
    steps:
      bad: { backend: fn, route: /status, payload: { code: 400 }, if: "${{ input.kind == 'bad' }}" }
      slow:
        backend: fn
        route: /slow
        payload: { seconds: 2 }
        timeout: 0.3s
        retry: { max: 0 }
        if: "${{ input.kind == 'slow' }}"
  quiet:
    schedule: { every: 1h }
    steps:
      one: { backend: fn, route: /echo }
"""

BEAT = 0.2


@pytest.fixture
def stack(harness_factory: Any) -> Iterator[tuple[Harness, httpx.Client]]:
    h = harness_factory(MANIFEST, heartbeat_interval=BEAT)
    with BackgroundServer(create_app(h.rt)) as server, \
            httpx.Client(base_url=server.url) as client:
        yield h, client


def test_a_beat_adds_to_the_hour_it_falls_in_and_the_hour_expires(
        harness_factory: Any) -> None:
    h = harness_factory(MANIFEST)
    store = h.rt.store
    t0 = 1_800_000_000.0  # an hour's start
    clock = [t0 + 10]
    beat = Heartbeat(store, "test", "t1", every=10, clock=lambda: clock[0])
    store.tallies.run_started("hello")
    store.tallies.run_finished("hello", "success")
    store.tallies.step_took("hello", 0.02)
    beat.flush()
    clock[0] = t0 + HOUR + 5  # the next hour
    store.tallies.run_started("hello")
    store.tallies.run_finished("hello", "failed")
    beat.flush()
    hour = hour_at(t0)
    got = store.hourly.read("hello", hour - 5, t0 + HOUR + 5)
    assert got == {
        hour: {"started": 1, "finished_success": 1, "duration_count": 1,
               "duration_sum": 0.02, bucket_attr(2): 1},
        hour + 1: {"started": 1, "finished_failed": 1}}
    # The cumulative item has both beats' counts.
    assert store.counts.read(t0 + HOUR + 5)["hello"]["started"] == 2
    # Hours before `first` are not read; an hour's item is gone KEEP after its end.
    assert store.hourly.read("hello", hour + 1, t0 + HOUR + 5) == {hour + 1: got[hour + 1]}
    assert store.hourly.read("hello", hour, t0 + 2 * HOUR + KEEP + 1) == {}


def test_stats_count_the_runs_in_their_hour_and_group_the_failures(
        stack: tuple[Harness, httpx.Client]) -> None:
    h, c = stack
    h.start_workers()
    ok = [h.start("hello", {"n": i}) for i in range(3)]
    bad = [h.start("broken", {"kind": "bad"}) for _ in range(2)]
    slow = h.start("broken", {"kind": "slow"})
    assert [h.wait(r)["status"] for r in ok] == ["success"] * 3
    assert [h.wait(r)["status"] for r in [*bad, slow]] == ["failed"] * 3

    def counted(name: str, started: int) -> dict[str, Any] | None:
        got = c.get(f"/workflows/{name}/stats", params={"window": "day"})
        assert got.status_code == 200, got.text
        body: dict[str, Any] = got.json()
        return body if body["totals"]["started"] == started and sum(
            body["totals"]["finished"].values()) == started else None

    hello = until("hello's runs counted", lambda: counted("hello", 3), timeout=20)
    broken = until("broken's runs counted", lambda: counted("broken", 3), timeout=20)
    # 24 hourly buckets, the last the hour under way, where the runs are.
    assert hello["window"] == "day" and hello["bucket_seconds"] == HOUR
    assert len(hello["buckets"]) == 24
    last = hello["buckets"][-1]
    assert last["start"] <= hello["at"] < last["end"] == last["start"] + HOUR
    assert [b["start"] for b in hello["buckets"]] == [
        last["start"] - (23 - i) * HOUR for i in range(24)]
    # The runs are in the last hour (or the last two, had a beat fallen past the turn).
    recent = hello["buckets"][-2:]
    assert sum(b["started"] for b in recent) == 3 and last["started"] > 0
    assert sum(b["finished"]["success"] for b in recent) == 3
    assert sum(b["steps"] for b in recent) == 6 and last["success_rate"] == 1.0
    assert 0 < last["p50"] <= last["p95"]
    assert all(b["started"] == 0 and b["success_rate"] is None and b["p50"] is None
               for b in hello["buckets"][:-2])
    assert hello["totals"]["started"] == 3 and hello["failures"] == {"scanned": 0, "groups": []}
    assert hello["triggers"] == {"events": ["order.paid"], "webhooks": ["hello-hook"],
                                 "schedule": None}
    assert broken["totals"]["finished"]["failed"] == 3
    assert broken["totals"]["success_rate"] == 0.0
    # Grouped by the failing step's code: two 400s, one timeout; the newest run of each.
    groups = broken["failures"]["groups"]
    assert broken["failures"]["scanned"] == 3
    assert [(g["code"], g["count"], g["step"]) for g in groups] == [
        ("http_error", 2, "bad"), ("timeout", 1, "slow")]
    assert groups[0]["newest_run_id"] == bad[1] and groups[1]["newest_run_id"] == slow
    assert groups[0]["message"].startswith("step bad failed")
    quiet = c.get("/workflows/quiet/stats").json()
    assert quiet["triggers"]["schedule"]["schedule"] and quiet["totals"]["started"] == 0


def test_percentiles_from_known_buckets_in_a_past_hour_and_the_week(
        stack: tuple[Harness, httpx.Client]) -> None:
    h, c = stack
    now = h.rt.clock()
    # Three hours ago: 10 attempts in (0.01, 0.025], 10 in (0.05, 0.1]; 4 runs ended.
    h.rt.store.hourly.add("quiet", {
        bucket_attr(2): 10, bucket_attr(4): 10, "duration_count": 20, "started": 4,
        "finished_success": 3, "finished_killed": 1}, now - 3 * HOUR)
    day = c.get("/workflows/quiet/stats", params={"window": "day"}).json()
    (past,) = [b for b in day["buckets"] if b["steps"]]
    assert past["start"] == (hour_at(now) - 3) * HOUR
    # p50: rank 10 closes the first bucket, at its bound; p95: rank 19 is 9/10 into
    # (0.05, 0.1].
    assert past["p50"] == pytest.approx(0.025) and past["p95"] == pytest.approx(0.095)
    assert past["success_rate"] == 0.75 and past["finished"]["killed"] == 1
    week = c.get("/workflows/quiet/stats", params={"window": "week"}).json()
    assert week["bucket_seconds"] == 6 * HOUR and len(week["buckets"]) == 28
    assert all(b["start"] % (6 * HOUR) == 0 for b in week["buckets"])
    assert week["buckets"][-1]["start"] <= week["at"] < week["buckets"][-1]["end"]
    (six,) = [b for b in week["buckets"] if b["steps"]]
    assert six["start"] <= past["start"] < six["end"]
    assert week["totals"]["p95"] == pytest.approx(0.095) and week["totals"]["started"] == 4


def test_an_unknown_workflow_is_404_and_a_window_other_than_day_or_week_400(
        stack: tuple[Harness, httpx.Client]) -> None:
    _, c = stack
    got = c.get("/workflows/nope/stats")
    assert got.status_code == 404 and "nope" in got.json()["error"]["message"]
    got = c.get("/workflows/hello/stats", params={"window": "month"})
    assert got.status_code == 400 and "window" in got.json()["error"]["message"]
