"""Durable workflows for the integration tests, served by a real FunctionApp over real
HTTP. Every step body writes to `LEDGER` (which run, which step, which attempt, which
idempotency key), so tests assert what the functions actually ran."""

from __future__ import annotations

import hashlib
import json
import threading
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from functions.durable import Context, StepFailed, TerminalError, step, workflow
from functions.sdk import FunctionApp


@dataclass
class Ledger:
    lock: threading.Lock = field(default_factory=threading.Lock)
    runs: dict[str, list[tuple[str, int, str]]] = field(
        default_factory=lambda: defaultdict(list))
    # Code versions by run: a test flips this to change what a workflow issues.
    version: dict[str, int] = field(default_factory=dict)

    def add(self, ctx: Context, name: str) -> int:
        with self.lock:
            self.runs[ctx.run_id].append((name, ctx.attempt, ctx.idempotency_key))
            return sum(1 for n, _, _ in self.runs[ctx.run_id] if n == name)

    def bodies(self, run_id: str) -> list[str]:
        with self.lock:
            return [n for n, _, _ in self.runs[run_id]]

    def keys(self, run_id: str, name: str) -> set[str]:
        with self.lock:
            return {k for n, _, k in self.runs[run_id] if n == name}


LEDGER = Ledger()


def _recorded(name: str, value: Any = None) -> Any:
    def body_for(ctx: Context) -> Any:
        async def body() -> Any:
            LEDGER.add(ctx, name)
            return value
        return body
    return body_for


@workflow("chain")
async def chain(ctx: Context, payload: dict[str, Any]) -> dict[str, Any]:
    total = 0
    steps = int(payload.get("steps", 3))
    for i in range(steps):
        if payload.get("nap") and i == steps // 2:
            await ctx.sleep(payload["nap"])  # a suspension: the call after it replays
        total += await step(f"add-{i}", _recorded(f"add-{i}", i)(ctx))
    return {"total": total}


@workflow("sleeper")
async def sleeper(ctx: Context, payload: dict[str, Any]) -> dict[str, Any]:
    await step("before", _recorded("before")(ctx))
    await ctx.sleep(payload.get("sleep", "1s"))
    await step("after", _recorded("after")(ctx))
    return {"slept": True}


@workflow("approval")
async def approval(ctx: Context, payload: dict[str, Any]) -> Any:
    first = await ctx.wait_for_signal("approve", timeout=payload.get("timeout"))
    if payload.get("twice"):
        second = await ctx.wait_for_signal("approve", timeout=payload.get("timeout"))
        return {"first": first, "second": second}
    return {"decision": first}


@workflow("flaky")
async def flaky(ctx: Context, payload: dict[str, Any]) -> Any:
    fails = int(payload.get("fails", 2))

    async def body() -> str:
        n = LEDGER.add(ctx, "flaky")
        if n <= fails:
            raise RuntimeError(f"failure {n}")
        return f"ok after {n}"

    return await step("flaky", body, retries=3, delay="50ms")


@workflow("saga")
async def saga(ctx: Context, payload: dict[str, Any]) -> Any:
    await step("charge", _recorded("charge", {"charged": 10})(ctx))
    try:
        async def ship() -> None:
            LEDGER.add(ctx, "ship")
            raise TerminalError("address unknown", code="bad_address")
        await step("ship", ship)
    except StepFailed as exc:
        await step("refund", _recorded("refund", {"refunded": 10})(ctx))
        if payload.get("reraise"):
            raise
        return {"refunded": True, "why": exc.code}
    return {"refunded": False}


@workflow("versioned")
async def versioned(ctx: Context, payload: dict[str, Any]) -> Any:
    await step("one", _recorded("one")(ctx))
    name = "two" if LEDGER.version.get(ctx.run_id, 1) == 1 else "two-renamed"
    await step(name, _recorded(name)(ctx))
    await ctx.wait_for_signal("finish")
    return {"done": name}




@workflow("slowchain")
async def slowchain(ctx: Context, payload: dict[str, Any]) -> dict[str, Any]:
    import asyncio

    for i in range(int(payload.get("steps", 100))):
        async def body(i: int = i) -> int:
            LEDGER.add(ctx, f"slow-{i}")
            await asyncio.sleep(0.05)
            return i
        await step(f"slow-{i}", body)
    return {"done": True}


# Side effects a test plugs into a step body (e.g. emitting an event through the engine).
EFFECTS: dict[str, Any] = {}


@workflow("trial")
async def trial(ctx: Context, payload: dict[str, Any]) -> dict[str, Any]:
    data = payload.get("data") or {}
    await step("welcome", _recorded("welcome")(ctx))
    upgraded = await ctx.wait_for_event("plan.upgraded", timeout=data.get("timeout", "14d"))
    if upgraded is not None:
        await step("thank", _recorded("thank")(ctx))
        return {"upgraded": True, "event": upgraded["id"]}
    await step("downgrade", _recorded("downgrade")(ctx))
    return {"upgraded": False}


@workflow("ships")
async def ships(ctx: Context, payload: dict[str, Any]) -> Any:
    async def ship() -> None:
        LEDGER.add(ctx, "ship")
        EFFECTS["ship"](ctx.run_id)  # its side effect emits order.shipped
    await step("ship", ship)
    return await ctx.wait_for_event("order.shipped", subject=ctx.run_id,
                                    timeout=payload.get("timeout", "5s"),
                                    lookback=payload.get("lookback"))


# The hook URLs each call of a run's workflow got (a replay must get the same one).
HOOK_URLS: dict[str, list[str]] = defaultdict(list)


@workflow("docapproval")
async def docapproval(ctx: Context, payload: dict[str, Any]) -> Any:
    hook = await ctx.create_hook("doc-approval", metadata={"documentId": payload["doc"]},
                                 ttl=payload.get("ttl", "7d"))
    HOOK_URLS[ctx.run_id].append(hook.url)
    await step("notify", _recorded("notify")(ctx))
    approval = await hook.wait(timeout=payload.get("timeout"))
    if not approval or not approval.get("approved"):
        raise TerminalError("document rejected")
    await step("publish", _recorded("publish")(ctx))
    return {"published": True, "documentId": approval["documentId"]}


@dataclass
class Concurrency:
    """How many probe bodies run at once, per run (the function's own ledger)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    active: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    peak: dict[str, int] = field(default_factory=lambda: defaultdict(int))


CONCURRENCY = Concurrency()


@workflow("fanout")
async def fanout(ctx: Context, payload: dict[str, Any]) -> Any:
    import asyncio

    def probe(i: int) -> Any:
        async def body() -> int:
            LEDGER.add(ctx, f"probe-{i}")
            with CONCURRENCY.lock:
                CONCURRENCY.active[ctx.run_id] += 1
                peak = max(CONCURRENCY.peak[ctx.run_id], CONCURRENCY.active[ctx.run_id])
                CONCURRENCY.peak[ctx.run_id] = peak
            try:
                await asyncio.sleep(float(payload.get("hold", 0.05)))
            finally:
                with CONCURRENCY.lock:
                    CONCURRENCY.active[ctx.run_id] -= 1
            if i in payload.get("fail", ()):
                raise TerminalError(f"probe {i} failed", code="probe_failed")
            return i * i
        return body

    try:
        results = await ctx.parallel([step(f"probe-{i}", probe(i)) for i in range(payload["n"])],
                                     max_parallel=payload.get("max"))
    except StepFailed as exc:
        return {"failed": exc.code, "ran": len(set(LEDGER.bodies(ctx.run_id)))}
    return {"results": results}


@workflow("branches")
async def branches(ctx: Context, payload: dict[str, Any]) -> Any:
    def branch(i: int) -> Any:
        async def run() -> int:
            a = await step("a", _recorded(f"a-{i}", i)(ctx))
            await ctx.sleep(payload.get("sleep", "200ms"))
            b = await step("b", _recorded(f"b-{i}", 10 * i)(ctx))
            return int(a) + int(b)
        return run

    results = await ctx.parallel([branch(i) for i in range(3)])
    total = await step("total", _recorded("total", sum(results))(ctx))
    return {"results": results, "total": total}


@workflow("parent")
async def parent(ctx: Context, payload: dict[str, Any]) -> Any:
    first = await ctx.call("chain", {"steps": 2})
    spawned = await ctx.spawn("approval", {})
    out: dict[str, Any] = {"first": first, "spawned": spawned}
    if payload.get("failing"):
        try:
            await ctx.call("saga", {"reraise": True})
        except StepFailed as exc:
            out["child_failed"] = exc.code
    if payload.get("wait_child"):
        out["approval"] = await ctx.call("approval", {}, name="second-approval")
    return out


@workflow("slowstep")
async def slowstep(ctx: Context, payload: dict[str, Any]) -> Any:
    import asyncio

    async def slow() -> str:
        LEDGER.add(ctx, "slow")
        await asyncio.sleep(float(payload.get("seconds", 2)))
        return "slept"

    first = await step("slow", slow)
    after = await step("after", _recorded("after", "done")(ctx))
    return {"first": first, "after": after}


def digest(value: Any) -> str:
    """A value's fingerprint: a test compares what a run received with what was sent."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


@workflow("named")
async def named(ctx: Context, payload: dict[str, Any]) -> Any:
    """Waits for the signal named in its input; returns the payload's fingerprint."""
    got = await ctx.wait_for_signal(payload["name"], timeout=payload.get("timeout"))
    return {"digest": digest(got), "keys": sorted(got) if isinstance(got, dict) else None}


@workflow("bighook")
async def bighook(ctx: Context, payload: dict[str, Any]) -> Any:
    """Creates a hook whose metadata is `metadata_chars` characters of padding (built
    here: the run's input could not carry it), waits for it, returns the fingerprint of
    what came."""
    metadata = {"pad": "m" * int(payload.get("metadata_chars", 0))}
    hook = await ctx.create_hook(payload.get("signal", "approve"), metadata=metadata)
    HOOK_URLS[ctx.run_id].append(hook.url)
    got = await hook.wait()
    return {"digest": digest(got), "metadata": digest(metadata)}


@workflow("eventwait")
async def eventwait(ctx: Context, payload: dict[str, Any]) -> Any:
    """Waits for the event named in its input (any subject); returns its data."""
    event = await ctx.wait_for_event(payload["name"], subject=payload.get("subject"),
                                     timeout=payload.get("timeout"))
    return None if event is None else {"name": event["name"], "data": event["data"]}


@workflow("bigchild")
async def bigchild(ctx: Context, payload: dict[str, Any]) -> Any:
    """Starts a child run (`named`, spawned) whose input is padded to `input_chars`."""
    return await ctx.spawn("named", {"name": "approve", "pad": "i" * payload["input_chars"]})


@workflow("unchecked")
async def unchecked(ctx: Context, payload: dict[str, Any]) -> Any:
    """Issues one operation as an SDK that checks neither names nor sizes would: through
    the context's private `_wait`, past the public calls' checks. The orchestrator must
    refuse it itself (the operation fails where it is awaited)."""
    kind, name = payload["kind"], payload.get("name", "approve")
    pad = "p" * int(payload.get("chars", 0))
    if kind == "signal":
        return await ctx._wait("signal", name, timeout=None)
    if kind == "event":
        return await ctx._wait("event", name, event=name, subject=None, timeout=None,
                               after=0.0)
    if kind == "hook":
        return await ctx._wait("hook", name, signal=name, metadata={"pad": pad}, ttl=None)
    return await ctx._wait(kind, "child", workflow="named",
                           input={"name": "approve", "pad": pad})


def create_app(protocols: tuple[int, ...] | None = None) -> FunctionApp:
    """The test workflows; `protocols=(1,)` serves them as an SDK that predates version 2
    of the durable protocol would."""
    app = FunctionApp(secret="durable-secret",
                      **({"durable_protocols": protocols} if protocols else {}))
    app.workflow(chain, sleeper, approval, flaky, saga, versioned, slowchain, trial, ships,
                 docapproval, fanout, branches, parent, slowstep, named, bighook, bigchild,
                 unchecked, eventwait)
    return app
