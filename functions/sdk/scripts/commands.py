"""The in-script commands, parsed: `orchestrator <command> ...` as a script writes it, turned
into one frozen record per command (pure: no I/O). A command written wrongly raises
`UsageError`, which the script sees as a line on stderr and exit status 2.

    step NAME [--label L] [--timeout D] -- CMD...
    sleep DURATION
    wait signal|event NAME [--timeout D]
    state add|incr|get|set KEY [VALUE] --entity E [--op OP] [--by N]
    lock KEY [-- CMD...]
    activity submit|run NAME [--requires CAP] [--attempts N] [--backoff D]
                             [--retry-on-exit CODE]... -- CMD...
    activity wait NAME | --all
    call|spawn WORKFLOW [--input JSON]

Durations are text as everywhere in the SDK (`500ms`, `30s`, `5m`, `14d`, `1h30m`); a bare
number is seconds, as for the shell's own `sleep`."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from functions.sdk.durable.durations import seconds

__all__ = [
    "ActivitySubmit",
    "ActivityWait",
    "ChildRun",
    "Command",
    "LockCmd",
    "SleepCmd",
    "StateCmd",
    "StepCmd",
    "UsageError",
    "WaitCmd",
    "duration",
    "parse",
]

# What the shim forwards to the host (anything else goes to the `orchestrator` program).
COMMANDS = ("step", "sleep", "wait", "state", "lock", "activity", "call", "spawn")
STATE_ACTIONS = ("add", "incr", "get", "set")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


class UsageError(ValueError):
    """A command written wrongly: the message says how (exit status 2)."""


@dataclass(frozen=True)
class StepCmd:
    name: str
    argv: tuple[str, ...]
    label: str | None = None
    # Past it the command is killed and the step fails with exit 124 (as timeout(1)).
    timeout: float | None = None


@dataclass(frozen=True)
class SleepCmd:
    seconds: float


@dataclass(frozen=True)
class WaitCmd:
    kind: str  # "signal" or "event"
    name: str
    timeout: float | None = None


@dataclass(frozen=True)
class StateCmd:
    action: str  # one of STATE_ACTIONS
    key: str
    entity: str
    value: str | None = None  # set's value
    op: str | None = None  # the operation's name in the journal
    by: int | float = 1  # incr's step


@dataclass(frozen=True)
class LockCmd:
    key: str
    argv: tuple[str, ...] | None = None  # None: hold it until the run ends


@dataclass(frozen=True)
class ActivitySubmit:
    name: str
    argv: tuple[str, ...]
    requires: str = "shell"
    attempts: int = 1
    backoff: float = 1.0
    retry_on_exit: tuple[int, ...] = ()
    wait: bool = False  # `activity run`: submit, then wait

    def input(self) -> dict[str, Any]:
        """The activity workflow's input."""
        return {"name": self.name, "argv": list(self.argv), "attempts": self.attempts,
                "backoff": self.backoff, "retry_on_exit": list(self.retry_on_exit)}


@dataclass(frozen=True)
class ActivityWait:
    name: str | None  # None: --all


@dataclass(frozen=True)
class ChildRun:
    workflow: str
    input: Any = None
    wait: bool = True  # call (True) or spawn (False)


Command = (StepCmd | SleepCmd | WaitCmd | StateCmd | LockCmd | ActivitySubmit | ActivityWait
           | ChildRun)


def duration(text: str, what: str) -> float:
    """Seconds in `text` (`30s`, `5m`, `14d`, or a bare number of seconds)."""
    if _NUMBER.fullmatch(text):
        return float(text)
    try:
        return seconds(text, what)
    except (ValueError, TypeError) as exc:
        raise UsageError(f"{what}: {text!r} is not a duration (such as 30s, 5m, 14d)") from exc


@dataclass
class _Args:
    """Flags and positional words of one command, with its argv after `--`."""

    words: list[str] = field(default_factory=list)
    flags: dict[str, list[str]] = field(default_factory=dict)
    argv: tuple[str, ...] | None = None


def _split(cmd: str, args: Sequence[str], takes: Sequence[str], switches: Sequence[str] = (),
           repeat: Sequence[str] = ()) -> _Args:
    out = _Args()
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            out.argv = tuple(args[i + 1:])
            break
        if arg.startswith("--") and len(arg) > 2:
            flag, eq, inline = arg[2:].partition("=")
            if flag in switches and not eq:
                out.flags.setdefault(flag, []).append("")
            elif flag in takes:
                if eq:
                    value = inline
                elif i + 1 < len(args):
                    i += 1
                    value = args[i]
                else:
                    raise UsageError(f"{cmd}: --{flag} needs a value")
                if flag in out.flags and flag not in repeat:
                    raise UsageError(f"{cmd}: --{flag} is given twice")
                out.flags.setdefault(flag, []).append(value)
            else:
                known = ", ".join(f"--{f}" for f in (*takes, *switches)) or "none"
                raise UsageError(f"{cmd}: unknown flag {arg} (flags: {known})")
        else:
            out.words.append(arg)
        i += 1
    return out


def _one(a: _Args, flag: str) -> str | None:
    got = a.flags.get(flag)
    return None if not got else got[-1]


def _words(cmd: str, a: _Args, names: Sequence[str], optional: int = 0) -> list[str]:
    if not len(names) - optional <= len(a.words) <= len(names):
        want = " ".join(n if i < len(names) - optional else f"[{n}]"
                        for i, n in enumerate(names))
        raise UsageError(f"{cmd}: expected {want}, got {len(a.words)} word(s): "
                         f"{' '.join(a.words) or 'none'}")
    return a.words


def _command(cmd: str, a: _Args, required: bool) -> tuple[str, ...] | None:
    if a.argv is None:
        if required:
            raise UsageError(f"{cmd}: give the command to run after --")
        return None
    if not a.argv:
        raise UsageError(f"{cmd}: nothing to run after --")
    return a.argv


def _integer(text: str, what: str, low: int = 0) -> int:
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"{what}: {text!r} is not an integer") from None
    if value < low:
        raise UsageError(f"{what}: {value} is below {low}")
    return value


def parse(args: Sequence[str]) -> Command:
    """The command `args` (what follows `orchestrator`) asks for; UsageError if wrong."""
    if not args:
        raise UsageError(f"orchestrator: give a command ({', '.join(COMMANDS)})")
    head, rest = args[0], list(args[1:])
    if head == "step":
        a = _split("step", rest, ("label", "timeout"))
        (name,) = _words("step", a, ("NAME",))
        argv = _command("step", a, True)
        assert argv is not None
        limit = _one(a, "timeout")
        return StepCmd(name, argv, _one(a, "label"),
                       None if limit is None else duration(limit, "step --timeout"))
    if head == "sleep":
        a = _split("sleep", rest, ())
        (text,) = _words("sleep", a, ("DURATION",))
        return SleepCmd(duration(text, "sleep"))
    if head == "wait":
        a = _split("wait", rest, ("timeout",))
        kind, name = _words("wait", a, ("signal|event", "NAME"))
        if kind not in ("signal", "event"):
            raise UsageError(f"wait: waits for a signal or an event, not {kind!r}")
        limit = _one(a, "timeout")
        return WaitCmd(kind, name, None if limit is None else duration(limit, "wait --timeout"))
    if head == "state":
        return _state(rest)
    if head == "lock":
        a = _split("lock", rest, ())
        (key,) = _words("lock", a, ("KEY",))
        return LockCmd(key, _command("lock", a, False))
    if head == "activity":
        return _activity(rest)
    if head in ("call", "spawn"):
        a = _split(head, rest, ("input",))
        (wf,) = _words(head, a, ("WORKFLOW",))
        given = _one(a, "input")
        try:
            value = None if given is None else json.loads(given)
        except ValueError as exc:
            raise UsageError(f"{head}: --input is not JSON: {exc}") from None
        return ChildRun(wf, value, wait=head == "call")
    raise UsageError(f"orchestrator: unknown command {head!r} ({', '.join(COMMANDS)})")


def _state(rest: list[str]) -> StateCmd:
    if not rest or rest[0] not in STATE_ACTIONS:
        raise UsageError(f"state: give an action ({', '.join(STATE_ACTIONS)})")
    action = rest[0]
    cmd = f"state {action}"
    a = _split(cmd, rest[1:], ("entity", "op", "by") if action == "incr" else ("entity", "op"))
    entity = _one(a, "entity")
    if not entity:
        raise UsageError(f"{cmd}: --entity is required")
    value: str | None = None
    if action == "set":
        key, value = _words(cmd, a, ("KEY", "VALUE"))
    else:
        (key,) = _words(cmd, a, ("KEY",))
    by: int | float = 1
    text = _one(a, "by")
    if text is not None:
        try:
            by = int(text)
        except ValueError:
            try:
                by = float(text)
            except ValueError:
                raise UsageError(f"{cmd}: --by {text!r} is not a number") from None
    return StateCmd(action, key, entity, value, _one(a, "op"), by)


def _activity(rest: list[str]) -> ActivitySubmit | ActivityWait:
    if not rest or rest[0] not in ("submit", "run", "wait"):
        raise UsageError("activity: give an action (submit, run, wait)")
    action = rest[0]
    cmd = f"activity {action}"
    if action == "wait":
        a = _split(cmd, rest[1:], (), switches=("all",))
        if "all" in a.flags:
            _words(cmd, a, ())
            return ActivityWait(None)
        (name,) = _words(cmd, a, ("NAME",))
        return ActivityWait(name)
    a = _split(cmd, rest[1:], ("requires", "attempts", "backoff", "retry-on-exit"),
               repeat=("retry-on-exit",))
    (name,) = _words(cmd, a, ("NAME",))
    argv = _command(cmd, a, True)
    assert argv is not None
    attempts = _one(a, "attempts")
    backoff = _one(a, "backoff")
    return ActivitySubmit(
        name, argv, requires=_one(a, "requires") or "shell",
        attempts=1 if attempts is None else _integer(attempts, f"{cmd} --attempts", 1),
        backoff=1.0 if backoff is None else duration(backoff, f"{cmd} --backoff"),
        retry_on_exit=tuple(_integer(c, f"{cmd} --retry-on-exit", 1)
                            for c in a.flags.get("retry-on-exit", [])),
        wait=action == "run")
