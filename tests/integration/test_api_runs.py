"""Runs over the HTTP API: Idempotency-Key, history, rerun from the failed step,
listing by status, cancel with a reason, bearer keys."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from functions.sdk.serving import BackgroundServer
from orchestrator.api.app import create_app
from orchestrator.engine.context import RunContext
from orchestrator.runtime import Runtime
from orchestrator.services.access.apikeys import ApiKeys
from tests.support.harness import Harness, steps_of
from tests.support.testfns import Recorder

MANIFEST = """
backends:
  fn: { url: "${FN}" }
workflows:
  chain:
    steps:
      one: { backend: fn, route: /echo }
      two: { backend: fn, route: /echo, dependsOn: [one] }
  checked:
    onFailure: continue-independent
    steps:
      extract: { backend: fn, route: /echo }
      side:    { backend: fn, route: /echo }
      check:   { backend: fn, route: /gate, dependsOn: [extract], retry: { max: 0 } }
      report:  { backend: fn, route: /echo, dependsOn: [check, side] }
  sleepy:
    steps:
      nap:   { backend: fn, route: /slow, payload: { seconds: 1.5 } }
      after: { backend: fn, route: /echo, dependsOn: [nap] }
  latched:
    steps:
      nap:   { backend: fn, route: /latch }
      after: { backend: fn, route: /echo, dependsOn: [nap] }
"""


@pytest.fixture
def api(harness_factory: Any) -> Iterator[tuple[Harness, httpx.Client]]:
    h = harness_factory(MANIFEST)
    h.start_workers(threads=8)
    with BackgroundServer(create_app(h.rt)) as server, httpx.Client(
        base_url=server.url, timeout=60
    ) as client:
        yield h, client


def test_idempotency_key_same_body_same_run_other_body_422(
    api: tuple[Harness, httpx.Client],
) -> None:
    h, c = api
    body = {"workflow": "chain", "input": {"order": 7}}
    first = c.post("/runs", json=body, headers={"Idempotency-Key": "order-7"})
    assert first.status_code == 201, first.text
    # Same body with its keys in another order: the same request.
    again = c.post("/runs", json={"input": {"order": 7}, "workflow": "chain"},
                   headers={"Idempotency-Key": "order-7"})
    assert again.status_code == 200 and again.json()["created"] is False
    assert again.json()["run_id"] == first.json()["run_id"]
    other = c.post("/runs", json={"workflow": "chain", "input": {"order": 8}},
                   headers={"Idempotency-Key": "order-7"})
    assert other.status_code == 422
    assert other.json()["error"]["code"] == "idempotency_key_reused"
    assert first.json()["run_id"] in other.json()["error"]["message"]
    bad = c.post("/runs", json=body, headers={"Idempotency-Key": "has space"})
    assert bad.status_code == 400 and "Idempotency-Key" in bad.json()["error"]["message"]
    h.wait(first.json()["run_id"])
    runs = c.get("/runs", params={"workflow": "chain"}).json()["runs"]
    assert [r["run_id"] for r in runs] == [first.json()["run_id"]]


def test_idempotency_key_expires_after_retention(harness_factory: Any) -> None:
    now = [1_800_000_000.0]
    h = harness_factory(MANIFEST, idempotency_retention=60.0)
    rt = Runtime.build(h.rt.settings, h.rt.manifest, clients=h.rt.clients,
                       clock=lambda: now[0])
    with BackgroundServer(create_app(rt)) as server, httpx.Client(base_url=server.url) as c:
        body = {"workflow": "chain"}
        one = c.post("/runs", json=body, headers={"Idempotency-Key": "k"}).json()["run_id"]
        now[0] += 30
        assert c.post("/runs", json=body, headers={"Idempotency-Key": "k"}).json()[
            "run_id"] == one
        now[0] += 31  # past the 60 s retention: the key is free again
        two = c.post("/runs", json=body, headers={"Idempotency-Key": "k"})
        assert two.status_code == 201 and two.json()["run_id"] != one


def test_hundred_concurrent_posts_with_one_key_make_one_run(
    api: tuple[Harness, httpx.Client],
) -> None:
    h, c = api
    body = {"workflow": "chain", "input": {"n": 1}}

    def post(_: int) -> tuple[int, str]:
        resp = c.post("/runs", json=body, headers={"Idempotency-Key": "burst-1"})
        return resp.status_code, resp.json()["run_id"]

    with ThreadPoolExecutor(max_workers=100) as pool:
        results = list(pool.map(post, range(100)))
    ids = {run_id for _, run_id in results}
    assert len(ids) == 1, ids
    assert sorted(code for code, _ in results).count(201) == 1
    assert {code for code, _ in results} <= {200, 201}
    (run_id,) = ids
    h.wait(run_id)
    listed = c.get("/runs", params={"workflow": "chain"}).json()["runs"]
    assert [r["run_id"] for r in listed] == [run_id]


def test_history_lists_every_transition_in_time_order(
    api: tuple[Harness, httpx.Client], recorder: Recorder
) -> None:
    h, c = api
    run_id = c.post("/runs", json={"workflow": "checked", "input": {"ok": False}}).json()[
        "run_id"]
    assert h.wait(run_id)["status"] == "failed"
    events = c.get(f"/runs/{run_id}/events").json()["events"]
    kinds = [(e["type"], e.get("step")) for e in events]
    assert kinds[0] == ("run.running", None) and kinds[-1] == ("run.failed", None)
    assert events[0]["trigger"] == {"source": "api"}
    times = [e["at"] for e in events]
    assert times == sorted(times)
    for step in ("extract", "side"):
        assert [k for k, s in kinds if s == step] == ["step.ready", "step.started",
                                                      "step.succeeded"]
    assert [k for k, s in kinds if s == "check"] == ["step.ready", "step.started",
                                                     "step.failed"]
    failed = next(e for e in events if e["type"] == "step.failed")
    assert failed["error"]["message"] == "input.ok is not true"
    assert [k for k, s in kinds if s == "report"] == ["step.skipped"]
    assert c.get("/runs/nope/events").status_code == 404


def test_rerun_reuses_successful_steps_and_runs_the_failed_ones(
    api: tuple[Harness, httpx.Client], recorder: Recorder
) -> None:
    h, c = api
    old = c.post("/runs", json={"workflow": "checked", "input": {"ok": False}}).json()["run_id"]
    assert h.wait(old)["status"] == "failed"
    busy = c.post("/runs", json={"workflow": "latched"}).json()["run_id"]  # held: running
    refused = c.post(f"/runs/{busy}/rerun", json={})
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "run_not_finished"
    recorder.latch(busy).set()

    resp = c.post(f"/runs/{old}/rerun", json={"input": {"ok": True}})
    assert resp.status_code == 201, resp.text
    new = resp.json()["run_id"]
    assert resp.json()["rerun_of"] == old
    view = h.wait(new)
    assert view["status"] == "success"
    assert view["rerun_of"] == old and view["trigger"] == {"source": "rerun", "run_id": old}
    assert view["input"] == {"ok": True}
    steps = steps_of(view)
    assert {n: s["status"] for n, s in steps.items()} == dict.fromkeys(
        ("extract", "side", "check", "report"), "success")
    # Reused steps kept their outputs and were not called again; the rest ran once.
    old_view = c.get(f"/runs/{old}").json()
    assert steps["extract"]["output"] == steps_of(old_view)["extract"]["output"]
    assert recorder.for_step(new, "extract") == [] and recorder.for_step(new, "side") == []
    assert len(recorder.for_step(new, "check")) == 1
    report = recorder.for_step(new, "report")[0].body
    assert set(report["steps"]) == {"check", "side"}
    assert report["steps"]["side"] == steps_of(old_view)["side"]["output"]
    reused = [e for e in c.get(f"/runs/{new}/events").json()["events"]
              if e["type"] == "step.reused"]
    assert {e["step"] for e in reused} == {"extract", "side"}
    assert all(e["from_run"] == old for e in reused)
    # Without an input the old one is kept; a succeeded run has nothing to rerun.
    again = c.post(f"/runs/{old}/rerun", json={}).json()["run_id"]
    assert h.wait(again)["input"] == {"ok": False}
    done = c.post(f"/runs/{new}/rerun", json={})
    assert done.status_code == 409 and done.json()["error"]["code"] == "nothing_to_rerun"
    h.wait(busy)


def test_list_runs_across_workflows_by_status_and_cancel_with_reason(
    api: tuple[Harness, httpx.Client], recorder: Recorder,
) -> None:
    h, c = api
    ok = c.post("/runs", json={"workflow": "chain"}).json()["run_id"]
    bad = c.post("/runs", json={"workflow": "checked", "input": {}}).json()["run_id"]
    h.wait(ok)
    h.wait(bad)
    # Held at its latch until the cancel has landed: a sleep could end first.
    slow = c.post("/runs", json={"workflow": "latched"}).json()["run_id"]
    resp = c.post(f"/runs/{slow}/cancel", json={"reason": "deploy freeze"})
    assert resp.status_code == 200
    recorder.latch(slow).set()
    assert h.wait(slow)["status"] == "killed"
    everything = c.get("/runs").json()["runs"]
    assert [r["run_id"] for r in everything] == [slow, bad, ok]  # newest first
    assert [r["run_id"] for r in c.get("/runs", params={"status": "failed"}).json()[
        "runs"]] == [bad]
    page = c.get("/runs", params={"status": "success", "limit": 1}).json()
    assert [r["run_id"] for r in page["runs"]] == [ok]
    assert c.get("/runs", params={"workflow": "chain", "status": "failed"}).json()[
        "runs"] == []
    view = c.get(f"/runs/{slow}").json()
    assert view["kill_reason"] == "deploy freeze"
    events = c.get(f"/runs/{slow}/events").json()["events"]
    assert any(e["type"] == "run.cancel_requested" and e["reason"] == "deploy freeze"
               for e in events)
    assert steps_of(view)["after"]["status"] == "skipped"


def test_bearer_keys(harness_factory: Any) -> None:
    h = harness_factory(MANIFEST)
    rt = Runtime.build(h.rt.settings.with_(api_auth=True), h.rt.manifest,
                       clients=h.rt.clients)
    key = ApiKeys(rt.control).create("ci", time.time())
    # Stored hashed: the key itself appears nowhere in the table.
    items = rt.clients.dynamodb.scan(TableName=rt.settings.names.control_table)["Items"]
    assert items and key not in str(items)
    with BackgroundServer(create_app(rt)) as server, httpx.Client(base_url=server.url) as c:
        assert c.get("/healthz").status_code == 200
        assert c.get("/openapi.json").status_code == 200
        for headers in ({}, {"Authorization": "Bearer ok_wrong"},
                        {"Authorization": key}, {"Authorization": "Basic abc"}):
            resp = c.get("/workflows", headers=headers)
            assert resp.status_code == 401, headers
            assert resp.json()["error"]["code"] in ("missing_api_key", "bad_api_key")
            assert resp.headers["www-authenticate"] == "Bearer"
        denied = c.post("/runs", json={"workflow": "chain"})
        assert denied.status_code == 401
        good = {"Authorization": f"Bearer {key}"}
        assert c.get("/workflows", headers=good).status_code == 200
        assert c.post("/runs", json={"workflow": "chain"}, headers=good).status_code == 201


def test_a_run_without_its_steps_is_one_read(api: tuple[Harness, httpx.Client]) -> None:
    h, c = api
    run_id = c.post("/runs", json={"workflow": "chain", "input": {}}).json()["run_id"]
    h.wait(run_id)
    reads: list[str] = []
    h.rt.clients.dynamodb.meta.events.register(
        "before-call", lambda model, **_: reads.append(model.name))
    alone = c.get(f"/runs/{run_id}", params={"steps": "false"})
    assert alone.status_code == 200 and reads == ["GetItem"]
    full = c.get(f"/runs/{run_id}").json()
    assert "steps" not in alone.json() and len(full["steps"]) == 2
    # What a run cost is on its steps' rows too: shown with them only.
    assert "cost" not in alone.json() and full["cost"]["total_requests"] > 0
    assert {k: v for k, v in full.items() if k not in ("steps", "cost")} == alone.json()
    bad = c.get(f"/runs/{run_id}", params={"steps": "maybe"})
    assert bad.status_code == 400 and "steps" in bad.json()["error"]["message"]


def test_history_keeps_each_rows_own_order_when_a_write_landed_late(
    api: tuple[Harness, httpx.Client],
) -> None:
    h, c = api
    h.close()  # no worker: the root stays ready, its message aside
    run_id = c.post("/runs", json={"workflow": "chain", "input": {}}).json()["run_id"]
    run = h.rt.store.runs.get_run(run_id, time.time())
    assert run is not None
    # The root as planned (its start left its row out): ready since the run's launch.
    (one,) = [r for r in RunContext.of(run).rows([]) if r.step == "one"]
    assert one.ready_at is not None
    # A sweeper read its clock, stalled, and its redispatch landed after the ready: its
    # entry's time is earlier than the entry before it in the row.
    assert h.rt.store.steps.touch_dispatch(run_id, "one", 1, one.ready_at - 5, plan=one)
    events = c.get(f"/runs/{run_id}/events").json()["events"]
    mine = [e["type"] for e in events if e.get("step") == "one"]
    assert mine == ["step.ready", "step.redispatched"]


def test_a_long_poll_answers_when_the_run_ends_not_when_the_wait_is_up(
    api: tuple[Harness, httpx.Client],
) -> None:
    _, c = api
    run_id = c.post("/runs", json={"workflow": "sleepy"}).json()["run_id"]
    t0 = time.monotonic()
    r = c.get(f"/runs/{run_id}", params={"steps": "false", "wait": "25"})
    took = time.monotonic() - t0
    assert r.status_code == 200 and r.json()["status"] == "success", r.text
    assert "steps" not in r.json()
    assert took < 25  # answered at the run's end (about 1.5 s), not at the wait's
    # A finished run answers at once, with its steps when asked.
    r = c.get(f"/runs/{run_id}", params={"wait": "25"})
    assert r.json()["status"] == "success" and len(r.json()["steps"]) == 2
    for bad in ("abc", "-1", "26", "nan"):
        r = c.get(f"/runs/{run_id}", params={"wait": bad})
        assert r.status_code == 400 and r.json()["error"]["code"], bad


def test_a_long_poll_on_a_running_run_answers_when_its_wait_is_up(
    api: tuple[Harness, httpx.Client],
) -> None:
    h, c = api
    run_id = c.post("/runs", json={"workflow": "sleepy"}).json()["run_id"]
    r = c.get(f"/runs/{run_id}", params={"steps": "false", "wait": "0.3"})
    assert r.status_code == 200 and r.json()["status"] in ("running", "success")
    h.wait(run_id)
