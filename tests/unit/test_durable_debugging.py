"""A replay call (`mode: replay`) stopping in the debugger, driven in process: the
debugger is PYTHONBREAKPOINT's, here a hook of this module that records where it was
called from, so the tests see that the stop is where it should be and that `up N` (the
banner's) reaches the workflow's own line."""

from __future__ import annotations

import asyncio
import linecache
import sys
from types import CodeType, FrameType
from typing import Any

import pytest

from functions.durable import Context, advance, step, workflow
from functions.sdk.durable.golden import check_body

# Per stop, the stack the hook was called from, innermost first (pdb starts in the
# first: the SDK's stop), as (code, line): a finished coroutine's frame keeps no f_back.
CALLED: list[list[tuple[CodeType, int]]] = []


def hook(*args: Any, **kwargs: Any) -> None:
    """PYTHONBREAKPOINT's callable: note the caller's stack, as pdb would see it."""
    stack = []
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        stack.append((frame.f_code, frame.f_lineno))
        frame = frame.f_back
    CALLED.append(stack)


@pytest.fixture(autouse=True)
def debugger(monkeypatch: pytest.MonkeyPatch) -> None:
    CALLED.clear()
    monkeypatch.setenv("PYTHONBREAKPOINT", f"{__name__}.hook")


VERSION = {"n": 1}


@workflow("debugged")
async def debugged(ctx: Context, payload: Any) -> str:
    await step("one", _value)
    name = "two" if VERSION["n"] == 1 else "two-renamed"
    await step(name, _value)  # the line a stop before either second step points at
    return name


async def _value() -> int:
    return 1


def golden() -> dict[str, Any]:
    """The journal of one whole run of `debugged` (version 1)."""
    journal: list[dict[str, Any]] = []
    while True:
        body = {"run": {"run_id": "r1", "workflow": "debugged", "started_at": 1.0, "now": 2.0},
                "journal": journal, "protocol": 2}
        ops = asyncio.run(advance(debugged, body))["ops"]
        journal += [op["entry"] for op in ops if op["op"] == "record"]
        if any(op["op"] == "complete" for op in ops):
            return {"run_id": "r1", "workflow": "debugged", "journal": journal}


def replay(break_at: str | None = None, mode: str = "replay") -> dict[str, Any]:
    body: dict[str, Any] = {**check_body(golden()), "mode": mode}
    if break_at is not None:
        body["break_at"] = break_at
    return asyncio.run(advance(debugged, body))


def test_it_stops_right_before_the_operation_asked_for_and_up_reaches_the_workflow(
        capsys: pytest.CaptureFixture[str]) -> None:
    answer = replay("two")
    assert [(s["reason"], s["name"], s["pos"]) for s in answer["stops"]] == [
        ("break", "two", 1)]
    assert len(CALLED) == 1
    banner = capsys.readouterr().err
    assert "replay: stopped before step 'two'" in banner
    n = int(banner.split("`up ")[1].split("`")[0])
    code, line = CALLED[0][n]  # pdb's `up N`
    assert code is debugged.fn.__code__
    assert "await step(name, _value)" in linecache.getline(code.co_filename, line)
    assert not any(op["op"] in ("record", "mismatch") for op in answer["ops"])


def test_a_mismatch_stops_where_the_code_diverges_when_no_operation_is_asked_for() -> None:
    VERSION["n"] = 2
    try:
        journal = golden()  # recorded by version 2 itself: replays
        VERSION["n"] = 1
        body = {**check_body(journal), "mode": "replay"}
        answer = asyncio.run(advance(debugged, body))
    finally:
        VERSION["n"] = 1
    assert [(s["reason"], s["name"]) for s in answer["stops"]] == [("mismatch", "two")]
    assert [op["op"] for op in answer["ops"]] == ["mismatch"]
    assert len(CALLED) == 1


def test_past_the_operation_asked_for_a_mismatch_stops_nothing_more() -> None:
    VERSION["n"] = 2
    try:
        journal = golden()
        VERSION["n"] = 1
        body = {**check_body(journal), "mode": "replay", "break_at": "one"}
        answer = asyncio.run(advance(debugged, body))
    finally:
        VERSION["n"] = 1
    assert [s["reason"] for s in answer["stops"]] == ["break"]
    assert len(CALLED) == 1


def test_check_mode_and_a_clean_replay_never_call_the_debugger() -> None:
    assert "stops" not in replay(mode="check")
    assert replay()["stops"] == []
    assert replay("nowhere")["stops"] == []
    assert CALLED == []


def test_breakpoint_off_still_reports_the_stop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONBREAKPOINT", "0")
    assert [s["name"] for s in replay("one")["stops"]] == ["one"]
    assert CALLED == []
