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
      only:
        backend: fn
        route: /status
        payload: { code: "${{ input.code }}", reason: "${{ input.reason }}" }
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
