"""The stack's health (issue 42, section 3): each process's heartbeat in the control
table (a worker's appears, and leaves the alive list when it stops or falls silent),
`GET /health` over real HTTP, and `GET /metrics` parsed as Prometheus would, its counts
equal to the runs that succeeded and failed (added by the processes' heartbeats, so the
whole stack's), behind the API's bearer key."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from functions.sdk.serving import BackgroundServer
from orchestrator.adapters.store.heartbeats import MISSED_BEATS
from orchestrator.adapters.store.stack_counts import StackCounts
from orchestrator.api.app import create_app
from orchestrator.services.access.apikeys import ApiKeys
from orchestrator.services.health.heartbeat import Heartbeat
from tests.support.harness import Harness
from tests.support.polling import until

MANIFEST = """
backends:
  fn: { url: "${FN}", limits: { concurrency: 3 } }
workflows:
  hello:
    steps:
      one: { backend: fn, route: /echo }
      two: { backend: fn, route: /echo, dependsOn: [one] }
  broken:
    steps:
      only: { backend: fn, route: /status, payload: { code: 400 } }
"""

BEAT = 0.2


@pytest.fixture
def stack(harness_factory: Any) -> Iterator[tuple[Harness, str]]:
    h = harness_factory(MANIFEST, heartbeat_interval=BEAT)
    with BackgroundServer(create_app(h.rt)) as server:
        yield h, server.url


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape: (name, sorted labels) -> value."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_metrics_count_the_runs_that_succeeded_and_failed(
        stack: tuple[Harness, str]) -> None:
    h, url = stack
    h.start_workers()
    ok = [h.start("hello", {"n": i}) for i in range(3)]
    bad = [h.start("broken", {}) for _ in range(2)]
    assert [h.wait(r)["status"] for r in ok] == ["success"] * 3
    assert [h.wait(r)["status"] for r in bad] == ["failed"] * 2
    wanted = {
        ("orchestrator_runs_started_total", (("workflow", "hello"),)): 3.0,
        ("orchestrator_runs_started_total", (("workflow", "broken"),)): 2.0,
        ("orchestrator_runs_finished_total", (("status", "success"), ("workflow", "hello"))): 3.0,
        ("orchestrator_runs_finished_total", (("status", "failed"), ("workflow", "broken"))): 2.0,
        ("orchestrator_runs_finished_total", (("status", "failed"), ("workflow", "hello"))): 0.0,
        # Six attempts of hello's steps, two of broken's (a 400 is not retried).
        ("orchestrator_step_duration_seconds_count", (("workflow", "hello"),)): 6.0,
        ("orchestrator_step_duration_seconds_count", (("workflow", "broken"),)): 2.0,
        ("orchestrator_step_duration_seconds_bucket", (("le", "+Inf"), ("workflow", "hello"))): 6.0,
    }
    with httpx.Client(base_url=url) as c:

        last: list[Any] = []

        def scraped() -> dict[Any, float] | None:
            got = c.get("/metrics")
            assert got.status_code == 200
            assert got.headers["content-type"].startswith("text/plain")
            seen = samples(got.text)
            last[:] = [{k: seen.get(k) for k in wanted}]
            return seen if all(seen.get(k) == v for k, v in wanted.items()) else None

        try:
            seen = until("the runs counted in /metrics", scraped, timeout=20)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; last scraped: {last}") from None
    # The histogram's buckets are cumulative, up to the count.
    buckets = sorted((float(dict(k[1])["le"]), v) for k, v in seen.items()
                     if k[0] == "orchestrator_step_duration_seconds_bucket"
                     and dict(k[1])["workflow"] == "hello")
    assert [v for _, v in buckets] == sorted(v for _, v in buckets) and buckets[-1][1] == 6.0
    assert seen[("orchestrator_step_duration_seconds_sum", (("workflow", "hello"),))] > 0
    # The gauges: every queue's depth, the worker alive, the backend's limit.
    for queue in ("dispatch", "timer", "dead_letter"):
        for state in ("visible", "in_flight", "delayed"):
            assert (("orchestrator_queue_messages", (("queue", queue), ("state", state)))
                    in seen)
    assert seen[("orchestrator_processes_alive", (("kind", "worker"),))] == 1.0
    assert seen[("orchestrator_backend_concurrency_limit", (("backend", "fn"),))] == 3.0
    assert seen[("orchestrator_backend_in_flight", (("backend", "fn"),))] == 0.0


def test_a_workers_heartbeat_appears_and_drops_out_when_it_stops(
        stack: tuple[Harness, str]) -> None:
    h, url = stack
    stop = threading.Event()
    worker = h.rt.worker()
    t = threading.Thread(target=worker.run, args=(stop,), kwargs={"wait": 1}, daemon=True)
    t.start()
    try:
        run_id = h.start("hello", {})
        assert h.wait(run_id)["status"] == "success"
        with httpx.Client(base_url=url) as c:

            def listed(state: str) -> dict[str, Any] | None:
                body = c.get("/health").json()
                mine = [p for p in body["processes"][state] if p["id"] == worker.id]
                return mine[0] if mine else None

            seen = until("the worker alive in /health",
                         lambda: (p := listed("alive")) and p["handled"].get("attempts", 0) >= 2
                         and p)
            assert seen["kind"] == "worker" and seen["version"] and seen["alive"] is True
            assert seen["handled"]["messages"] >= 1
            health = c.get("/health").json()
            assert {q["queue"] for q in health["queues"]} == {"dispatch", "timer", "dead_letter"}
            assert health["backends"] == [{"backend": "fn", "concurrency": 3, "rate": None,
                                           "holding": 0, "running": 0}]
            # Silent for more than three beats (a clock moved on): no longer alive.
            later = time.time() + (MISSED_BEATS + 1) * BEAT
            alive, gone = h.rt.health().processes(later)
            assert worker.id not in {p.id for p in alive}
            assert worker.id in {p.id for p in gone}
            stop.set()
            t.join(timeout=10)
            gone_now = listed("gone")
            assert gone_now is not None and gone_now["stopped"] is True
            assert listed("alive") is None
    finally:
        stop.set()


def test_metrics_and_health_want_the_bearer_key(harness_factory: Any) -> None:
    h = harness_factory(MANIFEST, api_auth=True, heartbeat_interval=BEAT)
    key = ApiKeys(h.rt.control).create("prometheus", time.time())
    with BackgroundServer(create_app(h.rt)) as server, httpx.Client(base_url=server.url) as c:
        for path in ("/metrics", "/health"):
            assert c.get(path).status_code == 401
            got = c.get(path, headers={"Authorization": f"Bearer {key}"})
            assert got.status_code == 200, got.text
        families = {f.name for f in text_string_to_metric_families(
            c.get("/metrics", headers={"Authorization": f"Bearer {key}"}).text)}
        assert {"orchestrator_runs_started", "orchestrator_queue_messages",
                "orchestrator_processes_alive"} <= families


CHAIN = "\n".join(
    ["backends:", '  fn: { url: "${FN}" }', "workflows:", "  chain:", "    steps:",
     "      s0: { backend: fn, route: /echo }"]
    + [f"      s{i}: {{ backend: fn, route: /echo, dependsOn: [s{i - 1}] }}"
       for i in range(1, 20)])


def test_the_metrics_cost_a_beats_writes_not_a_request_per_step(harness_factory: Any) -> None:
    """Twenty steps with a beat far off: the worker's heartbeat writes at its start and
    at its stop, and adds the counts once, at its last beat; the steps themselves write
    nothing for the metrics."""
    h = harness_factory(CHAIN, heartbeat_interval=3600.0)
    writes: list[str] = []

    def note(params: dict[str, Any], **_: Any) -> None:
        pk = params.get("Key", {}).get("pk", {}).get("S")
        if pk in ("procs", "counts"):
            writes.append(pk)

    h.rt.clients.dynamodb.meta.events.register("provide-client-params.dynamodb.UpdateItem",
                                               note)
    stop = threading.Event()
    worker = h.rt.worker()
    t = threading.Thread(target=worker.run, args=(stop,), kwargs={"wait": 1}, daemon=True)
    t.start()
    until("the worker's first beat", lambda: writes)
    run_id = h.start("chain", {})
    assert h.wait(run_id)["status"] == "success"
    assert writes == ["procs"]  # its first beat, as it started
    stop.set()
    t.join(timeout=10)
    assert writes == ["procs", "procs", "counts"]  # its last beat, and the counts once
    counts = h.rt.store.counts.read(time.time())["chain"]
    assert counts["started"] == 1 and counts["finished_success"] == 1
    assert counts["duration_count"] == 20


SCRIPTS = """
backends:
  fn: { url: "${FN}" }
  sh: { url: "${FN}", capabilities: [shell] }   # scripts' runs (no worker runs them)
workflows:
  hello:
    steps:
      one: { backend: fn, route: /echo }
"""


def test_ad_hoc_scripts_are_counted_under_one_label(harness_factory: Any) -> None:
    """POST /scripts/runs names its workflow as its client likes: each name would add a
    counters item that never expires and a label to every scrape. Their runs are counted
    under `(ad-hoc)`, a stored script's and the manifest's under their own names, and an
    item an older release wrote for an ad-hoc name is summed into `(ad-hoc)`."""
    h = harness_factory(SCRIPTS)
    with BackgroundServer(create_app(h.rt)) as server, httpx.Client(base_url=server.url) as c:
        stored = c.put("/scripts/nightly", json={"text": "echo stored"})
        assert stored.status_code == 200, stored.text
        for name in ("adhoc-1", "adhoc-2", "adhoc-3", "nightly"):
            r = c.post("/scripts/runs", json={"name": name, "text": "echo hi"})
            assert r.status_code == 201, r.text
        h.start("hello", {})
        StackCounts(h.rt.store.control).add("adhoc-0", {"started": 2})  # an older release's
        Heartbeat(h.rt.store, "test", "t1", every=3600).beat()
        seen = samples(c.get("/metrics").text)
    started = {dict(labels)["workflow"]: v for (name, labels), v in seen.items()
               if name == "orchestrator_runs_started_total"}
    assert started == {"(ad-hoc)": 5.0, "nightly": 1.0, "hello": 1.0}
    # The items written: one for the ad-hoc scripts, none a name.
    items = StackCounts(h.rt.store.control).read(time.time())
    assert set(items) == {"(ad-hoc)", "adhoc-0", "nightly", "hello"}
