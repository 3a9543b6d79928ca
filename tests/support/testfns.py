"""Step functions with controllable behaviour for the integration and fault tests:
flaky, slow, failing, large. A real Starlette app served by a real uvicorn; it records
every call (headers included) so tests can assert what the functions actually saw."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route


@dataclass
class Seen:
    route: str
    key: str
    attempt: int
    body: dict[str, Any]
    headers: dict[str, str]
    at: float = field(default_factory=time.time)


@dataclass
class Recorder:
    calls: list[Seen] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    per_key: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    # /hold: (start, end) of each call per `input.tenant`, to check mutual exclusion.
    held: dict[str, list[tuple[float, float, str]]] = field(
        default_factory=lambda: defaultdict(list)
    )

    # /item: calls in flight per run now, and the most at once.
    flying: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    peak: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    # /latch: one per run, opened by the test (`latch(run_id).set()`).
    latches: dict[str, threading.Event] = field(
        default_factory=lambda: defaultdict(threading.Event)
    )

    def latch(self, run_id: str) -> threading.Event:
        with self.lock:
            return self.latches[run_id]

    def add(self, seen: Seen) -> int:
        with self.lock:
            self.calls.append(seen)
            self.per_key[seen.route + seen.key] += 1
            return self.per_key[seen.route + seen.key]

    def for_step(self, run_id: str, step: str) -> list[Seen]:
        with self.lock:
            return [
                c
                for c in self.calls
                if c.body.get("run", {}).get("run_id") == run_id and c.body["run"]["step"] == step
            ]


def create_app(rec: Recorder) -> Starlette:
    async def seen(request: Request) -> tuple[dict[str, Any], int]:
        body = json.loads(await request.body())
        n = rec.add(
            Seen(
                request.url.path,
                request.headers.get("idempotency-key", ""),
                int(request.headers.get("x-orchestrator-attempt", "0")),
                body,
                dict(request.headers),
            )
        )
        return body, n

    async def echo(request: Request) -> Response:
        body, _ = await seen(request)
        return JSONResponse(
            {
                "step": body["run"]["step"],
                "input": body.get("input"),
                "steps": body.get("steps"),
                "payload": {k: v for k, v in body.items() if k not in ("input", "steps", "run")},
            }
        )

    async def flaky(request: Request) -> Response:
        # Fails `fail` times (payload) with 503, then succeeds; counted per idempotency key.
        body, n = await seen(request)
        if n <= int(body.get("fail", 2)):
            headers = {"Retry-After": str(body["retry_after"])} if "retry_after" in body else {}
            return JSONResponse({"error": "upstream 503"}, status_code=503, headers=headers)
        return JSONResponse({"ok": True, "calls": n})

    async def status(request: Request) -> Response:
        body, _ = await seen(request)
        return JSONResponse({"error": body.get("reason", "nope")}, status_code=int(body["code"]))

    async def check(request: Request) -> Response:
        # Fails for good (400) unless the run's input has `ok: true`: a rerun with an
        # edited input succeeds.
        body, _ = await seen(request)
        if (body.get("input") or {}).get("ok") is True:
            return JSONResponse({"checked": True})
        return JSONResponse({"error": "input.ok must be true"}, status_code=400)

    async def slow(request: Request) -> Response:
        body, _ = await seen(request)
        await asyncio.sleep(float(body.get("seconds", 1.0)))
        return JSONResponse({"slept": body.get("seconds", 1.0)})

    async def latch(request: Request) -> Response:
        # Holds until the test opens the run's latch, at most `seconds`: a test that
        # looks at a run while its step runs does not race a sleep. `name`: the run's
        # latch of that name (`latch(f"{run_id}:{name}")`); `status`: answered then, as
        # an error (the step fails when the test says so).
        body, _ = await seen(request)
        key = body["run"]["run_id"] + (f":{body['name']}" if "name" in body else "")
        held = await asyncio.to_thread(rec.latch(key).wait, float(body.get("seconds", 30.0)))
        if "status" in body:
            return JSONResponse({"error": "failed when the test said so"},
                                status_code=int(body["status"]))
        return JSONResponse({"opened": held})

    async def trickle(request: Request) -> Response:
        # Answers at once, then sends its body a byte every `every` seconds: each read
        # is quick, the whole answer is not.
        body, _ = await seen(request)
        every, count = float(body.get("every", 0.2)), int(body.get("bytes", 20))

        async def drip() -> Any:
            yield b"["
            for _ in range(count):
                await asyncio.sleep(every)
                yield b" "
            yield b"]"

        return StreamingResponse(drip(), media_type="application/json")

    async def gate(request: Request) -> Response:
        # Succeeds only when the run's input says {"ok": true}: a permanent 422 otherwise.
        body, _ = await seen(request)
        if (body.get("input") or {}).get("ok") is True:
            return JSONResponse({"passed": True})
        return JSONResponse({"error": "input.ok is not true"}, status_code=422)

    async def hold(request: Request) -> Response:
        # Sleeps `seconds` (with `latch: true`, holds until the run's latch is opened,
        # at most 30 s), recording when it held `input.tenant` (one run at a time?).
        body, _ = await seen(request)
        start = time.time()
        if body.get("latch"):
            await asyncio.to_thread(rec.latch(body["run"]["run_id"]).wait, 30.0)
        else:
            await asyncio.sleep(float(body.get("seconds", 0.5)))
        tenant = str((body.get("input") or {}).get("tenant", ""))
        with rec.lock:
            rec.held[tenant].append((start, time.time(), body["run"]["run_id"]))
        return JSONResponse({"held": tenant})

    async def item(request: Request) -> Response:
        # A fan_out item: counts the calls of its run in flight; `{"fail": true}` items
        # answer 422 (permanent), `{"flaky": true}` ones 503 on their first attempt.
        body, n = await seen(request)
        run_id = body["run"]["run_id"]
        with rec.lock:
            rec.flying[run_id] += 1
            rec.peak[run_id] = max(rec.peak[run_id], rec.flying[run_id])
        try:
            await asyncio.sleep(float(body.get("seconds", 0.1)))
        finally:
            with rec.lock:
                rec.flying[run_id] -= 1
        thing = body.get("item")
        if isinstance(thing, dict) and thing.get("fail"):
            return JSONResponse({"error": f"item {body.get('index')} is bad"}, status_code=422)
        if isinstance(thing, dict) and thing.get("flaky") and n == 1:
            return JSONResponse({"error": "try again"}, status_code=503)
        return JSONResponse({"item": thing, "index": body.get("index"), "calls": n})

    async def rows(request: Request) -> Response:
        # forEach rows for a schedule fire.
        await seen(request)
        return JSONResponse([{"id": "r1", "plan": "pro"}, {"id": "r2", "plan": "team"}])

    async def big(request: Request) -> Response:
        body, _ = await seen(request)
        n = int(body.get("bytes", 100_000))
        return JSONResponse({"blob": "x" * n, "size": n})

    async def measure(request: Request) -> Response:
        # Reports the size of what it received from its dependencies.
        body, _ = await seen(request)
        steps = body.get("steps") or {}
        return JSONResponse(
            {name: len(json.dumps(v)) for name, v in steps.items()}
            | {
                "blob_sizes": {
                    n: len(v.get("blob", "")) for n, v in steps.items() if isinstance(v, dict)
                }
            }
        )

    return Starlette(
        routes=[
            Route("/echo", echo, methods=["POST"]),
            Route("/item", item, methods=["POST"]),
            Route("/flaky", flaky, methods=["POST"]),
            Route("/status", status, methods=["POST"]),
            Route("/check", check, methods=["POST"]),
            Route("/slow", slow, methods=["POST"]),
            Route("/trickle", trickle, methods=["POST"]),
            Route("/big", big, methods=["POST"]),
            Route("/gate", gate, methods=["POST"]),
            Route("/hold", hold, methods=["POST"]),
            Route("/latch", latch, methods=["POST"]),
            Route("/rows", rows, methods=["POST"]),
            Route("/measure", measure, methods=["POST"]),
        ]
    )
