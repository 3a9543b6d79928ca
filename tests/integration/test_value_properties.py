"""The one rule of values and names, as properties over every route that takes one
(issue 22 §6), against the live API on real uvicorn over the shared emulator.

For each value a route takes (a run's input, an event's data, a custom run event's
payload, a signal's payload, a hook's metadata, a hook's payload merged with its
metadata, a webhook delivery's input), over sizes drawn around the 256 KiB cap (and past
the 1 MiB body limit) and characters of one to four UTF-8 bytes:

- a value up to the cap is accepted and read back intact;
- one past it is refused with a 4xx that names the cap (400 `value_too_large`; 413 for a
  body past 1 MiB), and nothing is stored or used up: a refused hook delivers its next
  request, a refused webhook delivery id is not taken;
- no size is ever a 5xx.

For names (signals, hooks' signals, events) drawn from Unicode letters, digits, marks,
reserved characters, and lengths past the limit: a name is accepted by the API and by
the Python client exactly when its NFC form follows the rule, as an oracle written here
from `str.isalnum` states it; an accepted one is stored under its NFC form; a refused
one is a 4xx (400 `invalid_name`, or a 404 where the name cannot be a path segment).

Boundary sizes are always tried (`@example`); hypothesis adds a few more, derandomized so
the same requests run everywhere. `max_examples` stays small: the default suite's budget."""

from __future__ import annotations

import json
import time
import unicodedata
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from functions.sdk.serving import BackgroundServer
from orchestrator.api.app import create_app as create_api
from orchestrator.client import ApiError, Client
from orchestrator.webhook_signing import sign
from tests.support.harness import Harness
from tests.support.names import NAMES, follows_rule

CAP = 256 * 1024
BODY_LIMIT = 1024 * 1024
# Around the cap, tiny, and past it up to and beyond the body limit.
SIZES = [2, 10, 11, CAP - 1, CAP, CAP + 1, 2 * CAP, BODY_LIMIT - 200, BODY_LIMIT + 10]
# One to four UTF-8 bytes a character: the cap counts bytes, not characters.
CHARS = ["x", "é", "€", "😀"]

PROPS = settings(
    max_examples=14,
    deadline=None,
    derandomize=True,  # the same values on every machine and every run
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                           HealthCheck.data_too_large],
)

MANIFEST = """
backends:
  app: { url: "${APP}", secret: durable-secret }
workflows:
  named: { backend: app }
  listener: { backend: app, workflow: named, on: { event: big.event } }
webhooks:
  hooked:
    workflow: named
    verify: { scheme: github, secrets: ["hook-secret"] }
"""


@dataclass
class Live:
    h: Harness
    url: str
    http: httpx.Client
    client: Client
    run_id: str  # a durable run that takes signals (no worker: it stays running)


@pytest.fixture
def live(build_harness: Any, app_url: str, tmp_path: Any) -> Iterator[Live]:
    # No workers: what is sent is stored and stays where a test can read it.
    h = build_harness(MANIFEST, tmp_path, {"APP": app_url})
    try:
        with BackgroundServer(create_api(h.rt)) as server, \
                httpx.Client(base_url=server.url, timeout=30) as http:
            made = http.post("/runs", json={"workflow": "named", "input": {"name": "approve"}})
            assert made.status_code == 201, made.text
            yield Live(h, server.url, http, Client(server.url), made.json()["run_id"])
    finally:
        h.close()


def bytes_of(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def value_of(n: int, char: str) -> dict[str, Any]:
    """A JSON object of exactly `n` bytes as compact UTF-8 JSON (`{}` below 10)."""
    if n < 10:
        return {}
    body, rest = divmod(n - len('{"pad":""}'), len(char.encode()))
    out = {"pad": char * body + "x" * rest}
    assert bytes_of(out) == n
    return out


def sizes() -> st.SearchStrategy[int]:
    return st.one_of(st.sampled_from(SIZES), st.integers(min_value=10, max_value=BODY_LIMIT))


def judged(resp: httpx.Response, value: Any, *, extra: int = 0) -> bool:
    """Whether the API accepted `value` (sent in a body `extra` bytes larger than it);
    asserts it answered by the rule: under the cap accepted, past it refused naming the
    cap (413 for a body past the limit), never a 5xx."""
    size = bytes_of(value)
    assert resp.status_code < 500, (resp.status_code, resp.text[:300])
    if size <= CAP:
        assert resp.status_code in (200, 201, 202), (size, resp.text[:300])
        return True
    error = resp.json()["error"]
    if size + extra > BODY_LIMIT and resp.status_code == 413:
        assert error["code"] == "body_too_large" and str(BODY_LIMIT) in error["message"]
        return False
    assert resp.status_code == 400, (size, resp.text[:300])
    assert error["code"] == "value_too_large" and str(CAP) in error["message"], error
    return False


def stored_signals(live: Live, name: str) -> dict[str, Any]:
    """Signal id -> payload of every signal queued for the run under `name` (read from
    its rows: nothing takes them, no worker runs)."""
    ddb = live.h.rt.clients.dynamodb
    query: dict[str, Any] = {
        "TableName": live.h.rt.settings.names.steps_table, "ConsistentRead": True,
        "KeyConditionExpression": "run_id = :r AND begins_with(step, :p)",
        "ExpressionAttributeValues": {":r": {"S": live.run_id}, ":p": {"S": f"~s#{name}#"}},
    }
    out: dict[str, Any] = {}
    while True:  # pages of at most 1 MB: a few signals each, at these sizes
        page = ddb.query(**query)
        for item in page["Items"]:
            doc = json.loads(item["doc"]["S"])
            out[doc["id"]] = doc["payload"]
        if "LastEvaluatedKey" not in page:
            return out
        query["ExclusiveStartKey"] = page["LastEvaluatedKey"]


# ---- values --------------------------------------------------------------------------------


@PROPS
@given(n=sizes(), char=st.sampled_from(CHARS))
@example(n=CAP, char="😀").via("the cap")
@example(n=CAP + 1, char="x").via("past the cap")
def test_a_runs_input(live: Live, n: int, char: str) -> None:
    value = value_of(n, char)
    run_id = f"in-{uuid.uuid4().hex[:12]}"
    resp = live.http.post("/runs", json={"workflow": "named", "input": value, "run_id": run_id})
    stored = live.http.get(f"/runs/{run_id}", params={"steps": "false"})
    if judged(resp, value, extra=80):
        assert stored.json()["input"] == value
    else:
        assert stored.status_code == 404


@PROPS
@given(n=sizes(), char=st.sampled_from(CHARS))
@example(n=CAP, char="x").via("the cap, with a listener: the run's input is the event")
@example(n=CAP + 1, char="é").via("past the cap")
def test_an_events_data(live: Live, n: int, char: str) -> None:
    value = value_of(n, char)
    eid = uuid.uuid4().hex
    resp = live.http.post("/events", json={"name": "big.event", "id": eid, "data": value})
    found = [e for e in live.http.get("/events", params={"name": "big.event"}).json()["events"]
             if e["id"] == eid]
    if judged(resp, value, extra=80):
        assert [e["data"] for e in found] == [value]
        (run,) = resp.json()["runs"]
        assert run["created"] is True
        started = live.http.get(f"/runs/{run['run_id']}", params={"steps": "false"}).json()
        assert started["input"]["data"] == value
    else:
        assert found == []


@PROPS
@given(n=sizes(), char=st.sampled_from(CHARS))
@example(n=CAP, char="€").via("the cap")
@example(n=CAP + 1, char="x").via("past the cap")
def test_a_custom_run_events_payload(live: Live, n: int, char: str) -> None:
    value = value_of(n, char)
    before = len(live.http.get(f"/runs/{live.run_id}/events").json()["custom"])
    resp = live.http.post(f"/runs/{live.run_id}/events",
                          json={"event_type": "note", "payload": value})
    custom = live.http.get(f"/runs/{live.run_id}/events").json()["custom"]
    if judged(resp, value, extra=40):
        assert custom[-1]["payload"] == value and len(custom) == before + 1
    else:
        assert len(custom) == before


@PROPS
@given(n=sizes(), char=st.sampled_from(CHARS))
@example(n=2, char="x").via("an empty payload")
@example(n=CAP, char="é").via("the cap")
@example(n=CAP + 1, char="x").via("past the cap")
@example(n=450_000, char="x").via("the 450 KB of the issue")
def test_a_signals_payload(live: Live, n: int, char: str) -> None:
    value = value_of(n, char)
    before = stored_signals(live, "approve")
    resp = live.http.post(f"/runs/{live.run_id}/signals/approve", json=value)
    after = stored_signals(live, "approve")
    if judged(resp, value):
        assert after[resp.json()["id"]] == value
    else:
        assert after == before


@PROPS
@given(n=sizes(), char=st.sampled_from(CHARS))
@example(n=CAP, char="x").via("the cap")
@example(n=CAP + 1, char="😀").via("past the cap")
def test_a_hooks_metadata(live: Live, n: int, char: str) -> None:
    value = value_of(n, char)
    resp = live.http.post("/hooks", json={"run_id": live.run_id, "signal": "approve",
                                          "metadata": value})
    if judged(resp, value, extra=80):
        assert resp.json()["metadata"] == value
        # Usable: an empty request delivers the metadata as the payload.
        sent = live.http.post(resp.json()["url"], json={})
        assert sent.status_code == 202, sent.text
        assert stored_signals(live, "approve")[sent.json()["signal_id"]] == value


@PROPS
@given(meta=st.sampled_from([2, 100_000, CAP - 20]), n=sizes(), char=st.sampled_from(CHARS))
@example(meta=2, n=CAP, char="x").via("the cap, no metadata")
@example(meta=100_000, n=CAP - 100_000 + 10, char="x").via("merged, just past the cap")
@example(meta=2, n=450_000, char="x").via("the 450 KB of the issue")
def test_a_hooks_payload_merged_with_its_metadata(live: Live, meta: int, n: int,
                                                  char: str) -> None:
    metadata = {"m": "y" * (meta - 8)} if meta > 8 else {}
    made = live.http.post("/hooks", json={"run_id": live.run_id, "signal": "approve",
                                          "metadata": metadata})
    assert made.status_code == 201, made.text
    hook = made.json()["url"]
    body = value_of(n, char)
    merged = {**body, **metadata}
    resp = live.http.post(hook, json=body)
    if judged(resp, merged):
        assert resp.json()["duplicate"] is False
        assert stored_signals(live, "approve")[resp.json()["signal_id"]] == merged
        assert live.http.post(hook, json={"other": 1}).status_code == 410
    else:
        # Not used up: the next request is the hook's first execution.
        again = live.http.post(hook, json={"ok": 1})
        assert again.status_code == 202 and again.json()["duplicate"] is False, again.text
        assert stored_signals(live, "approve")[again.json()["signal_id"]] == \
            {"ok": 1, **metadata}


@PROPS
@given(n=sizes(), char=st.sampled_from(CHARS))
@example(n=CAP - 40, char="x").via("under the cap with the envelope")
@example(n=CAP + 1, char="x").via("past the cap")
def test_a_webhook_deliverys_input(live: Live, n: int, char: str) -> None:
    value = value_of(n, char)
    raw = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
    delivery = str(uuid.uuid4())

    def deliver(body: bytes) -> httpx.Response:
        headers = sign("github", "hook-secret", body, now=time.time(), delivery_id=delivery)
        return live.http.post("/webhooks/hooked", content=body,
                              headers={**headers, "content-type": "application/json"})

    resp = deliver(raw)
    # The run's input is {"body": ..., "headers": {}}: 23 bytes around the body.
    document = {"body": value, "headers": {}}
    if not judged(resp, document):
        # The delivery id was not taken: a redelivery with a smaller body starts the run.
        again = deliver(b'{"small":true}')
        assert again.status_code == 202 and again.json()["duplicate"] is False, again.text


# ---- names ---------------------------------------------------------------------------------


def refused_name(resp: httpx.Response, name: str, *, in_path: bool = False) -> None:
    assert resp.status_code < 500, resp.text[:300]
    if in_path and resp.status_code in (404, 405):
        return  # not a path segment at all (`/`, `.`, `..`, empty): no route
    if not name and resp.status_code == 422:
        return  # a body's empty name fails its model (`invalid_body`, named)
    assert resp.status_code == 400, (resp.status_code, resp.text[:300])
    error = resp.json()["error"]
    assert error["code"] == "invalid_name" and "letters or digits" in error["message"], error


@PROPS
@given(name=NAMES)
@example(name="approbation-é").via("the issue's name")
@example(name=unicodedata.normalize("NFD", "approbation-é")).via("decomposed")
@example(name="x" * 128).via("the longest")
@example(name="x" * 129).via("one too long")
@example(name="a#b").via("a sort key's separator")
def test_a_signals_name_by_the_api_and_the_client(live: Live, name: str) -> None:
    nfc = unicodedata.normalize("NFC", name)
    resp = live.http.post(f"/runs/{live.run_id}/signals/{quote(name, safe='')}",
                          json={"n": 1})
    if follows_rule(name):
        assert resp.status_code == 202, resp.text
        assert resp.json()["signal"] == nfc
        assert resp.json()["id"] in stored_signals(live, nfc)
        sent = live.client.send_signal(live.run_id, name, {"n": 2})
        assert sent["signal"] == nfc and sent["id"] in stored_signals(live, nfc)
    else:
        refused_name(resp, name, in_path=True)
        with pytest.raises(ApiError) as refused:
            live.client.send_signal(live.run_id, name, {"n": 2})
        assert refused.value.status is not None and refused.value.status < 500


@PROPS
@given(name=NAMES)
@example(name="承認.済み").via("letters of another script")
@example(name="a/b").via("a slash")
def test_a_hooks_signal_name(live: Live, name: str) -> None:
    resp = live.http.post("/hooks", json={"run_id": live.run_id, "signal": name})
    if follows_rule(name):
        assert resp.status_code == 201, resp.text
        assert resp.json()["signal"] == unicodedata.normalize("NFC", name)
    else:
        refused_name(resp, name)


@PROPS
@given(name=NAMES)
@example(name="commande/expédiée").via("a slash is allowed in events")
@example(name="/leading").via("but not first")
def test_an_events_name(live: Live, name: str) -> None:
    eid = uuid.uuid4().hex
    resp = live.http.post("/events", json={"name": name, "id": eid})
    if follows_rule(name, event=True):
        assert resp.status_code == 201, resp.text
        nfc = unicodedata.normalize("NFC", name)
        assert resp.json()["name"] == nfc
        for asked in (name, nfc):
            listed = live.http.get("/events", params={"name": asked}).json()["events"]
            assert eid in [e["id"] for e in listed]
    else:
        refused_name(resp, name)
