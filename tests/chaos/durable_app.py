"""The durable workflows the function server serves (POST /durable/<name>), beside its
step routes. Every step body records each execution in the effect ledger, so the
checker can tell which execution's value a run committed:

- `bstart` when a body begins: run, the run's logical name, the workflow, the step's
  scope, position and op id, its name, `ctx.attempt` and `ctx.idempotency_key`;
- `bend` when it ends: the value it returned (a fresh nonce each time: two executions
  never return the same value) or the error it raised.

The workflows (their shapes are constants here, which the checker reads):

- `dchain`: CHAIN_STEPS steps with a CHAIN_SLEEP sleep between two, then a step that
  fails its first attempt (a retry inside a run);
- `dsignals`: a step, then waits for the signals SIGNAL_WAITS names, in that order
  (no timeout: the harness sends exactly one signal per wait), then a step;
- `dparallel`: PARALLEL_BRANCHES branches, at most MAX_PARALLEL at once, each a step, a
  BRANCH_SLEEP sleep and a step; then a step;
- `devent`: a step, then a wait for EVENT about the run's name (EVENT_TIMEOUT), cut
  short by the event the harness emits; then a step;
- `dtimeout`: the same with EVENT_SHORT_TIMEOUT and no event: it times out (the harness
  emits one once it has, which must change nothing);
- `dclaim`: `ctx.state.add` of one key per seed (every dclaim run of a seed races for
  it: one wins), then a step;
- `dlock`: a step, then a step inside `ctx.lock` of one key per seed (every dlock run of
  a seed takes turns);
- `dgate`: `ctx.approval("gate")` (GATE_TIMEOUT), answered by the harness twice at once
  (or not at all: it times out, and a late answer must change nothing), then a step.

They are served in three versions at once (VERSIONS: a deploy in the middle of the
faults), and every `bstart` names the version whose code ran it (`ver`): `v1`, the
code as above; `v2`, a compatible change (the bodies' values say which version made
them, the operations are the same); `v3` (INCOMPATIBLE), which also issues a step
`audit` at place 1 of the AUDITED workflows, so a run of v1 or v2 that is past its
first step diverges from it (a run may move there only before that step committed)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from functions.durable import Context, RetryableError, Workflow, step, workflow
from functions.sdk.durable.steps import current_step
from tests.chaos.jsonl import JsonlWriter, digest

__all__ = [
    "AUDITED",
    "BODY_HOLD",
    "BRANCH_SLEEP",
    "CHAIN_SLEEP",
    "CHAIN_STEPS",
    "EVENT",
    "EVENT_SHORT_TIMEOUT",
    "EVENT_TIMEOUT",
    "GATE_TIMEOUT",
    "INCOMPATIBLE",
    "MAX_PARALLEL",
    "PARALLEL_BRANCHES",
    "SIGNAL_WAITS",
    "VERSIONS",
    "WORKFLOWS",
    "durable_workflows",
]

CHAIN_STEPS = 4
CHAIN_SLEEP = 0.4  # seconds
SIGNAL_WAITS = ("approve", "approve", "note", "approve")
PARALLEL_BRANCHES = 5
MAX_PARALLEL = 2
BRANCH_SLEEP = 0.3
EVENT = "chaos.ping"
EVENT_TIMEOUT = 30.0
EVENT_SHORT_TIMEOUT = 2.0
# How long a body works: long enough for bodies of two branches to overlap.
BODY_HOLD = 0.15
GATE_TIMEOUT = 10.0
WORKFLOWS = ("dchain", "dsignals", "dparallel", "devent", "dtimeout", "dclaim", "dlock",
             "dgate")
# The versions of the code served at once (label -> number), the one that breaks runs
# in flight, and the workflows it changes (a step `audit` at place 1).
VERSIONS = {"v1": 1, "v2": 2, "v3": 3}
INCOMPATIBLE = "v3"
AUDITED = ("dchain", "dsignals")


def _ms(seconds: float) -> int:
    return round(seconds * 1000)  # the SDK's numbers are milliseconds


def durable_workflows(ledger: JsonlWriter, version: str = "v1") -> list[Workflow]:
    """The workflows above as `version` (VERSIONS) has them, their bodies writing to
    `ledger`."""
    number = VERSIONS[version]
    audited = version == INCOMPATIBLE

    def body(ctx: Context, payload: Any, name: str, *, fail_first: bool = False
             ) -> Callable[[], Awaitable[Any]]:
        async def run() -> Any:
            info = current_step()
            assert info is not None
            bid = uuid.uuid4().hex[:12]
            ledger.write({
                "ev": "bstart", "id": bid, "t": time.time(), "run": ctx.run_id,
                "name": (payload or {}).get("name"), "wf": ctx.workflow,
                "scope": info.place.scope, "pos": info.place.pos, "op": info.place.id,
                "step": name, "attempt": ctx.attempt, "key": ctx.idempotency_key,
                "ver": version,
            })
            await asyncio.sleep(BODY_HOLD)
            if fail_first and ctx.attempt == 1:
                ledger.write({"ev": "bend", "id": bid, "t": time.time(), "value": None,
                              "out": None, "error": "retryable"})
                raise RetryableError(f"{name}: attempt 1 fails on purpose")
            value = {"nonce": uuid.uuid4().hex, "step": name, "attempt": ctx.attempt}
            if number > 1:
                value["by"] = number  # v2's compatible change: what a step returns
            # Written before the value leaves: the ledger may know a value no call
            # delivered, never the reverse.
            ledger.write({"ev": "bend", "id": bid, "t": time.time(), "value": value,
                          "out": digest(value), "error": None})
            return value

        return run

    async def dchain(ctx: Context, payload: Any) -> Any:
        values = []
        for i in range(CHAIN_STEPS):
            if i == 1 and audited:
                await step("audit", body(ctx, payload, "audit"))
            if i:
                await ctx.sleep(_ms(CHAIN_SLEEP))
            values.append(await step(f"s{i}", body(ctx, payload, f"s{i}")))
        values.append(await step("flaky", body(ctx, payload, "flaky", fail_first=True),
                                 retries=3, delay="200ms"))
        return {"steps": values}

    async def dsignals(ctx: Context, payload: Any) -> Any:
        first = await step("prepare", body(ctx, payload, "prepare"))
        if audited:
            await step("audit", body(ctx, payload, "audit"))
        got = [await ctx.wait_for_signal(name) for name in SIGNAL_WAITS]
        last = await step("finish", body(ctx, payload, "finish"))
        return {"got": got, "steps": [first, last]}

    async def dparallel(ctx: Context, payload: Any) -> Any:
        def branch(i: int) -> Callable[[], Awaitable[Any]]:
            async def run() -> Any:
                a = await step("a", body(ctx, payload, f"a{i}"))
                await ctx.sleep(_ms(BRANCH_SLEEP))
                b = await step("b", body(ctx, payload, f"b{i}"))
                return {"a": a, "b": b}
            return run

        results = await ctx.parallel([branch(i) for i in range(PARALLEL_BRANCHES)],
                                     max_parallel=MAX_PARALLEL)
        total = await step("total", body(ctx, payload, "total"))
        return {"branches": results, "total": total}

    def event_wait(timeout: float) -> Callable[[Context, Any], Awaitable[Any]]:
        async def run(ctx: Context, payload: Any) -> Any:
            opened = await step("open", body(ctx, payload, "open"))
            event = await ctx.wait_for_event(EVENT, subject=str((payload or {}).get("name")),
                                             timeout=_ms(timeout))
            closed = await step("close", body(ctx, payload, "close"))
            return {"event": event, "steps": [opened, closed]}
        return run

    async def dclaim(ctx: Context, payload: Any) -> Any:
        won = await ctx.state.add(f"claim-{(payload or {}).get('seed')}", entity="chaos")
        after = await step("after", body(ctx, payload, "after"))
        return {"won": won, "step": after}

    async def dlock(ctx: Context, payload: Any) -> Any:
        before = await step("before", body(ctx, payload, "before"))
        async with ctx.lock(f"chaos-{(payload or {}).get('seed')}"):
            inside = await step("inside", body(ctx, payload, "inside"))
        return {"steps": [before, inside]}

    async def dgate(ctx: Context, payload: Any) -> Any:
        answer = await ctx.approval("gate", prompt="chaos gate", timeout=_ms(GATE_TIMEOUT))
        after = await step("after", body(ctx, payload, "after"))
        return {"answer": answer, "step": after}

    return [
        workflow("dchain")(dchain),
        workflow("dsignals")(dsignals),
        workflow("dparallel")(dparallel),
        workflow("devent")(event_wait(EVENT_TIMEOUT)),
        workflow("dtimeout")(event_wait(EVENT_SHORT_TIMEOUT)),
        workflow("dclaim")(dclaim),
        workflow("dlock")(dlock),
        workflow("dgate")(dgate),
    ]
