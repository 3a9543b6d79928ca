"""Version 2 of the durable protocol, driven directly (no HTTP, no orchestrator): a call
runs every step it can and reports each result as a checkpoint; parallel branches run
inside the call; the typed operations both sides read and write."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from pydantic import ValidationError

from functions.durable import Context, advance, step, workflow
from functions.sdk.protocol import (
    PROTOCOLS,
    DurableAnswer,
    DurableRequestBody,
    JournalEntry,
    Op,
    RecordOp,
    parse_op,
)
from orchestrator.engine.durable import (
    BadAnswer,
    BranchDone,
    Complete,
    Continue,
    Pause,
    Suspend,
    next_move,
    read_answer,
    read_op,
)
from orchestrator.engine.durable_scopes import JournalView

T0 = 1_700_000_000.0


def call(wf: Any, journal: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    body = {"run": {"run_id": "r1", "workflow": wf.name, "started_at": T0, "now": T0 + 1},
            "input": extra.pop("payload", None), "journal": journal or [], "protocol": 2,
            **extra}
    return asyncio.run(advance(wf, body))


def records(answer: dict[str, Any]) -> list[dict[str, Any]]:
    return [op["entry"] for op in answer["ops"] if op["op"] == "record"]


def test_one_call_runs_a_whole_chain_and_reports_each_step_as_it_ends() -> None:
    ran: list[int] = []

    @workflow("v2-chain")
    async def chain(ctx: Context, payload: Any) -> int:
        total = 0
        for i in range(50):
            async def body(i: int = i) -> int:
                ran.append(i)
                return i
            total += await step(f"s{i}", body)
        return total

    answer = call(chain)
    assert ran == list(range(50))
    assert [e["name"] for e in records(answer)] == [f"s{i}" for i in range(50)]
    assert [e["pos"] for e in records(answer)] == list(range(50))
    assert answer["ops"][-1] == {"op": "complete", "value": sum(range(50))}
    # Replayed from its journal, nothing runs again.
    again = call(chain, records(answer))
    assert ran == list(range(50))
    assert again["ops"] == [{"op": "complete", "value": sum(range(50))}]


def test_a_call_past_its_budget_starts_no_step_and_reports_the_next() -> None:
    spans: list[tuple[float, float]] = []

    @workflow("v2-slow")
    async def slow(ctx: Context, payload: Any) -> None:
        for i in range(10):
            async def body() -> None:
                began = time.monotonic()
                await asyncio.sleep(0.05)
                spans.append((began, time.monotonic()))
            await step(f"s{i}", body)

    before = time.monotonic()
    answer = call(slow, budget=0.12)
    ran = records(answer)
    # Bodies start until the budget is spent, and none after (all ten take 0.5 s): the
    # call stopped once the last body it ran ended past `before` + 0.12, never earlier
    # (times the bodies read, so a stalled machine changes how many ran, not the verdict).
    assert 1 <= len(ran) < 10 and len(spans) == len(ran), ran
    assert spans[-1][1] >= before + 0.12, (before, spans)
    assert answer["ops"][-1]["op"] == "next"
    assert answer["ops"][-1]["pos"] == len(ran)


def test_version_1_still_runs_one_step_body_per_call() -> None:
    @workflow("v1-chain")
    async def chain(ctx: Context, payload: Any) -> None:
        for i in range(3):
            await step(f"s{i}", lambda: None)

    answer = call(chain, protocol=1)
    assert [e["name"] for e in records(answer)] == ["s0"]
    assert answer["ops"][-1]["op"] == "next"


def test_parallel_branches_run_in_the_call_at_most_max_parallel_at_once() -> None:
    active, peak = [0], [0]

    def probe(i: int) -> Any:
        async def body() -> int:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
            await asyncio.sleep(0.01)
            active[0] -= 1
            return i * i
        return body

    @workflow("v2-fan")
    async def fan(ctx: Context, payload: Any) -> list[int]:
        out: list[int] = await ctx.parallel([step(f"p{i}", probe(i)) for i in range(12)],
                                            max_parallel=3)
        return out

    answer = call(fan)
    entries = records(answer)
    assert peak[0] == 3
    steps = [e for e in entries if e["kind"] == "step"]
    assert len(steps) == 12 and all(e["ends"] for e in steps)  # one-step branches
    assert not [e for e in entries if e["kind"] == "result"]  # no result entry besides
    assert entries[-1]["kind"] == "parallel"
    assert answer["ops"][-1] == {"op": "complete", "value": [i * i for i in range(12)]}
    assert call(fan, entries)["ops"] == answer["ops"][-1:]  # replays without running


def test_a_branch_that_waits_suspends_alone_and_keeps_its_slot() -> None:
    @workflow("v2-wait")
    async def wait(ctx: Context, payload: Any) -> list[Any]:
        async def waiter() -> Any:
            await step("before", lambda: "b")
            return await ctx.wait_for_signal("go")

        out: list[Any] = await ctx.parallel(
            [waiter, step("x", lambda: 1), step("y", lambda: 2), step("z", lambda: 3)],
            max_parallel=2)
        return out

    answer = call(wait)
    kinds = [(op["op"], op.get("scope")) for op in answer["ops"] if op["op"] != "record"]
    # The waiting branch reported its wait; the others ran through one slot; the call
    # ends with the parallel operation waiting for the branch.
    assert ("signal", "0:0") in kinds
    assert kinds[-1] == ("parallel", "")
    done = {(e["scope"], e["name"]) for e in records(answer)}
    assert {("0:0", "before"), ("0:1", "x"), ("0:2", "y"), ("0:3", "z")} <= done


def test_a_failed_one_step_branch_raises_its_steps_failure_on_replay_too() -> None:
    from functions.durable import StepFailed, TerminalError

    async def boom() -> None:
        raise TerminalError("no", code="nope")

    @workflow("v2-fail")
    async def failing(ctx: Context, payload: Any) -> Any:
        try:
            await ctx.parallel([step("ok", lambda: 1), step("bad", boom)])
        except StepFailed as exc:
            return {"step": exc.step, "code": exc.code}
        return None

    answer = call(failing)
    assert answer["ops"][-1] == {"op": "complete", "value": {"step": "bad", "code": "nope"}}
    assert call(failing, records(answer))["ops"] == answer["ops"][-1:]


def test_every_operation_reads_back_as_the_model_it_was_written_from() -> None:
    lines = [
        b'{"op":"record","entry":{"scope":"","pos":0,"id":"a","kind":"step","name":"s",'
        b'"value":1,"attempts":1}}',
        b'{"op":"sleep","scope":"","pos":1,"id":"b","kind":"sleep","name":"nap","seconds":3}',
        b'{"op":"parallel","scope":"","pos":2,"id":"c","kind":"parallel","name":"p",'
        b'"branches":4,"max_parallel":2}',
        b'{"op":"end","deadline":null}',
    ]
    ops = [parse_op(line) for line in lines]
    assert [op.op for op in ops] == [Op.RECORD, Op.SLEEP, Op.PARALLEL, Op.END]
    assert isinstance(ops[0], RecordOp) and ops[0].entry == JournalEntry(
        pos=0, id="a", kind="step", name="s", value=1, attempts=1)
    assert 2 in PROTOCOLS
    assert DurableRequestBody.model_validate(
        {"run": {"run_id": "r", "started_at": 1, "now": 2}, "protocol": 2}).protocol == 2


@pytest.mark.parametrize("line, problem", [
    (b'{"op":"teleport"}', "op"),
    (b'{"op":"sleep","pos":-1,"id":"b","name":"n","seconds":1}', "pos"),
    (b'{"op":"parallel","pos":0,"id":"b","name":"n","branches":0,"max_parallel":1}',
     "branches"),
    (b'{"op":"event","pos":0,"id":"b","name":"n","event":""}', "event"),
    (b'not json', "answer"),
])
def test_a_line_that_is_not_an_operation_is_refused_naming_what_is_wrong(
        line: bytes, problem: str) -> None:
    with pytest.raises(BadAnswer, match=problem):
        read_op(line)
    with pytest.raises(ValidationError):
        parse_op(line)


def test_next_move_reads_what_a_call_ended_with() -> None:
    place = {"scope": "", "pos": 3, "id": "x", "name": "n"}
    sleep = parse_op(b'{"op":"sleep","pos":3,"id":"x","name":"n","seconds":5}')
    other = parse_op(b'{"op":"next","scope":"0:1","pos":0,"id":"y","name":"m"}')
    nxt = parse_op(b'{"op":"next","pos":3,"id":"x","name":"n"}')
    move = next_move([other, sleep], 100.0, "", None)
    assert isinstance(move, Suspend) and move.waiting.until == 105.0
    assert isinstance(next_move([nxt], 100.0, "", None), Continue)
    assert isinstance(next_move([sleep], 100.0, "", 102.0), Suspend)
    assert next_move([sleep], 100.0, "", 102.0).waiting.until == 102.0  # type: ignore[union-attr]
    done = {**place, "scope": "0:1", "pos": 0, "kind": "step", "ends": True}
    assert isinstance(next_move([], 1.0, "0:1", None, [done]), BranchDone)
    with pytest.raises(BadAnswer, match="without saying"):
        next_move([other], 1.0, "", None)
    mismatch = DurableAnswer.model_validate({"ops": [
        {"op": "mismatch", "recorded": place, "issued": {**place, "id": "z"}}]})
    assert isinstance(next_move(mismatch.ops, 1.0, "", None), Pause)
    entries, move = read_answer({"ops": [{"op": "complete", "value": 7}]}, 1.0)
    assert entries == [] and move == Complete(7)


def test_a_journal_view_knows_which_branches_ended() -> None:
    view = JournalView([{"scope": "0:0", "pos": 0, "id": "a", "ends": True},
                        {"scope": "0:1", "pos": 0, "id": "b"},
                        {"scope": "0:2", "pos": 99_999_999, "id": "c"}])
    assert view.ended == {"0:0", "0:2"} and len(view) == 3 and view.has("0:1", 0)
