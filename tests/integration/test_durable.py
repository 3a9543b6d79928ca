"""Durable workflows end to end: the real engine on moto, the workflows served by a real
FunctionApp over real HTTP."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from functions.sdk.serving import BackgroundServer
from orchestrator.api.app import create_app as create_api
from orchestrator.sweeper import SweepReport
from tests.support.durable_fns import CONCURRENCY, EFFECTS, HOOK_URLS, LEDGER
from tests.support.harness import Harness

MANIFEST = """
backends:
  app: { url: "${APP}", secret: durable-secret }
workflows:
  chain: { backend: app }
  sleeper: { backend: app }
  approval: { backend: app }
  flaky: { backend: app }
  saga: { backend: app }
  versioned: { backend: app, workflow: versioned, timeout: 30s }
  slowchain: { backend: app }
  trial: { backend: app, on: { event: trial.started } }
  ships: { backend: app }
  docapproval: { backend: app }
  fanout: { backend: app }
  branches: { backend: app }
  parent: { backend: app }
"""


@pytest.fixture(params=[2, pytest.param(1, marks=pytest.mark.slow)],
                ids=["protocol2", "protocol1"])
def h(request: pytest.FixtureRequest, build_harness: Any, tmp_path: Any) -> Iterator[Harness]:
    """Every test runs against the SDK answering in version 2 (checkpoint streams), and
    in the slow suite again against one that speaks only version 1."""
    url = request.getfixturevalue("app_url" if request.param == 2 else "app_url_v1")
    harness = build_harness(MANIFEST, tmp_path, {"APP": url})
    harness.start_workers(1, threads=4)
    harness.start_sweeper()
    yield harness
    harness.close()


def until(check: Any, timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)


def test_a_chain_runs_each_step_once_and_ends_with_the_workflows_result(h: Harness) -> None:
    run_id = h.start("chain", {"steps": 5})
    view = h.wait(run_id)
    assert view["status"] == "success", view
    assert view["output"] == {"total": 10}
    assert LEDGER.bodies(run_id) == [f"add-{i}" for i in range(5)]
    journal = h.rt.store.journal.read_journal(run_id)
    assert [e["name"] for e in journal] == [f"add-{i}" for i in range(5)]


def test_a_runs_first_call_reads_no_journal_and_a_call_after_a_wait_reads_it(
        h: Harness) -> None:
    # The journal's whole read (store.journal.read_journal): run id and the journal's prefix.
    reads: list[str] = []

    def seen(params: dict[str, Any], **_: Any) -> None:
        values = params.get("ExpressionAttributeValues", {})
        if ":j" in values:
            reads.append(values[":r"]["S"])

    h.rt.clients.dynamodb.meta.events.register("before-parameter-build.dynamodb.Query", seen)
    chain = h.start("chain", {"steps": 3})
    assert h.wait(chain)["status"] == "success"
    # Claimed once, called with an empty journal it never read.
    assert chain not in reads
    sleeper = h.start("sleeper", {"sleep": "1s"})
    assert h.wait(sleeper)["status"] == "success"
    # After its sleep, its driver was claimed again: the call replays what was read.
    assert sleeper in reads


def test_a_sleep_holds_nothing_and_the_run_resumes_after_it(h: Harness) -> None:
    run_id = h.start("sleeper", {"sleep": "1s"})
    waiting = until(lambda: (h.rt.store.drivers.get_driver(run_id) or None)
                            if (h.rt.store.drivers.get_driver(run_id) or _none()).waiting else None)
    assert waiting.lease_owner is None and waiting.waiting["kind"] == "sleep"
    view = h.wait(run_id)
    assert view["status"] == "success"
    assert LEDGER.bodies(run_id) == ["before", "after"]
    sleep = next(e for e in h.rt.store.journal.read_journal(run_id) if e["kind"] == "sleep")
    assert sleep["ended"] - sleep["started"] >= 1.0


def _none() -> Any:
    class Nothing:
        waiting = None
    return Nothing()


def test_a_signal_sent_before_the_wait_is_not_lost(h: Harness) -> None:
    run_id = h.start("approval", {"twice": True})
    h.rt.signals.send(run_id, "approve", {"n": 1})
    h.rt.signals.send(run_id, "approve", {"n": 2})
    view = h.wait(run_id)
    assert view["status"] == "success"
    assert view["output"] == {"first": {"n": 1}, "second": {"n": 2}}


def test_a_signal_wakes_a_waiting_run(h: Harness) -> None:
    run_id = h.start("approval", {})
    until(lambda: (h.rt.store.drivers.get_driver(run_id) or _none()).waiting)
    h.rt.signals.send(run_id, "approve", {"approved": True})
    assert h.wait(run_id)["output"] == {"decision": {"approved": True}}


def test_a_signal_wait_times_out_with_none(h: Harness) -> None:
    run_id = h.start("approval", {"timeout": "1s"})
    assert h.wait(run_id)["output"] == {"decision": None}


def test_retries_back_off_and_keep_one_idempotency_key(h: Harness) -> None:
    run_id = h.start("flaky", {"fails": 2})
    view = h.wait(run_id)
    assert view["output"] == "ok after 3"
    assert len(LEDGER.keys(run_id, "flaky")) == 1
    [entry] = h.rt.store.journal.read_journal(run_id)
    assert entry["attempts"] == 3


def test_a_saga_compensates_and_an_uncaught_failure_fails_the_run(h: Harness) -> None:
    ok = h.start("saga", {})
    bad = h.start("saga", {"reraise": True})
    assert h.wait(ok)["output"] == {"refunded": True, "why": "bad_address"}
    failed = h.wait(bad)
    assert failed["status"] == "failed"
    # The run's error is the workflow's own (no internal "$run" step wrapped around it).
    assert failed["error"]["code"] == "bad_address" and failed["error"]["step"] == "ship"
    assert LEDGER.bodies(ok) == ["charge", "ship", "refund"]


def test_signals_over_http(h: Harness) -> None:
    api = create_api(h.rt)
    with BackgroundServer(api) as server:
        run_id = h.start("approval", {})
        url = f"{server.url}/runs/{run_id}/signals/approve"
        first = httpx.post(url, json={"ok": 1}, headers={"Idempotency-Key": "k1"})
        again = httpx.post(url, json={"ok": 1}, headers={"Idempotency-Key": "k1"})
        assert first.status_code == 202, first.text
        assert again.status_code == 200, again.text
        assert again.json()["duplicate"] is True
        assert h.wait(run_id)["output"] == {"decision": {"ok": 1}}
        late = httpx.post(url, json={})
        assert late.status_code == 409 and late.json()["error"]["code"] == "run_finished"
        missing = httpx.post(f"{server.url}/runs/nope/signals/approve", json={})
        assert missing.status_code == 404


def waiting_for(h: Harness, run_id: str, kind: str, name: str | None = None
                ) -> dict[str, Any]:
    def check() -> Any:
        row = h.rt.store.drivers.get_driver(run_id)
        w = None if row is None or row.lease_owner else row.waiting
        return w if w and w["kind"] == kind and name in (None, w["name"]) else None
    got: dict[str, Any] = until(check)
    return got


def test_a_replay_mismatch_pauses_and_a_resume_after_the_fix_goes_on(h: Harness) -> None:
    run_id = h.start("versioned", {})
    waiting_for(h, run_id, "signal")
    LEDGER.version[run_id] = 2  # a deploy renames the second step
    h.rt.signals.send(run_id, "finish", {})
    paused = until(lambda: (v := h.rt.runs.view(run_id))["status"] == "paused" and v)
    assert paused["paused"]["code"] == "replay_mismatch"
    shown = paused["paused"]["details"]
    assert shown["recorded"]["name"] == "two" and shown["issued"]["name"] == "two-renamed"
    assert [s["status"] for s in paused["steps"]][-1] == "success"  # the signal, recorded
    LEDGER.version[run_id] = 1  # the fix
    assert h.rt.durable.resume(run_id)["was_paused"] is True
    done = h.wait(run_id)
    assert done["status"] == "success" and done["output"] == {"done": "two"}
    assert LEDGER.bodies(run_id) == ["one", "two"]
    assert [e["type"] for e in h.rt.runs.history(run_id)
            if e["type"] in ("run.paused", "run.resumed")] == ["run.paused", "run.resumed"]


def test_a_reset_runs_the_forgotten_operations_again(h: Harness) -> None:
    run_id = h.start("versioned", {})
    waiting_for(h, run_id, "signal")
    out = h.rt.durable.reset(run_id, 1)
    assert out["forgotten"] == 1  # step two (the signal wait is not recorded yet)
    until(lambda: LEDGER.bodies(run_id) == ["one", "two", "two"])
    waiting_for(h, run_id, "signal")
    h.rt.signals.send(run_id, "finish", {})
    assert h.wait(run_id)["status"] == "success"


def test_cancelling_a_waiting_run_ends_it_killed(h: Harness) -> None:
    run_id = h.start("approval", {})
    waiting_for(h, run_id, "signal")
    h.rt.runs.kill(run_id, "not needed")
    view = h.wait(run_id)
    assert view["status"] == "killed"
    with pytest.raises(Exception, match="already finished"):
        h.rt.signals.send(run_id, "approve", {})


def test_cancelling_a_run_mid_chain_stops_its_calls(h: Harness) -> None:
    run_id = h.start("slowchain", {"steps": 100})
    until(lambda: len(LEDGER.bodies(run_id)) >= 3)
    h.rt.runs.kill(run_id, "stop")
    assert h.wait(run_id)["status"] == "killed"
    ran = len(LEDGER.bodies(run_id))
    assert ran < 100
    journal = h.rt.store.journal.read_journal(run_id)
    assert len(journal) <= ran


def test_the_sweeper_leaves_a_run_waiting_for_a_signal_alone(h: Harness) -> None:
    run_id = h.start("approval", {})
    waiting_for(h, run_id, "signal")
    row = h.rt.store.drivers.get_driver(run_id)
    # Its poke wakes it; its wake, an hour out, only repairs a poke lost with its process.
    assert row is not None and row.wake_at is not None
    assert 3500 < row.wake_at - time.time() <= 3600
    later = time.time() + 1800
    for _ in range(3):
        h.rt.sweeper(clock=lambda: later).sweep_runs([run_id], set(), later, SweepReport())
    after = h.rt.store.drivers.get_driver(run_id)
    assert after is not None and after.resends == 0 and after.pokes == row.pokes


def test_an_event_cuts_a_deadline_short_for_its_subject_only(h: Harness) -> None:
    one = h.rt.events.emit("trial.started", {"timeout": "3s"}, key="cust-1")["runs"][0]
    two = h.rt.events.emit("trial.started", {"timeout": "3s"}, key="cust-2")["runs"][0]
    for r in (one, two):
        waiting_for(h, r["run_id"], "event")
    h.rt.events.emit("plan.upgraded", {}, key="cust-1", event_id="up-1")
    assert h.wait(one["run_id"])["output"] == {"upgraded": True, "event": "up-1"}
    late = h.wait(two["run_id"])
    assert late["output"] == {"upgraded": False}
    assert LEDGER.bodies(two["run_id"]) == ["welcome", "downgrade"]
    timed_out = [s for s in late["steps"] if s["kind"] == "event"]
    assert timed_out[0]["status"] == "timed_out"
    # An upgrade after the timeout changes nothing.
    h.rt.events.emit("plan.upgraded", {}, key="cust-2")
    assert h.rt.runs.view(two["run_id"])["output"] == {"upgraded": False}


def test_an_event_emitted_before_the_wait_registers_is_seen(h: Harness) -> None:
    # The step's own side effect emits the event: it lands before the call that
    # reports the wait has even returned.
    EFFECTS["ship"] = lambda run_id: h.rt.events.emit(
        "order.shipped", {"carrier": "x"}, key=run_id)
    run_id = h.start("ships", {})
    view = h.wait(run_id)
    assert view["output"]["data"] == {"carrier": "x"} and view["output"]["key"] == run_id


def test_an_event_before_the_previous_operation_needs_a_lookback(h: Harness) -> None:
    EFFECTS["ship"] = lambda run_id: None
    # Each run's subject is its own id: emit for it before it starts.
    h.rt.events.emit("order.shipped", {"n": 1}, key="early-1")
    plain, _ = h.rt.runs.start("ships", {"timeout": "1s"}, "early-1")
    assert h.wait(plain.run_id)["output"] is None
    h.rt.events.emit("order.shipped", {"n": 2}, key="early-2")
    back, _ = h.rt.runs.start("ships", {"timeout": "5s", "lookback": "1h"}, "early-2")
    assert h.wait(back.run_id)["output"]["data"] == {"n": 2}


def test_a_hook_delivers_its_signal_once_with_its_metadata(h: Harness) -> None:
    api = create_api(h.rt)
    with BackgroundServer(api) as server:
        run_id = h.start("docapproval", {"doc": "d-7"})
        waiting_for(h, run_id, "signal")
        urls = HOOK_URLS[run_id]
        token = urls[0].rsplit("/", 1)[1]
        assert len(token) >= 43  # 256 bits, base64url
        url = server.url + urls[0]
        first = httpx.post(url, json={"approved": True, "documentId": "forged"})
        assert first.status_code == 202, first.text
        again = httpx.post(url, json={"approved": True, "documentId": "forged"})
        assert again.status_code == 200 and again.json()["duplicate"] is True
        other = httpx.post(url, json={"approved": False})
        assert other.status_code == 410 and other.json()["error"]["code"] == "hook_gone"
        assert httpx.post(server.url + "/hooks/" + "x" * 43, json={}).status_code == 404
        view = h.wait(run_id)
        # The workflow's metadata wins over what the caller sent.
        assert view["output"] == {"published": True, "documentId": "d-7"}
        assert len(set(urls)) == 1 and len(urls) >= 2  # a replay gets the same URL
        # Only the token's hash is stored: neither the journal nor the control table
        # holds the token.
        journal = json.dumps(h.rt.store.journal.read_journal(run_id))
        items = h.rt.clients.dynamodb.scan(TableName=h.rt.settings.names.control_table)
        assert token not in journal and token not in json.dumps(items["Items"])


def test_an_expired_hook_is_gone_and_changes_nothing(h: Harness) -> None:
    api = create_api(h.rt)
    with BackgroundServer(api) as server:
        run_id = h.start("approval", {})
        made = httpx.post(server.url + "/hooks", json={
            "run_id": run_id, "signal": "approve", "ttl": 0.5, "metadata": {"via": "hook"}})
        assert made.status_code == 201, made.text
        until(lambda: time.time() > made.json()["expires_at"])
        late = httpx.post(server.url + made.json()["url"], json={"approved": True})
        assert late.status_code == 410
        assert h.rt.store.signals.signal_ids(run_id, "approve") == set()
        fresh = httpx.post(server.url + "/hooks", json={
            "run_id": run_id, "signal": "approve", "metadata": {"via": "hook"}}).json()
        assert httpx.post(server.url + fresh["url"], json={"ok": 1}).status_code == 202
        assert h.wait(run_id)["output"] == {"decision": {"ok": 1, "via": "hook"}}


def test_parallel_steps_keep_input_order_and_never_exceed_max_parallel(h: Harness) -> None:
    run_id = h.start("fanout", {"n": 12, "max": 3})
    view = h.wait(run_id)
    assert view["status"] == "success", view
    assert view["output"] == {"results": [i * i for i in range(12)]}
    assert 1 <= CONCURRENCY.peak[run_id] <= 3
    assert sorted(LEDGER.bodies(run_id)) == sorted(f"probe-{i}" for i in range(12))


def test_branches_with_several_operations_advance_on_their_own(h: Harness) -> None:
    run_id = h.start("branches", {"sleep": "300ms"})
    view = h.wait(run_id)
    assert view["output"] == {"results": [0, 11, 22], "total": 33}, view
    bodies = LEDGER.bodies(run_id)
    assert sorted(bodies) == sorted(["a-0", "a-1", "a-2", "b-0", "b-1", "b-2", "total"])
    scopes = {s["scope"] for s in view["steps"]}
    assert {"0:0", "0:1", "0:2"} <= scopes


def test_a_failed_branch_raises_after_the_others_settle(h: Harness) -> None:
    run_id = h.start("fanout", {"n": 6, "max": 2, "fail": [1]})
    view = h.wait(run_id)
    assert view["output"] == {"failed": "probe_failed", "ran": 6}


def test_a_child_call_returns_its_result_and_a_spawn_does_not_wait(h: Harness) -> None:
    run_id = h.start("parent", {"failing": True})
    view = h.wait(run_id)
    assert view["status"] == "success", view
    out = view["output"]
    assert out["first"] == {"total": 1} and out["child_failed"] == "child_failed"
    kids = h.rt.children.of(run_id)
    assert len(kids) == 3 and out["spawned"] in kids
    assert h.rt.runs.get(out["spawned"]).status.value == "running"  # spawned: not awaited
    child = h.rt.runs.get(kids[0])
    assert h.rt.children.parent_of(child) == run_id
    api = create_api(h.rt)
    with BackgroundServer(api) as server:
        listed = httpx.get(f"{server.url}/runs/{run_id}/children").json()
        assert [c["run_id"] for c in listed["children"]] == kids
        up = httpx.get(f"{server.url}/runs/{kids[0]}/parent").json()
        assert up["parent"]["run_id"] == run_id
        made = httpx.post(f"{server.url}/runs", json={"workflow": "chain", "input": {},
                                                      "parent_run_id": run_id})
        assert made.status_code == 201
        assert made.json()["run_id"] in h.rt.children.of(run_id)
        orphan = httpx.post(f"{server.url}/runs", json={"workflow": "chain",
                                                        "parent_run_id": "nope"})
        assert orphan.status_code == 404


def test_cancelling_a_parent_cancels_its_running_children(h: Harness) -> None:
    run_id = h.start("parent", {"wait_child": True})
    waiting_for(h, run_id, "call", "second-approval")
    kids = h.rt.children.of(run_id)
    assert len(kids) == 3
    h.rt.runs.kill(run_id, "no longer needed")
    assert h.wait(run_id)["status"] == "killed"
    for kid in kids[1:]:  # the spawned one and the awaited one were running
        assert h.wait(kid)["status"] == "killed"
    assert h.rt.runs.get(kids[0]).status.value == "success"


def test_custom_run_events_sit_beside_the_transitions(h: Harness) -> None:
    api = create_api(h.rt)
    with BackgroundServer(api) as server:
        run_id = h.start("chain", {"steps": 1})
        h.wait(run_id)
        url = f"{server.url}/runs/{run_id}/events"
        made = httpx.post(url, json={"event_type": "step-started", "payload": {"n": 1}})
        assert made.status_code == 201, made.text
        httpx.post(url, json={"event_type": "step-completed", "payload": {"n": 1}})
        listed = httpx.get(url).json()
        assert [e["event_type"] for e in listed["custom"]] == ["step-started",
                                                              "step-completed"]
        assert any(e["type"] == "run.success" for e in listed["events"])
        assert httpx.post(f"{server.url}/runs/nope/events",
                          json={"event_type": "x"}).status_code == 404


@pytest.mark.parametrize("protocols", [(1,), (1, 2)], ids=["v1", "v2"])
def test_a_journal_too_large_for_the_host_goes_by_reference(
        build_harness: Any, tmp_path: Any, protocols: tuple[int, ...]) -> None:
    from functions.sdk import FunctionApp
    from tests.support.durable_fns import chain

    # A host's body limit. Version 1 sends the journal with every step; version 2 only
    # after a suspension (here a sleep halfway).
    small = FunctionApp(secret="durable-secret", max_body=3000, durable_protocols=protocols)
    small.workflow(chain)
    with BackgroundServer(small) as server:
        harness = build_harness(MANIFEST.replace("${APP}", server.url), tmp_path, {})
        harness.start_workers(1, threads=2)
        try:
            run_id = harness.start("chain", {"steps": 60, "nap": "10ms"})
            view = harness.wait(run_id)
            assert view["status"] == "success", view
            assert view["output"] == {"total": sum(range(60))}
            s3 = harness.rt.clients.s3
            sent = s3.list_objects_v2(Bucket=harness.rt.settings.names.blob_bucket,
                                      Prefix=f"calls/{run_id}/")
            assert sent.get("KeyCount", 0) > 0  # the later calls went by reference
        finally:
            harness.close()


def test_a_golden_journal_replays_against_new_code_and_reports_a_mismatch(h: Harness) -> None:
    import asyncio

    from functions.sdk.durable.golden import check
    from tests.support.durable_fns import versioned

    api = create_api(h.rt)
    with BackgroundServer(api) as server:
        run_id = h.start("versioned", {})
        waiting_for(h, run_id, "signal")
        golden = httpx.get(f"{server.url}/runs/{run_id}/journal").json()
        assert [e["name"] for e in golden["journal"]] == ["one", "two"]
        dag = h.start("chain", {"steps": 1})
        assert httpx.get(f"{server.url}/runs/nope/journal").status_code == 404
        assert golden["workflow"] == "versioned" and dag
    same = asyncio.run(check(versioned, golden))
    assert same["ok"] and same["reached"] == "frontier" and same["entries"] == 2
    LEDGER.version["golden"] = 2  # the code as it would be after a rename
    changed = asyncio.run(check(versioned, {**golden, "run_id": "golden"}))
    assert not changed["ok"]
    assert changed["mismatch"]["recorded"]["name"] == "two"
    assert changed["mismatch"]["issued"]["name"] == "two-renamed"
    assert len(LEDGER.bodies("golden")) == 0  # check mode runs nothing


def test_a_signal_resent_with_its_key_later_queues_nothing(h: Harness) -> None:
    run_id = h.start("approval", {"twice": True})
    first = h.rt.signals.send(run_id, "approve", {"n": 1}, key="k")
    stamp = time.time()
    until(lambda: time.time() > stamp + 0.01)  # another millisecond: another sort key
    again = h.rt.signals.send(run_id, "approve", {"n": 1}, key="k")
    assert first["duplicate"] is False and again["duplicate"] is True
    h.rt.signals.send(run_id, "approve", {"n": 2}, key="k2")
    assert h.wait(run_id)["output"] == {"first": {"n": 1}, "second": {"n": 2}}


def test_a_run_past_its_journal_cap_fails_with_advice(
        build_harness: Any, app_url: str, tmp_path: Any) -> None:
    harness = build_harness(MANIFEST, tmp_path, {"APP": app_url}, durable_max_entries=5)
    harness.start_workers(1, threads=2)
    try:
        view = harness.wait(harness.start("chain", {"steps": 20}))
        assert view["status"] == "failed"
        assert view["error"]["code"] in ("journal_too_large", "step_failed")
        driver = harness.rt.store.drivers.get_driver(view["run_id"])
        assert driver is not None and driver.error["code"] == "journal_too_large"
        assert "child runs" in driver.error["message"]
    finally:
        harness.close()


def test_racing_resolutions_of_one_wait_record_one_outcome(h: Harness) -> None:
    """A timer, an event, a signal and a duplicate wake all resolving one wait at once:
    the conditional put keeps the first, and every loser reads that one back."""
    from concurrent.futures import ThreadPoolExecutor

    run_id = h.start("approval", {})
    waiting_for(h, run_id, "signal")
    place = {"scope": "", "pos": 0, "id": "race", "kind": "signal", "name": "approve"}
    outcomes = [{**place, "status": "timeout", "value": None},
                *({**place, "status": "ok", "value": {"n": i}} for i in range(7))]
    with ThreadPoolExecutor(8) as pool:
        stored = list(pool.map(
            lambda e: h.rt.store.journal.put_entry(f"{run_id}-race", e, time.time()),
            outcomes))
    assert len({json.dumps(s, sort_keys=True) for s in stored}) == 1
    assert h.rt.store.journal.read_journal(f"{run_id}-race") == [stored[0]]


def test_a_cancel_racing_a_signal_ends_the_run_killed_once(h: Harness) -> None:
    from concurrent.futures import ThreadPoolExecutor

    run_id = h.start("approval", {})
    waiting_for(h, run_id, "signal")

    def signal() -> Any:
        try:
            return h.rt.signals.send(run_id, "approve", {"late": True})
        except Exception as exc:  # the run may have finished first: refused, not lost
            return exc

    def kill() -> Any:
        try:
            return h.rt.runs.kill(run_id, "racing")
        except Exception as exc:  # the signal may have finished the run first
            return exc

    with ThreadPoolExecutor(2) as pool:
        sent, killed = pool.submit(signal), pool.submit(kill)
    view = h.wait(run_id)
    # Either order is fine; the run ends once, as the winner says.
    assert view["status"] in ("killed", "success"), view
    if view["status"] == "success":
        assert view["output"] == {"decision": {"late": True}}
        assert isinstance(killed.result(), Exception)
    finished = [e["type"] for e in h.rt.runs.history(run_id)
                if e["type"] in ("run.success", "run.failed", "run.killed")]
    assert finished == [f"run.{view['status']}"]
    assert sent.result() is not None


def test_a_branch_counted_twice_starts_the_same_next_branch(h: Harness) -> None:
    store, run_id = h.rt.store, "agg-run"
    store.drivers.open_parallel(run_id, "", 3, total=4, limit=2, done=set(), cursor=2,
                                now=time.time())
    first = store.drivers.branch_done(run_id, "", 3, 1)
    again = store.drivers.branch_done(run_id, "", 3, 1)  # a repeat after a crash
    assert first["start"] == again["start"] == 2
    assert store.drivers.branch_done(run_id, "", 3, 0)["start"] == 3
    assert store.drivers.branch_done(run_id, "", 3, 2)["start"] is None
    last = store.drivers.branch_done(run_id, "", 3, 3)
    assert last["done"] == {0, 1, 2, 3} and last["start"] is None


def test_a_driver_keeps_only_its_last_wait_in_its_history(h: Harness) -> None:
    run_id = h.start("approval", {"twice": True})
    for n in range(2):
        waiting_for(h, run_id, "signal")
        h.rt.signals.send(run_id, "approve", {"n": n})
    h.wait(run_id)
    driver = h.rt.store.drivers.get_driver(run_id)
    assert driver is not None
    waits = [e for e in driver.history if e["type"] == "run.waiting"]
    assert len(waits) <= 1 and len(driver.history) <= 4, driver.history


def test_the_apis_body_of_a_durable_run_is_its_view_at_every_look(h: Harness) -> None:
    """GET /runs/{id} sends the top scope's operations as the journal's follower kept
    them rendered (RunService.view_body): what it sends is the run's view."""
    def body(run_id: str) -> dict[str, Any]:
        return dict(json.loads(h.rt.runs.view_body(run_id)))

    # A run looked at while it goes on (each look renders only what is new), then done.
    chain = h.start("slowchain", {"steps": 12})
    looks = []
    deadline = time.monotonic() + 30
    while (look := body(chain))["status"] in ("queued", "running"):
        assert time.monotonic() < deadline, look
        looks.append(look["steps"])
        time.sleep(0.03)
    final = h.rt.runs.view(chain)
    assert look == final and len(final["steps"]) == 12
    assert len(looks) >= 2  # looked at along the way, not only once done
    for steps in looks:  # each look: what was recorded by then, as recorded
        assert steps == final["steps"][:len(steps)]
    # A run that waits: the wait shows after its operations, as in the view.
    waiting = h.start("approval", {})
    waiting_for(h, waiting, "signal")
    assert body(waiting) == h.rt.runs.view(waiting)
    assert body(waiting)["steps"][-1]["status"] == "waiting"
    h.rt.signals.send(waiting, "approve", {"ok": 1})
    h.wait(waiting)
    assert body(waiting) == h.rt.runs.view(waiting)
    # Parallel branches (entries outside the top scope), and the run alone.
    parallel = h.start("branches", {"sleep": "50ms"})
    h.wait(parallel)
    assert body(parallel) == h.rt.runs.view(parallel)
    assert any(s["scope"] for s in body(parallel)["steps"])
    assert json.loads(h.rt.runs.view_body(parallel, steps=False)) == h.rt.runs.view(
        parallel, steps=False)
