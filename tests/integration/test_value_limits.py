"""Large values and odd names (issue 22 §6), each case as a new user meets it: through the
HTTP API on real uvicorn, over the shared emulator, with the durable workflows of
tests/support/durable_fns.py served by a real FunctionApp.

The rule under test (orchestrator/services/values.py): a value sent is stored intact up
to 256 KiB and refused past it with a 400 `value_too_large` that names the cap, before
anything is stored; a hook is used up only with the signal it sends; a name follows one
rule, checked where the workflow declares its wait and accepted by every sender."""

from __future__ import annotations

import json
import threading
import time
import unicodedata
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from botocore.awsrequest import AWSResponse

from functions.sdk.serving import BackgroundServer
from orchestrator.api.app import create_app as create_api
from tests.support.cli import cli
from tests.support.durable_fns import HOOK_URLS, digest
from tests.support.harness import Harness

CAP = 256 * 1024

MANIFEST = """
backends:
  app: { url: "${APP}", secret: durable-secret }
workflows:
  named: { backend: app }
  bighook: { backend: app }
  bigchild: { backend: app }
  unchecked: { backend: app }
  eventwait: { backend: app }
"""


@pytest.fixture
def live(build_harness: Any, app_url: str, tmp_path: Any) -> Iterator[tuple[Harness, str]]:
    h = build_harness(MANIFEST, tmp_path, {"APP": app_url})
    h.start_workers(1, threads=4)
    h.start_sweeper()
    try:
        with BackgroundServer(create_api(h.rt)) as server:
            yield h, server.url
    finally:
        h.close()


def sized(n: int, char: str = "x") -> dict[str, Any]:
    """A JSON object exactly `n` bytes long as compact UTF-8 JSON (n >= 10)."""
    width = len(char.encode())
    body, rest = divmod(n - len('{"pad":""}'), width)
    return {"pad": char * body + "x" * rest}


def until(check: Callable[[], Any], timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)


def waiting(h: Harness, run_id: str, kind: str = "signal") -> dict[str, Any]:
    def check() -> Any:
        row = h.rt.store.drivers.get_driver(run_id)
        w = None if row is None or row.lease_owner else row.waiting
        return w if w and w["kind"] == kind else None
    got: dict[str, Any] = until(check)
    return got


def start(url: str, workflow: str, input: Any) -> str:
    made = httpx.post(f"{url}/runs", json={"workflow": workflow, "input": input})
    assert made.status_code == 201, made.text
    return str(made.json()["run_id"])


def refused_for_size(resp: httpx.Response) -> None:
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["code"] == "value_too_large", error
    assert str(CAP) in error["message"], error


def test_the_cap_is_256_kib() -> None:
    from orchestrator.services.values import MAX_VALUE_BYTES

    assert MAX_VALUE_BYTES == CAP


# ---- signals -----------------------------------------------------------------------------


def test_a_signal_payload_past_the_cap_is_a_400_and_one_at_the_cap_arrives_intact(
        live: tuple[Harness, str]) -> None:
    h, url = live
    run_id = start(url, "named", {"name": "approve"})
    waiting(h, run_id)
    signals = f"{url}/runs/{run_id}/signals/approve"
    # 450 KB: within the API's 1 MiB body limit, answered 503 store_error before.
    for _ in range(2):
        refused_for_size(httpx.post(signals, json=sized(450_000)))
    refused_for_size(httpx.post(signals, json=sized(CAP + 1)))
    assert h.rt.store.signals.signal_ids(run_id, "approve") == set()
    at_cap = sized(CAP, "é")
    sent = httpx.post(signals, json=at_cap)
    assert sent.status_code == 202, sent.text
    view = h.wait(run_id)
    assert view["status"] == "success", view
    assert view["output"]["digest"] == digest(at_cap)


# ---- hooks -------------------------------------------------------------------------------


def _hook(url: str, run_id: str, metadata: Any = None) -> httpx.Response:
    return httpx.post(f"{url}/hooks", json={"run_id": run_id, "signal": "approve",
                                            "metadata": metadata})


def test_a_hook_refused_for_its_payloads_size_is_not_used_up(
        live: tuple[Harness, str]) -> None:
    h, url = live
    run_id = start(url, "named", {"name": "approve"})
    made = _hook(url, run_id, {"via": "hook"})
    assert made.status_code == 201, made.text
    hook = url + made.json()["url"]
    refused_for_size(httpx.post(hook, json=sized(450_000)))
    assert h.rt.store.signals.signal_ids(run_id, "approve") == set()
    # Not used up: another request is the first execution.
    small = httpx.post(hook, json={"ok": 1})
    assert small.status_code == 202, small.text
    assert small.json()["duplicate"] is False
    view = h.wait(run_id)
    assert view["output"]["digest"] == digest({"ok": 1, "via": "hook"})


def _failing_signal_writes(run_id: str) -> Callable[..., Any]:
    """A handler that makes the store fail the transaction that queues a signal for
    `run_id` (a DynamoDB 500), through the real client's own event hooks: the request
    never reaches the table."""

    def fail(params: dict[str, Any], **_: Any) -> Any:
        # `params`: the serialized request; its body the operation's JSON.
        body = (params.get("body") or b"").decode()
        if run_id in body and "~s#approve#" in body:
            response = AWSResponse("http://injected", 500, {}, None)  # type: ignore[arg-type]
            return response, {"Error": {"Code": "InternalServerError",
                                        "Message": "injected by the test"},
                              "ResponseMetadata": {"HTTPStatusCode": 500}}
        return None

    return fail


def test_a_hook_whose_signal_could_not_be_stored_is_not_used_up(
        live: tuple[Harness, str]) -> None:
    h, url = live
    run_id = start(url, "named", {"name": "approve"})
    made = _hook(url, run_id)
    hook = url + made.json()["url"]
    events = h.rt.clients.dynamodb.meta.events
    fail = _failing_signal_writes(run_id)
    events.register("before-call.dynamodb.TransactWriteItems", fail)
    try:
        failed = httpx.post(hook, json={"first": True})
    finally:
        events.unregister("before-call.dynamodb.TransactWriteItems", fail)
    assert failed.status_code == 503 and failed.json()["error"]["code"] == "store_error"
    # Retried with another payload: not gone, delivered.
    again = httpx.post(hook, json={"second": True})
    assert again.status_code == 202, again.text
    assert h.wait(run_id)["output"]["digest"] == digest({"second": True})
    # ... once: the hook is used now.
    assert httpx.post(hook, json={"third": True}).status_code == 410


def test_a_hook_executed_by_racing_requests_delivers_once(
        live: tuple[Harness, str]) -> None:
    h, url = live
    for same in (True, False):
        run_id = start(url, "named", {"name": "approve"})
        hook = url + _hook(url, run_id).json()["url"]
        bodies = [{"n": 0}] * 6 if same else [{"n": i} for i in range(6)]
        gate = threading.Barrier(len(bodies))

        def execute(body: dict[str, Any], hook: str = hook,
                    gate: threading.Barrier = gate) -> int:
            gate.wait()
            return httpx.post(hook, json=body).status_code

        with ThreadPoolExecutor(len(bodies)) as pool:
            codes = sorted(pool.map(execute, bodies))
        # One delivery; the rest are the same request again (200) or another one (410).
        assert codes == ([200] * 5 + [202] if same else [202] + [410] * 5), (same, codes)
        assert len(h.rt.store.signals.signal_ids(run_id, "approve")) == 1


def test_hook_metadata_up_to_the_cap_is_usable_and_past_it_refused(
        live: tuple[Harness, str]) -> None:
    h, url = live
    run_id = start(url, "named", {"name": "approve"})
    refused_for_size(_hook(url, run_id, sized(CAP + 1)))
    refused_for_size(_hook(url, run_id, sized(300_000)))
    metadata = sized(250_000)
    made = _hook(url, run_id, metadata)
    assert made.status_code == 201, made.text
    assert made.json()["metadata"] == metadata
    hook = url + made.json()["url"]
    # The body merged with the metadata is over the cap: refused, the hook kept.
    refused_for_size(httpx.post(hook, json={"extra": "y" * 20_000}))
    sent = httpx.post(hook, json={"approved": True})
    assert sent.status_code == 202, sent.text
    assert h.wait(run_id)["output"]["digest"] == digest({"approved": True, **metadata})


def test_a_hook_the_workflow_made_with_large_metadata_can_be_executed(
        live: tuple[Harness, str]) -> None:
    h, url = live
    # 250 KB of metadata from ctx.create_hook: every execution answered 503 before.
    run_id = start(url, "bighook", {"metadata_chars": 250_000})
    waiting(h, run_id)
    hook = url + HOOK_URLS[run_id][0]
    sent = httpx.post(hook, json={"approved": True})
    assert sent.status_code == 202, sent.text
    view = h.wait(run_id)
    assert view["status"] == "success", view
    metadata = {"pad": "m" * 250_000}
    assert view["output"] == {"digest": digest({"approved": True, **metadata}),
                              "metadata": digest(metadata)}


def test_a_hook_the_workflow_made_with_metadata_past_the_cap_fails_where_it_is_made(
        live: tuple[Harness, str]) -> None:
    h, url = live
    run_id = start(url, "bighook", {"metadata_chars": CAP})
    view = h.wait(run_id)
    assert view["status"] == "failed", view
    assert view["error"]["code"] == "value_too_large", view["error"]
    assert str(CAP) in view["error"]["message"]


def test_a_child_run_with_an_input_past_the_cap_fails_where_it_is_started(
        live: tuple[Harness, str]) -> None:
    h, url = live
    ok = start(url, "bigchild", {"input_chars": 200_000})
    assert h.wait(ok)["status"] == "success"
    run_id = start(url, "bigchild", {"input_chars": CAP})
    view = h.wait(run_id)
    assert view["status"] == "failed", view
    assert view["error"]["code"] == "value_too_large", view["error"]
    assert h.rt.children.of(run_id) == []


# ---- names -------------------------------------------------------------------------------


def test_a_run_waiting_for_a_unicode_signal_name_is_resumed_by_the_api(
        live: tuple[Harness, str]) -> None:
    h, url = live
    name = "approbation-é"
    run_id = start(url, "named", {"name": name})
    assert waiting(h, run_id)["name"] == name
    view = httpx.get(f"{url}/runs/{run_id}").json()
    assert view["waiting"]["name"] == name
    # The same name decomposed (e + a combining accent) is the same name.
    decomposed = unicodedata.normalize("NFD", name)
    assert decomposed != name
    sent = httpx.post(f"{url}/runs/{run_id}/signals/{quote(decomposed)}", json={"n": 1})
    assert sent.status_code == 202, sent.text
    assert sent.json()["signal"] == name
    assert h.wait(run_id)["output"]["digest"] == digest({"n": 1})


def test_the_cli_sends_a_unicode_signal_name(live: tuple[Harness, str]) -> None:
    h, url = live
    name = "承認.済み"
    run_id = start(url, "named", {"name": name})
    waiting(h, run_id)
    res = cli("signal", run_id, name, "--payload", '{"by": "cli"}', "--url", url)
    assert res.exit_code == 0, res.output
    assert h.wait(run_id)["output"]["digest"] == digest({"by": "cli"})


BAD_NAMES = ["not a name", "a#b", "a/b", "-leading", "x" * 129, "é" * 129]


def test_a_wait_for_a_name_nothing_can_send_fails_at_once_naming_the_rule(
        live: tuple[Harness, str]) -> None:
    h, url = live
    runs = {name: start(url, "named", {"name": name}) for name in BAD_NAMES}
    for name, run_id in runs.items():
        view = h.wait(run_id)
        assert view["status"] == "failed", (name, view)
        error = view["error"]
        assert error["code"] == "invalid_name", (name, error)
        assert "letters or digits" in error["message"], (name, error)
        # The API refuses the same name with the same code (a name with a slash is no
        # path segment: no route).
        sent = httpx.post(f"{url}/runs/{run_id}/signals/{quote(name, safe='')}", json={})
        if "/" in name:
            assert sent.status_code == 404, sent.text
        else:
            assert sent.status_code == 400, sent.text
            assert sent.json()["error"]["code"] == "invalid_name"


def test_event_names_follow_the_same_rule_with_a_slash(live: tuple[Harness, str]) -> None:
    _, url = live
    ok = httpx.post(f"{url}/events", json={"name": "commande/expédiée", "data": {"n": 1}})
    assert ok.status_code == 201, ok.text
    got = httpx.get(f"{url}/events", params={"name": "commande/expédiée"}).json()["events"]
    assert [e["data"] for e in got] == [{"n": 1}]
    bad = httpx.post(f"{url}/events", json={"name": "a#b"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_name"


def test_run_inputs_event_data_and_custom_events_name_the_cap(
        live: tuple[Harness, str]) -> None:
    _, url = live
    refused_for_size(httpx.post(f"{url}/runs", json={"workflow": "named",
                                                     "input": sized(CAP + 1)}))
    refused_for_size(httpx.post(f"{url}/events", json={"name": "e", "data": sized(CAP + 1)}))
    run_id = start(url, "named", {"name": "approve"})
    refused_for_size(httpx.post(f"{url}/runs/{run_id}/events",
                                json={"event_type": "note", "payload": sized(CAP + 1)}))
    # Measured in UTF-8 bytes, as stored: 2 bytes per é.
    refused_for_size(httpx.post(f"{url}/runs/{run_id}/events", json={
        "event_type": "note", "payload": {"pad": "é" * (CAP // 2)}}))
    at_cap = sized(CAP, "é")
    added = httpx.post(f"{url}/runs/{run_id}/events",
                       json={"event_type": "note", "payload": at_cap})
    assert added.status_code == 201, added.text
    custom = httpx.get(f"{url}/runs/{run_id}/events").json()["custom"]
    assert [c["payload"] for c in custom] == [at_cap]
    assert json.dumps(at_cap, ensure_ascii=False, separators=(",", ":")).encode().__len__() == CAP


# ---- what an SDK that checks nothing sends -----------------------------------------------


UNCHECKED = [
    ({"kind": "signal", "name": "a b"}, "invalid_name"),
    ({"kind": "signal", "name": "x" * 129}, "invalid_name"),
    ({"kind": "event", "name": "a#b"}, "invalid_name"),
    ({"kind": "hook", "name": "a/b"}, "invalid_name"),
    ({"kind": "hook", "chars": CAP}, "value_too_large"),
    ({"kind": "call", "chars": CAP}, "value_too_large"),
    ({"kind": "spawn", "chars": CAP}, "value_too_large"),
]


def test_the_orchestrator_refuses_an_unchecked_operation_where_it_is_awaited(
        live: tuple[Harness, str]) -> None:
    h, url = live
    runs = [(start(url, "unchecked", input), input, code) for input, code in UNCHECKED]
    for run_id, input, code in runs:
        view = h.wait(run_id)
        assert view["status"] == "failed", (input, view)
        assert view["error"]["code"] == code, (input, view["error"])
        entry = h.rt.store.journal.read_journal(run_id)[-1]
        assert entry["status"] == "error" and entry["error"]["code"] == code, entry
        assert h.rt.children.of(run_id) == []
