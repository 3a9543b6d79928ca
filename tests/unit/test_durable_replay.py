"""The durable SDK's replay, driven directly (no HTTP, no orchestrator): each test plays
the orchestrator's part with a journal in memory, one call at a time."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from functions.durable import (
    Context,
    RetryableError,
    StepFailed,
    TerminalError,
    advance,
    seconds,
    step,
    workflow,
)

T0 = 1_700_000_000.0


class Driver:
    """The orchestrator's side, in memory: commit what a call reports, call again."""

    def __init__(self, wf: Any, payload: Any = None, signals: dict[str, list[Any]] | None = None,
                 max_calls: int = 1000) -> None:
        self.wf, self.payload = wf, payload
        self.journal: list[dict[str, Any]] = []
        self.attempts: dict[str, int] = {}
        self.signals = signals or {}
        self.calls = 0
        self.max_calls = max_calls
        self.waits: list[dict[str, Any]] = []

    def call(self, **extra: Any) -> dict[str, Any]:
        self.calls += 1
        body = {"run": {"run_id": "r1", "workflow": self.wf.name, "started_at": T0,
                        "now": T0 + self.calls},
                "input": self.payload, "journal": list(self.journal), "attempts": self.attempts,
                **extra}
        return asyncio.run(advance(self.wf, body))

    def run(self) -> dict[str, Any]:
        while self.calls < self.max_calls:
            answer = self.call()
            for op in answer["ops"]:
                kind = op["op"]
                if kind == "record":
                    self.journal.append(op["entry"])
                elif kind == "retry":
                    self.attempts[op["id"]] = op["attempt"]
                elif kind in ("sleep", "signal"):
                    self.waits.append(op)
                    value = None
                    if kind == "signal" and self.signals.get(op["name"]):
                        value = self.signals[op["name"]].pop(0)
                    entry = {k: op[k] for k in ("scope", "pos", "id", "kind", "name")}
                    self.journal.append({**entry, "status": "ok", "value": value,
                                         "started": T0 + self.calls, "ended": T0 + self.calls})
                elif kind in ("complete", "fail", "mismatch"):
                    return op
        raise AssertionError("the workflow did not end")


def test_each_call_runs_one_step_body_and_replay_never_runs_a_committed_one() -> None:
    ran: Counter[str] = Counter()

    @step("double")
    async def double(x: int) -> int:
        ran["double"] += 1
        return x * 2

    @step("inc")
    def inc(x: int) -> int:  # a sync body runs in a thread
        ran["inc"] += 1
        return x + 1

    @workflow("chain")
    async def chain(ctx: Context, payload: dict[str, int]) -> dict[str, int]:
        a = await double(payload["x"])
        b = await inc(a)
        c = await double(b)
        return {"result": c}

    d = Driver(chain, {"x": 5})
    assert d.run() == {"op": "complete", "value": {"result": 22}}
    assert ran == {"double": 2, "inc": 1}
    assert d.calls == 3  # one call per step; the last one also completes the run
    assert [e["name"] for e in d.journal] == ["double", "inc", "double"]
    assert [e["pos"] for e in d.journal] == [0, 1, 2]
    assert d.journal[0]["id"] != d.journal[2]["id"]  # the 2nd "double" has its own id


def test_a_call_reports_the_next_step_without_running_it() -> None:
    @workflow("two")
    async def two(ctx: Context, payload: Any) -> None:
        await step("a", lambda: 1)
        await step("b", lambda: 2)

    d = Driver(two)
    ops = d.call()["ops"]
    assert [o["op"] for o in ops] == ["record", "next"]
    assert ops[1]["name"] == "b" and ops[1]["pos"] == 1


def test_a_different_operation_where_the_journal_has_a_record_is_a_mismatch() -> None:
    ran = Counter[str]()

    @workflow("changed")
    async def changed(ctx: Context, payload: Any) -> None:
        await step("renamed", lambda: ran.update(["renamed"]))

    d = Driver(changed)
    d.journal = [{"scope": "", "pos": 0, "id": "x", "kind": "step", "name": "original",
                  "status": "ok", "value": 1}]
    op = d.run()
    assert op["op"] == "mismatch"
    assert op["recorded"]["name"] == "original" and op["issued"]["name"] == "renamed"
    assert "original" in op["message"] and "renamed" in op["message"]
    assert not ran


def test_retryable_failures_back_off_then_succeed_with_one_idempotency_key() -> None:
    seen: list[tuple[int, str]] = []

    @step("flaky", retries=3, backoff="exponential", delay="2s")
    async def flaky(ctx: Context) -> str:
        seen.append((ctx.attempt, ctx.idempotency_key))
        if ctx.attempt < 3:
            raise RuntimeError("upstream down")
        return "ok"

    @workflow("retrying")
    async def retrying(ctx: Context, payload: Any) -> str:
        return await flaky(ctx)

    d = Driver(retrying)
    first = d.call()["ops"]
    assert first[0]["op"] == "retry" and first[0]["attempt"] == 1 and first[0]["after"] == 2.0
    assert first[0]["error"]["code"] == "step_error"
    d.attempts[first[0]["id"]] = 1
    second = d.call()["ops"]
    assert second[0]["op"] == "retry" and second[0]["after"] == 4.0
    d.attempts[first[0]["id"]] = 2
    assert d.run()["value"] == "ok"
    assert [a for a, _ in seen] == [1, 2, 3]
    assert len({k for _, k in seen}) == 1 and seen[0][1].startswith("r1:")
    assert d.journal[0]["attempts"] == 3


def test_step_options_take_durations_like_every_other_wait() -> None:
    assert step("a", lambda: 1, delay=1500, max_delay="1m", timeout=250).options == \
        step("a", lambda: 1, delay="1.5s", max_delay="60s", timeout="250ms").options
    with pytest.raises(ValueError, match="max_delay"):
        step("a", lambda: 1, delay="10m")
    with pytest.raises(ValueError, match="backoff"):
        step("a", lambda: 1, backoff="random")


def test_retry_after_from_the_step_wins_over_the_backoff() -> None:
    @workflow("hinted")
    async def hinted(ctx: Context, payload: Any) -> None:
        def limited() -> None:
            raise RetryableError("rate limited", retry_after=7)
        await step("limited", limited)

    assert Driver(hinted).call()["ops"][0]["after"] == 7


def test_a_step_failure_raises_in_the_workflow_and_a_saga_compensates() -> None:
    done: list[str] = []

    @workflow("saga")
    async def saga(ctx: Context, payload: Any) -> dict[str, Any]:
        await step("charge", lambda: done.append("charge"))
        try:
            def ship() -> None:
                raise TerminalError("no such address", code="bad_address")
            await step("ship", ship)
        except StepFailed as exc:
            await step("refund", lambda: done.append("refund"))
            return {"refunded": True, "code": exc.code}
        return {"refunded": False}

    d = Driver(saga)
    assert d.run()["value"] == {"refunded": True, "code": "bad_address"}
    assert done == ["charge", "refund"]
    ship = d.journal[1]
    assert ship["status"] == "error" and ship["error"]["code"] == "bad_address"


def test_retries_exhausted_fail_the_run_when_not_caught() -> None:
    @workflow("doomed")
    async def doomed(ctx: Context, payload: Any) -> None:
        def boom() -> None:
            raise ValueError("nope")
        await step("boom", boom, retries=1)

    op = Driver(doomed).run()
    assert op["op"] == "fail" and op["error"]["code"] == "step_error"
    assert op["error"]["step"] == "boom" and "ValueError: nope" in op["error"]["message"]


def test_retry_on_limits_which_exceptions_are_retried() -> None:
    @workflow("picky")
    async def picky(ctx: Context, payload: Any) -> None:
        def wrong() -> None:
            raise KeyError("k")
        await step("wrong", wrong, retry_on=ConnectionError)

    d = Driver(picky)
    assert [o["op"] for o in d.call()["ops"]] == ["record", "fail"]


def test_sleep_and_signal_report_their_waits_and_replay_their_outcomes() -> None:
    @workflow("waits")
    async def waits(ctx: Context, payload: Any) -> Any:
        await ctx.sleep("3d")
        first = await ctx.wait_for_signal("approval", timeout="2d")
        second = await ctx.wait_for_signal("approval", timeout=5000)
        return [first, second]

    d = Driver(waits, signals={"approval": [{"ok": True}]})
    assert d.run()["value"] == [{"ok": True}, None]
    assert d.waits[0]["op"] == "sleep" and d.waits[0]["seconds"] == 3 * 86400
    assert d.waits[1]["timeout"] == 2 * 86400 and d.waits[2]["timeout"] == 5.0
    assert len({w["id"] for w in d.waits}) == 3


@pytest.mark.parametrize(("text", "secs"), [(5000, 5.0), ("5000ms", 5.0), ("5s", 5.0),
                                            ("10m", 600.0), ("1h", 3600.0), ("14d", 14 * 86400.0),
                                            ("1h30m", 5400.0), ("250", 0.25)])
def test_durations_read_as_reference_003_writes_them(text: Any, secs: float) -> None:
    assert seconds(text) == secs


@pytest.mark.parametrize("bad", ["5 parsecs", "-1s", "1m1h", True, None, "", "1.5.2s"])
def test_a_bad_duration_is_refused_by_name(bad: Any) -> None:
    with pytest.raises(ValueError, match="sleep"):
        seconds(bad, "sleep")


def test_the_circuit_breaker_cannot_be_caught_by_workflow_code() -> None:
    @workflow("runaway", max_steps=5)
    async def runaway(ctx: Context, payload: Any) -> None:
        n = 0
        while True:
            try:
                await step(f"s{n}", lambda: None)
            except Exception:  # a user's catch-all must not hide the breaker
                pass
            n += 1

    op = Driver(runaway).run()
    assert op == {"op": "fail", "error": {"code": "max_steps_exceeded", "message": op["error"]
                                          ["message"]}}
    assert "max_steps=5" in op["error"]["message"]


def test_execution_timeout_fails_a_run_that_outlives_it() -> None:
    @workflow("slowpoke", execution_timeout="10s")
    async def slowpoke(ctx: Context, payload: Any) -> None:
        await ctx.sleep("1m")

    d = Driver(slowpoke)
    first = d.call()
    assert first["deadline"] == T0 + 10 and first["ops"][0]["op"] == "sleep"
    late = asyncio.run(advance(slowpoke, {"run": {"run_id": "r1", "started_at": T0,
                                                  "now": T0 + 11}}))
    assert late["ops"] == [{"op": "fail", "error": {
        "code": "execution_timeout", "message": late["ops"][0]["error"]["message"]}}]


def test_deterministic_helpers_repeat_on_replay() -> None:
    seen: list[Any] = []

    @workflow("helpers")
    async def helpers(ctx: Context, payload: Any) -> None:
        before = ctx.now()
        a, r = ctx.uuid("order"), ctx.random("jitter")
        b = ctx.uuid("order")
        await step("one", lambda: 1)
        seen.append((before.timestamp(), str(a), r, str(b), ctx.now().timestamp()))
        await step("two", lambda: 2)

    d = Driver(helpers)
    d.run()
    (t0, a1, r1, b1, after1), (t0b, a2, r2, b2, after2) = seen
    assert (t0, a1, r1, b1) == (t0b, a2, r2, b2)
    assert t0 == T0 and a1 != b1 and 0 <= r1 < 1
    assert after1 == after2 == pytest.approx(d.journal[0]["ended"])


def test_patched_takes_the_new_branch_only_for_runs_that_reach_it_on_new_code() -> None:
    @workflow("patchy")
    async def patchy(ctx: Context, payload: Any) -> str:
        if ctx.patched("new-fetch"):
            return await step("fetch-v2", lambda: "v2")
        return await step("fetch", lambda: "v1")

    fresh = Driver(patchy)
    assert fresh.run()["value"] == "v2"
    assert [e["kind"] for e in fresh.journal] == ["patch", "step"]
    old = Driver(patchy)
    # A run that got past this point on the old code.
    old.journal = [{"scope": "", "pos": 0, "id": _id("", "fetch", 0), "kind": "step",
                    "name": "fetch", "status": "ok", "value": "v1"}]
    assert old.run()["value"] == "v1"


def _id(scope: str, name: str, n: int) -> str:
    from functions.sdk.durable.call import op_id
    return op_id(scope, name, n)


def test_durable_operations_in_flight_at_once_outside_parallel_are_refused() -> None:
    @workflow("gathered")
    async def gathered(ctx: Context, payload: Any) -> None:
        async def slow() -> int:
            await asyncio.sleep(0.01)
            return 1
        await asyncio.gather(step("a", slow), step("b", slow))

    op = Driver(gathered).run()
    assert op["op"] == "fail", op
    assert op["error"]["code"] == "concurrent_operations", op


def test_a_value_that_is_not_json_fails_the_step_terminally() -> None:
    @workflow("odd")
    async def odd(ctx: Context, payload: Any) -> None:
        await step("odd", lambda: object())

    op = Driver(odd).run()
    assert op["op"] == "fail" and op["error"]["code"] == "invalid_value"


def test_check_mode_replays_and_runs_nothing() -> None:
    ran = Counter[str]()

    @workflow("golden")
    async def golden(ctx: Context, payload: Any) -> None:
        await step("a", lambda: ran.update(["a"]))
        await step("b", lambda: ran.update(["b"]))

    d = Driver(golden)
    d.journal.append(d.call()["ops"][0]["entry"])
    ops = d.call(mode="check")["ops"]
    assert [o["op"] for o in ops] == ["next"] and ops[0]["name"] == "b"
    assert ran == {"a": 1}


def test_ten_thousand_operations_replay_without_running_a_body() -> None:
    ran = Counter[str]()

    @workflow("long")
    async def long(ctx: Context, payload: Any) -> int:
        total = 0
        for i in range(10_000):
            total += await step("item", lambda i=i: ran.update(["x"]) or i)
        return total

    journal = [{"scope": "", "pos": i, "id": _id("", "item", i), "kind": "step", "name": "item",
                "status": "ok", "value": i} for i in range(10_000)]
    answer = asyncio.run(advance(long, {"run": {"run_id": "r"}, "journal": journal}))
    assert answer["ops"] == [{"op": "complete", "value": sum(range(10_000))}]
    assert not ran


def test_a_value_over_the_cap_fails_its_step_with_output_too_large() -> None:
    @workflow("big")
    async def big(ctx: Context, payload: Any) -> str:
        try:
            await step("big", lambda: "x" * 5000)
        except StepFailed as exc:
            return exc.code
        return "kept"

    answer = asyncio.run(advance(big, {"run": {"run_id": "r", "max_value": 1000}}))
    assert answer["ops"][-1] == {"op": "complete", "value": "output_too_large"}
    assert answer["ops"][0]["entry"]["status"] == "error"


def test_the_logger_is_silent_while_replaying(caplog: pytest.LogCaptureFixture) -> None:
    @workflow("chatty")
    async def chatty(ctx: Context, payload: Any) -> None:
        ctx.logger.info("before a")
        await step("a", lambda: 1)
        ctx.logger.info("after a")
        await step("b", lambda: 2)

    with caplog.at_level("INFO", logger="functions.durable.workflow"):
        d = Driver(chatty)
        d.run()
    said = [r.getMessage() for r in caplog.records]
    # Three calls: "before a" logged once (the first call), "after a" once (the second):
    # a replayed line is not logged again.
    assert sum("before a" in m for m in said) == 1
    assert sum("after a" in m for m in said) == 1


def test_the_logger_speaks_after_a_wait_the_first_time_only(
        caplog: pytest.LogCaptureFixture) -> None:
    @workflow("patient")
    async def patient(ctx: Context, payload: Any) -> None:
        await ctx.sleep("1s")
        ctx.logger.info("woke up")
        await step("a", lambda: 1)

    with caplog.at_level("INFO", logger="functions.durable.workflow"):
        Driver(patient).run()
    assert sum("woke up" in r.getMessage() for r in caplog.records) == 1
