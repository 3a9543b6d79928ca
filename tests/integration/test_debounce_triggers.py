"""Debounce where it meets the other ways a trigger is told apart, over real HTTP: a
repeated Idempotency-Key, a repeated event id and a repeated webhook delivery are each
one trigger (nothing moves, the answer says `duplicate` with the burst's run), while new
deliveries that join a burst say `debounced`, never `duplicate`."""

from __future__ import annotations

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
  quiet:
    on: { event: thing.changed }
    debounce: { key: "${{ input.key }}", period: 60s }
    steps:
      one: { backend: fn, route: /echo }
webhooks:
  hook:
    workflow: quiet
    verify: { scheme: standard, secrets: ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"] }
    input: { key: "body.key", n: "body.n" }
"""
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


@pytest.fixture
def api(harness_factory: Any) -> Iterator[tuple[Harness, httpx.Client]]:
    h = harness_factory(MANIFEST)
    with BackgroundServer(create_app(h.rt)) as server, httpx.Client(
        base_url=server.url, timeout=30
    ) as client:
        yield h, client


def admit_at(c: httpx.Client, run_id: str) -> float:
    return float(c.get(f"/runs/{run_id}", params={"steps": "false"}).json()
                 ["admission"]["admit_at"])


def later(h: Harness, after: float) -> None:
    """Wait until the orchestrator's clock has passed `after` (a repeat's start, if it
    moved it, would then be later)."""
    deadline = time.monotonic() + 5
    while h.rt.clock() <= after + 0.05:
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_a_repeated_idempotency_key_is_one_trigger(api: tuple[Harness, httpx.Client]) -> None:
    h, c = api
    body = {"workflow": "quiet", "input": {"key": "k1", "n": 1}}
    first = c.post("/runs", json=body, headers={"Idempotency-Key": "K"})
    assert first.status_code == 201, first.text
    run_id = first.json()["run_id"]
    assert first.json()["outcome"] == "queued" and first.json()["created"] is True
    due = admit_at(c, run_id)
    later(h, h.rt.clock())
    again = c.post("/runs", json=body, headers={"Idempotency-Key": "K"})
    assert again.status_code == 200, again.text
    assert again.json()["run_id"] == run_id
    assert again.json()["created"] is False and again.json()["duplicate"] is True
    assert again.json()["outcome"] == "duplicate"
    assert admit_at(c, run_id) == due  # its start did not move
    # Another key is another trigger: it joins the burst and moves its start.
    other = c.post("/runs", json={**body, "input": {"key": "k1", "n": 2}},
                   headers={"Idempotency-Key": "K2"})
    assert other.json()["run_id"] == run_id and other.json()["debounced"] is True
    assert other.json()["duplicate"] is False and admit_at(c, run_id) > due


def test_a_repeated_event_id_is_answered_from_the_first_delivery(
        api: tuple[Harness, httpx.Client]) -> None:
    h, c = api
    first = c.post("/events", json={"name": "thing.changed", "id": "X",
                                    "data": {"n": 7}, "key": "a"})
    assert first.status_code == 201, first.text
    [run] = first.json()["runs"]
    due = admit_at(c, run["run_id"])
    later(h, h.rt.clock())
    again = c.post("/events", json={"name": "thing.changed", "id": "X",
                                    "data": {"n": 8}, "key": "a"})
    assert again.status_code == 200 and again.json()["duplicate"] is True
    [same] = again.json()["runs"]
    assert same["run_id"] == run["run_id"] and same["outcome"] == "duplicate"
    assert admit_at(c, run["run_id"]) == due
    view = c.get(f"/runs/{run['run_id']}", params={"steps": "false"}).json()
    assert view["input"]["data"] == {"n": 7}  # the run keeps the first delivery's data


def test_new_webhook_deliveries_that_join_a_burst_say_debounced(
        api: tuple[Harness, httpx.Client]) -> None:
    _, c = api
    answers = []
    for n in range(3):
        body = f'{{"key": "w", "n": {n}}}'.encode()
        headers = sign("standard", SECRET, body, now=time.time(), delivery_id=f"msg_{n}")
        resp = c.post("/webhooks/hook", content=body,
                      headers={**headers, "content-type": "application/json"})
        answers.append(resp)
    assert [a.status_code for a in answers] == [202, 202, 202], [a.text for a in answers]
    docs = [a.json() for a in answers]
    assert len({d["run_id"] for d in docs}) == 1
    assert [d["duplicate"] for d in docs] == [False, False, False]
    assert [d["outcome"] for d in docs] == ["queued", "debounced", "debounced"]
    assert [d["debounced"] for d in docs] == [False, True, True]
    # The same delivery again is a duplicate, and moves nothing.
    run_id = docs[0]["run_id"]
    due = admit_at(c, run_id)
    body = b'{"key": "w", "n": 2}'
    headers = sign("standard", SECRET, body, now=time.time(), delivery_id="msg_2")
    replay = c.post("/webhooks/hook", content=body,
                    headers={**headers, "content-type": "application/json"})
    assert replay.status_code == 200 and replay.json()["duplicate"] is True
    assert replay.json()["run_id"] == run_id and admit_at(c, run_id) == due
