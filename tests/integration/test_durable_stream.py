"""Version 2 of the durable protocol over real HTTP: the SDK streams each checkpoint as
its step ends, answers in the newest version both sides speak, and stops running the
workflow once the orchestrator hangs up."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from functions.durable import Context, step, workflow
from functions.sdk import FunctionApp
from functions.sdk.protocol import NDJSON, PROTOCOL_HEADER
from functions.sdk.serving import BackgroundServer

GATE = threading.Event()
RAN: list[str] = []


@workflow("gated")
async def gated(ctx: Context, payload: Any) -> str:
    import asyncio

    await step("one", lambda: RAN.append("one"))

    async def two() -> None:
        # Runs only once the test has read step one's checkpoint: had the answer been
        # sent whole at the end, this would never happen.
        try:
            while not GATE.is_set():
                await asyncio.sleep(0.01)
        except asyncio.CancelledError:
            RAN.append("two cancelled")
            raise
        RAN.append("two")

    await step("two", two)
    await step("three", lambda: RAN.append("three"))
    return "done"


@workflow("stubborn")
async def stubborn(ctx: Context, payload: Any) -> str:
    import asyncio

    async def one() -> str:
        RAN.append("one")
        try:
            while not GATE.is_set():
                await asyncio.sleep(0.01)
        except asyncio.CancelledError:
            # A body that swallows its cancellation: the workflow goes on past it.
            RAN.append("one swallowed")
            return "late"
        return "done"

    await step("one", one)
    await step("two", lambda: RAN.append("two"))
    return "done"


def body(protocol: int | None) -> dict[str, Any]:
    doc: dict[str, Any] = {"run": {"run_id": "r1", "workflow": "gated", "started_at": 1.0,
                                   "now": 2.0}, "input": None}
    if protocol is not None:
        doc["protocol"] = protocol
    return doc


@pytest.fixture
def served() -> Iterator[tuple[str, str]]:
    new, old = FunctionApp(None), FunctionApp(None, durable_protocols=(1,))
    new.workflow(gated, stubborn)
    old.workflow(gated)
    GATE.clear()
    RAN.clear()
    with BackgroundServer(new) as a, BackgroundServer(old) as b:
        yield a.url, b.url


def until(check: Any, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (got := check()):
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)
    return got


def test_checkpoints_arrive_while_the_call_goes_on_and_the_stream_ends_with_its_end(
        served: tuple[str, str]) -> None:
    new, _ = served
    lines: list[dict[str, Any]] = []
    with httpx.stream("POST", f"{new}/durable/gated", json=body(2), timeout=10,
                      headers={"Accept": NDJSON}) as resp:
        assert resp.headers["content-type"].startswith(NDJSON)
        assert resp.headers[PROTOCOL_HEADER] == "2"
        for line in resp.iter_lines():
            lines.append(json.loads(line))
            if lines[-1].get("entry", {}).get("name") == "one":
                GATE.set()  # step two may run now: its checkpoint is still to come
    assert [op["op"] for op in lines] == ["record", "record", "record", "complete", "end"]
    assert RAN == ["one", "two", "three"]


def test_the_answer_is_in_the_newest_version_both_sides_speak(
        served: tuple[str, str]) -> None:
    new, old = served
    GATE.set()
    for url, asked, got in ((new, None, "1"), (new, 1, "1"), (old, 2, "1")):
        resp = httpx.post(f"{url}/durable/gated", json=body(asked), timeout=10)
        assert resp.headers[PROTOCOL_HEADER] == got
        assert resp.headers["content-type"].startswith("application/json")
        ops = resp.json()["ops"]
        assert [op["op"] for op in ops] == ["record", "next"]  # one step body per call
    spec = httpx.get(f"{new}/openapi.json").json()
    assert spec["paths"]["/durable/gated"]["post"]["x-durable-workflow"]["protocols"] == [1, 2]
    spec = httpx.get(f"{old}/openapi.json").json()
    assert spec["paths"]["/durable/gated"]["post"]["x-durable-workflow"]["protocols"] == [1]


def test_a_call_the_orchestrator_hangs_up_on_stops_at_once(served: tuple[str, str]) -> None:
    new, _ = served
    with httpx.stream("POST", f"{new}/durable/gated", json=body(2), timeout=10) as resp:
        for line in resp.iter_lines():
            assert json.loads(line)["entry"]["name"] == "one"
            break  # hang up after the first checkpoint, while step two runs
    until(lambda: "two cancelled" in RAN)  # the running step is cancelled
    GATE.set()
    # Nothing after it starts: watch for the time two more steps would take.
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        assert RAN == ["one", "two cancelled"]
        time.sleep(0.02)


def test_no_step_body_starts_once_the_orchestrator_has_hung_up(
        served: tuple[str, str]) -> None:
    # Step one swallows the cancel the hang-up sends it, so the workflow goes on: step
    # two is the next operation, and the call, finding its caller gone, never starts it.
    new, _ = served
    doc = {**body(2), "run": {**body(2)["run"], "workflow": "stubborn"}}
    with httpx.stream("POST", f"{new}/durable/stubborn", json=doc, timeout=10) as resp:
        assert resp.status_code == 200
        until(lambda: "one" in RAN)
    until(lambda: "one swallowed" in RAN)
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        assert RAN == ["one", "one swallowed"]
        time.sleep(0.02)


def test_an_sdk_refuses_to_serve_a_protocol_it_does_not_know() -> None:
    with pytest.raises(ValueError, match="durable_protocols"):
        FunctionApp(None, durable_protocols=(3,))


def test_a_host_that_hands_the_request_over_again_still_gets_its_answer() -> None:
    # A wrapper in front of the app that replays the body on every receive (as the chaos
    # harness's function server does) never says the client left: the stream must not
    # spin on it (the event loop would stop), and the answer comes whole.
    import asyncio

    app = FunctionApp(None)
    app.workflow(gated)
    GATE.set()
    RAN.clear()
    raw = json.dumps(body(2)).encode()
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": raw, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/durable/gated", "raw_path":
             b"/durable/gated", "query_string": b"", "root_path": "", "scheme": "http",
             "server": ("127.0.0.1", 80), "client": ("127.0.0.1", 1), "http_version": "1.1",
             "headers": [(b"content-type", b"application/json"), (b"accept", NDJSON.encode())]}

    async def call() -> None:
        await asyncio.wait_for(app(scope, receive, send), timeout=10)

    asyncio.run(call())
    out = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    ops = [json.loads(line)["op"] for line in out.splitlines()]
    assert ops == ["record", "record", "record", "complete", "end"]
    assert RAN == ["one", "two", "three"]
