"""The in-script commands as a script writes them, parsed (functions/sdk/scripts/commands.py),
and the channel's request format (channel.py)."""

from __future__ import annotations

import pytest

from functions.sdk.scripts.channel import Answer, _decode, _Incomplete
from functions.sdk.scripts.commands import (
    ActivitySubmit,
    ActivityWait,
    ChildRun,
    LockCmd,
    SleepCmd,
    StateCmd,
    StepCmd,
    UsageError,
    WaitCmd,
    parse,
)


def test_step_takes_a_label_and_the_argv_after_the_separator() -> None:
    assert parse(["step", "book", "--label", "Book it", "--", "echo", "--label", "x"]) == \
        StepCmd("book", ("echo", "--label", "x"), "Book it")
    assert parse(["step", "x", "--", "true"]) == StepCmd("x", ("true",))


@pytest.mark.parametrize("args, message", [
    (["step", "x", "--nope", "--", "true"], "unknown flag --nope"),
    (["step", "x"], "after --"),
    (["step", "x", "--"], "nothing to run"),
    (["step", "--", "true"], "expected NAME"),
    (["sleep", "soon"], "not a duration"),
    (["wait", "timer", "x"], "signal or an event"),
    (["state", "add", "k"], "--entity is required"),
    (["state", "pop", "k"], "give an action"),
    (["call", "wf", "--input", "{nope"], "not JSON"),
    (["activity", "submit", "a", "--attempts", "0", "--", "true"], "below 1"),
    (["frobnicate"], "unknown command"),
    ([], "give a command"),
])
def test_a_command_written_wrongly_says_how(args: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse(args)


def test_durations_are_text_or_seconds() -> None:
    assert parse(["sleep", "30s"]) == SleepCmd(30.0)
    assert parse(["sleep", "14d"]) == SleepCmd(14 * 86400.0)
    assert parse(["sleep", "5"]) == SleepCmd(5.0)
    assert parse(["wait", "signal", "approve", "--timeout", "2d"]) == \
        WaitCmd("signal", "approve", 2 * 86400.0)
    assert parse(["wait", "event", "plan.upgraded"]) == WaitCmd("event", "plan.upgraded")


def test_state_actions() -> None:
    assert parse(["state", "incr", "t:1", "--entity", "r", "--op", "ticket", "--by", "2"]) == \
        StateCmd("incr", "t:1", "r", None, "ticket", 2)
    assert parse(["state", "set", "cursor", "10", "--entity", "tickets"]) == \
        StateCmd("set", "cursor", "tickets", "10")
    assert parse(["state", "get", "cursor", "--entity=tickets"]) == \
        StateCmd("get", "cursor", "tickets")


def test_lock_with_and_without_a_command() -> None:
    assert parse(["lock", "deploy"]) == LockCmd("deploy")
    assert parse(["lock", "c", "--", "sh", "-c", "x"]) == LockCmd("c", ("sh", "-c", "x"))


def test_activity_submit_run_and_wait() -> None:
    cmd = parse(["activity", "run", "fetch", "--requires", "gpu", "--attempts", "5",
                 "--backoff", "2s", "--retry-on-exit", "75", "--retry-on-exit", "76",
                 "--", "curl", "x"])
    assert cmd == ActivitySubmit("fetch", ("curl", "x"), "gpu", 5, 2.0, (75, 76), wait=True)
    assert isinstance(cmd, ActivitySubmit)
    assert cmd.input() == {"name": "fetch", "argv": ["curl", "x"], "attempts": 5,
                           "backoff": 2.0, "retry_on_exit": [75, 76]}
    assert parse(["activity", "submit", "p", "--", "true"]) == \
        ActivitySubmit("p", ("true",))
    assert parse(["activity", "wait", "p"]) == ActivityWait("p")
    assert parse(["activity", "wait", "--all"]) == ActivityWait(None)


def test_call_and_spawn() -> None:
    assert parse(["call", "child", "--input", '{"n": 1}']) == ChildRun("child", {"n": 1})
    assert parse(["spawn", "child"]) == ChildRun("child", None, wait=False)


def test_a_request_is_whole_only_with_every_field() -> None:
    req = b"tok\0/tmp\0003\0step\0x\0true\0"
    with pytest.raises(_Incomplete):
        _decode(req)  # a step's request carries the environment too
    assert _decode(req + b"2\0A=1\0B=x=y\0") == ("tok", "/tmp", ["step", "x", "true"],
                                               {"A": "1", "B": "x=y"})
    assert _decode(b"tok\0/\0002\0sleep\0001s\0") == ("tok", "/", ["sleep", "1s"], None)
    with pytest.raises(_Incomplete):
        _decode(b"tok\0/\0002\0sleep\0")


def test_an_answer_is_three_nul_ended_fields() -> None:
    assert Answer(3, "out\n", "err\0x").encode() == b"3\0out\n\0errx\0"
