"""Each in-script command answered with the Python SDK's own operation: `step` is a step,
`sleep` is `ctx.sleep`, `wait` is `ctx.wait_for_signal` / `ctx.wait_for_event`, `state` is
`ctx.state`, `lock` is `ctx.lock`, `call` and `spawn` are child runs, and `activity` is a
spawned child run of `activity.<capability>` that signals its end back. So the journal,
the checkpoints, replay and the mismatch check are the SDK's; this module only turns a
command into an operation, and the operation's outcome into an exit status, stdout and
stderr.

A step runs its command (argv, no shell) in the script's working directory with the
script's exported environment and `ORCHESTRATOR_IDEMPOTENCY_KEY`, once: its outcome
`{stdout, stderr, exit_code}` (and label) is recorded, a non-zero exit as the step's
failure (never retried), and every replay prints the same output and exits with the same
status."""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from functions.sdk.durable.call import current
from functions.sdk.durable.context import Context
from functions.sdk.durable.errors import StepFailed, WorkflowError
from functions.sdk.durable.steps import StepCall, StepOptions
from functions.sdk.failures import TerminalError
from functions.sdk.scripts.channel import Answer, Channel, Request
from functions.sdk.scripts.commands import (
    ActivitySubmit,
    ActivityWait,
    ChildRun,
    Command,
    LockCmd,
    SleepCmd,
    StateCmd,
    StepCmd,
    UsageError,
    WaitCmd,
    parse,
)
from functions.sdk.scripts.processes import exited, kill_group

__all__ = ["Operations", "run_command", "text_of"]

# A step is tried once: a failed command is the step's recorded failure.
_ONCE = StepOptions(retries=0)


def text_of(value: Any) -> str:
    """A value as a script prints it: a string as is, anything else as JSON; a line."""
    if value is None:
        return ""
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    return text if text.endswith("\n") else text + "\n"


def last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


# The exit status of a command killed at its timeout (as timeout(1) answers).
TIMED_OUT = 124


async def run_command(argv: list[str] | tuple[str, ...], cwd: str, env: dict[str, str],
                      timeout: float | None = None) -> dict[str, Any]:
    """Run `argv` (no shell) to its end, or until `timeout` seconds pass (then its group
    is killed and it exits TIMED_OUT): `{stdout, stderr, exit_code}`."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, cwd=cwd, env=env, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            start_new_session=True)
    except FileNotFoundError:
        return {"stdout": "", "stderr": f"{argv[0]}: command not found\n", "exit_code": 127}
    except PermissionError:
        return {"stdout": "", "stderr": f"{argv[0]}: permission denied\n", "exit_code": 126}
    talk = asyncio.ensure_future(proc.communicate())
    try:
        # Its output once its pipes close; if it ends first, leaving a background job
        # that holds them, that job is killed with its group and the pipes close.
        _, pending = await asyncio.wait({talk, asyncio.ensure_future(exited(proc))},
                                        timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        late = len(pending) == 2  # neither its end nor its pipes' before the timeout
        if not talk.done():
            kill_group(proc.pid)
        out, err = await talk
    finally:
        if proc.returncode is None:
            kill_group(proc.pid)
            await proc.wait()
    code = 1 if proc.returncode is None else proc.returncode
    code = code if code >= 0 else 128 - code
    text = err.decode("utf-8", "replace")
    if late:
        code, text = TIMED_OUT, text + f"{argv[0]}: timed out after {timeout:g}s\n"
    return {"stdout": out.decode("utf-8", "replace"), "stderr": text, "exit_code": code}


@dataclass
class Operations:
    """The answers of one pass of a script (one call): what it submitted as activities
    and waited for so far in this pass (a pass replays from the top, so this is rebuilt
    the same way on every pass)."""

    ctx: Context
    channel: Channel
    base_env: dict[str, str]
    submitted: list[str] = field(default_factory=list)
    waited: set[str] = field(default_factory=set)

    async def answer(self, req: Request) -> Answer:
        """The answer to one request. Suspend (the run must wait) passes through."""
        try:
            cmd = parse(req.args)
        except UsageError as exc:
            return Answer(2, "", f"orchestrator {exc}\n")
        try:
            return await self._answer(cmd, req)
        except UsageError as exc:
            return Answer(2, "", f"orchestrator {exc}\n")
        except WorkflowError as exc:
            return Answer(1, "", f"orchestrator {req.args[0]}: {exc.code}: {exc}\n")

    async def _answer(self, cmd: Command, req: Request) -> Answer:
        ctx = self.ctx
        if isinstance(cmd, StepCmd):
            return await self._step(cmd.name, cmd.argv, cmd.label, req, cmd.timeout)
        if isinstance(cmd, SleepCmd):
            await ctx.sleep(timedelta(seconds=cmd.seconds))
            return Answer(0)
        if isinstance(cmd, WaitCmd):
            return await self._wait(cmd)
        if isinstance(cmd, StateCmd):
            return await self._state(cmd)
        if isinstance(cmd, LockCmd):
            if cmd.argv is None:
                await ctx.lock(cmd.key)
                return Answer(0)
            async with ctx.lock(cmd.key):
                return await self._step(cmd.key, cmd.argv, None, req)
        if isinstance(cmd, ActivitySubmit):
            return await self._submit(cmd)
        if isinstance(cmd, ActivityWait):
            return await self._collect(cmd)
        assert isinstance(cmd, ChildRun)
        if not cmd.wait:
            return Answer(0, text_of(await ctx.spawn(cmd.workflow, cmd.input)))
        try:
            output = await ctx.call(cmd.workflow, cmd.input)
        except StepFailed as exc:
            return Answer(1, "", f"orchestrator call {cmd.workflow}: the child run failed:"
                                 f" {exc.error.get('message', exc.code)}\n")
        return Answer(0, json.dumps(output, separators=(",", ":")) + "\n")

    async def _step(self, name: str, argv: tuple[str, ...], label: str | None,
                    req: Request, timeout: float | None = None) -> Answer:
        env = dict(self.base_env if req.env is None else req.env)
        cwd = req.cwd if os.path.isdir(req.cwd) else os.getcwd()

        async def body() -> dict[str, Any]:
            env["ORCHESTRATOR_IDEMPOTENCY_KEY"] = self.ctx.idempotency_key
            self.channel.busy = name
            try:
                outcome = await run_command(argv, cwd, env, timeout)
            finally:
                self.channel.busy = None
            if label is not None:
                outcome["label"] = label
            if outcome["exit_code"] != 0:
                raise TerminalError(f"exit {outcome['exit_code']}: "
                                    f"{last_line(outcome['stderr'])}",
                                    code="exit_status", details=outcome)
            return outcome

        try:
            value = await StepCall(name, body, options=_ONCE, label=label)
        except StepFailed as exc:
            details = exc.details if isinstance(exc.details, dict) else {}
            if "exit_code" not in details:  # output_too_large, a misuse: no exit status
                return Answer(1, "", f"orchestrator step {name}: {exc.code}: "
                                     f"{exc.error.get('message', '')}\n")
            return Answer(int(details["exit_code"]), str(details.get("stdout", "")),
                          str(details.get("stderr", "")))
        return Answer(int(value.get("exit_code", 0)), str(value.get("stdout", "")),
                      str(value.get("stderr", "")))

    async def _wait(self, cmd: WaitCmd) -> Answer:
        limit = None if cmd.timeout is None else timedelta(seconds=cmd.timeout)
        if cmd.kind == "signal":
            value = await self.ctx.wait_for_signal(cmd.name, timeout=limit)
        else:
            value = await self.ctx.wait_for_event(cmd.name, timeout=limit)
        if limit is not None and _timed_out():
            return Answer(1, "", f"orchestrator wait {cmd.kind} {cmd.name}: timed out after"
                                 f" {_span(cmd.timeout or 0.0)}\n")
        if cmd.kind == "event" and isinstance(value, dict):
            value = value.get("data")
        return Answer(0, text_of(value))

    async def _state(self, cmd: StateCmd) -> Answer:
        state = self.ctx.state
        if cmd.action == "add":
            won = await state.add(cmd.key, entity=cmd.entity, name=cmd.op)
            return Answer(0 if won else 3)  # 3: already claimed (the script decides)
        if cmd.action == "incr":
            return Answer(0, text_of(await state.incr(cmd.key, entity=cmd.entity, by=cmd.by,
                                                      name=cmd.op)))
        if cmd.action == "get":
            return Answer(0, text_of(await state.get(cmd.key, entity=cmd.entity, name=cmd.op)))
        await state.set(cmd.key, cmd.value, entity=cmd.entity, name=cmd.op)
        return Answer(0)

    async def _submit(self, cmd: ActivitySubmit) -> Answer:
        if cmd.name in self.submitted:
            raise UsageError(f"activity submit: an activity named {cmd.name!r} was already"
                             " submitted in this run: names are unique within a run")
        self.submitted.append(cmd.name)
        await self.ctx.spawn(f"activity.{cmd.requires}", cmd.input(),
                             name=f"activity:{cmd.name}", notify=f"activity:{cmd.name}")
        if not cmd.wait:
            return Answer(0)
        return await self._collect(ActivityWait(cmd.name))

    async def _collect(self, cmd: ActivityWait) -> Answer:
        if cmd.name is None:
            failed = 0
            out, err = [], []
            for name in [n for n in self.submitted if n not in self.waited]:
                got = await self._collect(ActivityWait(name))
                out.append(got.stdout)
                err.append(got.stderr)
                failed += got.code != 0
            if failed:
                err.append(f"orchestrator activity wait --all: {failed} activit"
                           f"{'y' if failed == 1 else 'ies'} failed\n")
            return Answer(1 if failed else 0, "".join(out), "".join(err))
        if cmd.name not in self.submitted:
            raise UsageError(f"activity wait: no activity named {cmd.name!r} was submitted"
                             " in this run")
        if cmd.name in self.waited:
            raise UsageError(f"activity wait: activity {cmd.name!r} was already waited for")
        self.waited.add(cmd.name)
        outcome = await self.ctx.wait_for_signal(f"activity:{cmd.name}")
        return _activity_answer(cmd.name, outcome if isinstance(outcome, dict) else {})


def _activity_answer(name: str, outcome: dict[str, Any]) -> Answer:
    if outcome.get("status") == "success":
        output = outcome.get("output") or {}
        return Answer(0, str(output.get("stdout", "")), str(output.get("stderr", "")))
    error = outcome.get("error") or {}
    found = error.get("details")
    details: dict[str, Any] = found if isinstance(found, dict) else {}
    code = details.get("exit_code")
    err = str(details.get("stderr", ""))
    err += (f"orchestrator activity {name}: {outcome.get('status', 'failed')}: "
            f"{error.get('message', '')}\n")
    return Answer(int(code) if isinstance(code, int) and code > 0 else 1,
                  str(details.get("stdout", "")), err)


def _span(seconds: float) -> str:
    """A duration as a person writes it: 2d, 1h30m, 45s, 1.5s."""
    if seconds < 60 and seconds != int(seconds):
        return f"{seconds:g}s"
    left, out = int(seconds), ""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if left >= size:
            out += f"{left // size}{unit}"
            left %= size
    return out or "0s"


def _timed_out() -> bool:
    """Whether the wait that just returned ended by its timeout (its entry says so)."""
    call, scope = current()
    rec = call.journal.get((scope.id, scope.pos - 1))
    return rec is not None and rec.status == "timeout"
