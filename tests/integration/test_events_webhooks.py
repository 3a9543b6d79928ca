"""Events start the workflows whose `on:` matches (once per event id); signed webhooks
start their workflow (once per delivery id) and refuse anything unsigned, stale,
tampered or malformed with 401, never 500."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from functions.sdk.serving import BackgroundServer
from orchestrator.api.app import create_app
from orchestrator.webhook_signing import sign
from tests.support.harness import Harness

MANIFEST = """
backends:
  fn: { url: "${FN}" }
workflows:
  big-order:
    on: { event: order.paid, if: "event.data.total > 100 and event.data.currency == 'EUR'" }
    steps:
      one: { backend: fn, route: /echo }
  any-order:
    on:
      - event: order.paid
      - event: order.refunded
    steps:
      one: { backend: fn, route: /echo }
  build:
    steps:
      one: { backend: fn, route: /echo }
webhooks:
  github:
    workflow: build
    verify: { scheme: github, secrets: ["new-secret", "old-secret"] }
    headers: [X-GitHub-Event]
    input: { ref: body.ref, event: "headers['x-github-event']" }
  billing:
    workflow: build
    verify: { scheme: standard, secrets: ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"], tolerance: 5m }
  payments:
    workflow: build
    verify: { scheme: stripe, secrets: ["sk-test"] }
  local:
    workflow: build
    verify: { scheme: none }
"""


@pytest.fixture
def api(harness_factory: Any) -> Iterator[tuple[Harness, httpx.Client]]:
    h = harness_factory(MANIFEST)
    h.start_workers()
    with BackgroundServer(create_app(h.rt)) as server, httpx.Client(
        base_url=server.url, timeout=30
    ) as client:
        yield h, client


def runs_of(c: httpx.Client, workflow: str) -> list[str]:
    return [r["run_id"] for r in c.get("/runs", params={"workflow": workflow}).json()["runs"]]


# ---- events ----------------------------------------------------------------------------


def test_event_starts_matching_workflows_once_per_event_id(
    api: tuple[Harness, httpx.Client],
) -> None:
    h, c = api
    event = {"name": "order.paid", "key": "cust-9", "id": "evt-1",
             "data": {"total": 150, "currency": "EUR"}}
    first = c.post("/events", json=event)
    assert first.status_code == 201, first.text
    body = first.json()
    assert body["id"] == "evt-1" and body["duplicate"] is False
    started = {r["workflow"]: r["run_id"] for r in body["runs"]}
    assert set(started) == {"big-order", "any-order"}
    again = c.post("/events", json=event)
    assert again.status_code == 200 and again.json()["duplicate"] is True
    assert {r["workflow"]: r["run_id"] for r in again.json()["runs"]} == started
    assert all(r["created"] is False for r in again.json()["runs"])
    view = h.wait(started["big-order"])
    assert view["status"] == "success"
    assert view["input"]["data"] == {"total": 150, "currency": "EUR"}
    assert view["input"]["key"] == "cust-9" and view["input"]["name"] == "order.paid"
    # The trigger carries the event's subject: a durable run's event waits default to it.
    assert view["trigger"] == {"source": "event", "event": "order.paid", "id": "evt-1",
                               "key": "cust-9"}
    # The filter: a small order, or one in another currency, starts only any-order.
    for i, data in enumerate(({"total": 50, "currency": "EUR"}, {"total": 500})):
        small = c.post("/events", json={"name": "order.paid", "data": data,
                                         "id": f"evt-s{i}"}).json()
        assert [r["workflow"] for r in small["runs"]] == ["any-order"]
    refund = c.post("/events", json={"name": "order.refunded", "data": {}}).json()
    assert [r["workflow"] for r in refund["runs"]] == ["any-order"]
    assert len(refund["id"]) >= 16  # made up when not given
    nobody = c.post("/events", json={"name": "nobody.listens"}).json()
    assert nobody["runs"] == []
    assert len(runs_of(c, "big-order")) == 1 and len(runs_of(c, "any-order")) == 4
    for r in runs_of(c, "any-order"):
        h.wait(r)


def test_events_are_stored_with_a_retention(api: tuple[Harness, httpx.Client]) -> None:
    h, c = api
    for i in range(3):
        c.post("/events", json={"name": "thing.seen", "id": f"t{i}", "data": {"i": i}})
    listed = c.get("/events", params={"name": "thing.seen"}).json()["events"]
    assert [e["id"] for e in listed] == ["t2", "t1", "t0"]  # newest first
    items = h.rt.clients.dynamodb.query(
        TableName=h.rt.settings.names.control_table,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": "event#thing.seen"}},
    )["Items"]
    ttl = [float(i["expires_at"]["N"]) - time.time() for i in items]
    retention = h.rt.settings.event_retention
    assert len(ttl) == 3 and all(retention - 60 < t <= retention for t in ttl)


def test_bad_events_get_4xx(api: tuple[Harness, httpx.Client]) -> None:
    _, c = api
    for body, status in (
        ({"name": "has space"}, 400),
        ({"name": ""}, 422),
        ({"data": {}}, 422),
        ({"name": "ok", "extra": 1}, 422),
        ({"name": "ok", "id": "a b"}, 400),
        ({"name": "ok", "data": "x" * 300_000}, 400),
    ):
        resp = c.post("/events", json=body)
        assert resp.status_code == status, (body, resp.text)
        assert resp.json()["error"]["message"]
    assert c.get("/events").status_code == 400


# ---- webhooks --------------------------------------------------------------------------


def post_hook(c: httpx.Client, name: str, body: bytes, headers: dict[str, str]) -> httpx.Response:
    return c.post(f"/webhooks/{name}", content=body,
                  headers={"Content-Type": "application/json", **headers})


def test_github_delivery_starts_one_run_and_replays_return_it(
    api: tuple[Harness, httpx.Client],
) -> None:
    h, c = api
    body = json.dumps({"ref": "refs/heads/main", "after": "abc"}).encode()
    headers = {**sign("github", "new-secret", body, now=time.time()),
               "X-GitHub-Event": "push"}
    first = post_hook(c, "github", body, headers)
    assert first.status_code == 202, first.text
    run_id = first.json()["run_id"]
    view = h.wait(run_id)
    assert view["input"] == {"ref": "refs/heads/main", "event": "push"}
    assert view["trigger"]["source"] == "webhook"
    # A captured delivery replayed (GitHub signatures carry no timestamp): one run.
    replay = post_hook(c, "github", body, headers)
    assert replay.status_code == 200 and replay.json() == {
        "run_id": run_id, "workflow": "build", "delivery_id": headers["X-GitHub-Delivery"],
        "created": False, "duplicate": True, "debounced": False, "outcome": "duplicate"}
    assert runs_of(c, "build") == [run_id]
    # The delivery id is kept for at least 24 h.
    items = h.rt.clients.dynamodb.scan(TableName=h.rt.settings.names.control_table)["Items"]
    kept = [float(i["expires_at"]["N"]) - time.time() for i in items
            if i["pk"]["S"].startswith("delivery#github#")]
    assert kept and min(kept) >= 24 * 3600
    # Rotation: the old secret still verifies.
    rotated = post_hook(c, "github", body,
                        {**sign("github", "old-secret", body, now=time.time()),
                         "X-GitHub-Event": "push"})
    assert rotated.status_code == 202


@pytest.mark.parametrize("case", [
    "tampered", "wrong-secret", "no-signature", "bad-prefix", "not-hex", "no-delivery",
    "empty-signature",
])
def test_github_refusals_are_401(api: tuple[Harness, httpx.Client], case: str) -> None:
    _, c = api
    body = b'{"ref": "refs/heads/main"}'
    headers = sign("github", "new-secret", body, now=time.time())
    if case == "tampered":
        body = b'{"ref": "refs/heads/evil"}'
    elif case == "wrong-secret":
        headers = sign("github", "guess", body, now=time.time())
    elif case == "no-signature":
        del headers["X-Hub-Signature-256"]
    elif case == "bad-prefix":
        headers["X-Hub-Signature-256"] = "sha1=" + headers["X-Hub-Signature-256"][7:]
    elif case == "not-hex":
        headers["X-Hub-Signature-256"] = "sha256=zz" + "0" * 62
    elif case == "no-delivery":
        del headers["X-GitHub-Delivery"]
    elif case == "empty-signature":
        headers["X-Hub-Signature-256"] = ""
    resp = post_hook(c, "github", body, headers)
    assert resp.status_code == 401, resp.text
    err = resp.json()["error"]
    assert err["code"] in ("missing_signature", "malformed_signature", "bad_signature",
                           "missing_delivery_id")
    assert "new-secret" not in resp.text
    assert runs_of(c, "build") == []


def test_standard_webhooks_window_and_replay(api: tuple[Harness, httpx.Client]) -> None:
    h, c = api
    body = b'{"type": "invoice.paid", "amount": 10}'
    secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    now = time.time()
    for skew, code in ((-400, "stale_timestamp"), (400, "future_timestamp")):
        resp = post_hook(c, "billing", body, sign("standard", secret, body, now=now + skew))
        assert resp.status_code == 401 and resp.json()["error"]["code"] == code
    headers = sign("standard", secret, body, now=now - 30)
    first = post_hook(c, "billing", body, headers)
    assert first.status_code == 202, first.text
    assert h.wait(first.json()["run_id"])["input"]["body"] == {"type": "invoice.paid",
                                                              "amount": 10}
    replay = post_hook(c, "billing", body, headers)  # captured and replayed in the window
    assert replay.status_code == 200 and replay.json()["run_id"] == first.json()["run_id"]
    malformed = {**headers, "webhook-timestamp": "yesterday"}
    assert post_hook(c, "billing", body, malformed).status_code == 401
    assert runs_of(c, "build") == [first.json()["run_id"]]


def test_stripe_and_unsigned_and_unknown(api: tuple[Harness, httpx.Client]) -> None:
    h, c = api
    body = b'{"id": "evt_123", "type": "charge.succeeded"}'
    headers = sign("stripe", "sk-test", body, now=time.time())
    first = post_hook(c, "payments", body, headers)
    assert first.status_code == 202 and first.json()["delivery_id"] == "evt_123"
    # Stripe signs each retry anew; the event id still makes it the same run.
    retry = post_hook(c, "payments", body, sign("stripe", "sk-test", body,
                                                 now=time.time() + 1))
    assert retry.json()["run_id"] == first.json()["run_id"] and retry.json()["duplicate"]
    unsigned = post_hook(c, "local", b'{"x": 1}', {})
    assert unsigned.status_code == 202
    assert post_hook(c, "nope", b"{}", {}).status_code == 404
    huge = post_hook(c, "local", b'{"x": "' + b"a" * (1024 * 1024) + b'"}', {})
    assert huge.status_code == 413
    garbage = post_hook(c, "local", b'{"x": ', {})
    assert garbage.status_code == 400
    for r in runs_of(c, "build"):
        h.wait(r)


def test_a_duplicate_event_is_answered_from_the_first(harness_factory: Any) -> None:
    now = [1_800_000_000.0]
    h = harness_factory(MANIFEST)
    from orchestrator.runtime import Runtime

    rt = Runtime.build(h.rt.settings, h.rt.manifest, clients=h.rt.clients,
                       clock=lambda: now[0])
    big = {"total": 500, "currency": "EUR"}
    first = rt.events.emit("order.paid", big, event_id="dup-1")
    assert {r["workflow"] for r in first["runs"]} == {"big-order", "any-order"}
    # The same id with other data: the first delivery's runs, nothing re-evaluated.
    again = rt.events.emit("order.paid", {"total": 1}, event_id="dup-1")
    assert again["duplicate"] and again["runs"] == [
        {**r, "created": False, "duplicate": True, "outcome": "duplicate"}
        for r in first["runs"]]
    assert [e["data"] for e in rt.events.recent("order.paid")] == [big]
    # Days later the runs have expired (or been deleted): still a duplicate, no new run.
    for r in first["runs"]:
        rt.clients.dynamodb.delete_item(TableName=rt.settings.names.runs_table,
                                        Key={"run_id": {"S": r["run_id"]}})
    now[0] += 3 * 24 * 3600
    late = rt.events.emit("order.paid", big, event_id="dup-1")
    assert late["duplicate"] and all(r["created"] is False for r in late["runs"])
    assert all(rt.store.runs.get_run(r["run_id"], now[0]) is None for r in late["runs"])
