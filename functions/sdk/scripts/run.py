"""One call of a durable shell script: the generic workflow body that runs the script.

1. The script's text is found (`texts.py`) and its hash is the run's first operation (an
   entry of kind `script` named after the SHA-256): replaying a run on a changed text is
   the SDK's replay mismatch, and the run pauses.
2. `bash -eu <script>` starts in its own process group, in a fresh working directory,
   with the host's environment plus `ORCHESTRATOR_INPUT_FILE` (`{"payload": <input>}`),
   `ORCHESTRATOR_RUN_ID`, the channel's port and token, and `BASH_ENV` (the shim). Its
   stdout and stderr share one pipe, so the log keeps their order.
3. Each command the script sends over the channel is answered here, in this task (the
   SDK's operations rely on its context), one at a time (`operations.py`).
4. When the run must wait (the SDK raises Suspend), or the call ends any other way, the
   whole process group is killed. A script that exits 0 returns `{exit_code: 0, log}`;
   any other exit fails the run with `script exited N` and `{exit_code, log}`. The pass
   after a suspension replays from the top and recorded steps print again, so the last
   pass's log is the whole run's."""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from functions.sdk.durable.call import current
from functions.sdk.durable.context import Context
from functions.sdk.failures import TerminalError
from functions.sdk.scripts.channel import Channel
from functions.sdk.scripts.operations import Operations
from functions.sdk.scripts.processes import environment, kill_group
from functions.sdk.scripts.processes import exited as ended
from functions.sdk.scripts.shim import SHIM
from functions.sdk.scripts.texts import Script, Texts

__all__ = ["record_script", "run_script"]

# Variables the host sets for the script (anything inherited of these names is replaced).
INPUT_FILE = "ORCHESTRATOR_INPUT_FILE"
RUN_ID = "ORCHESTRATOR_RUN_ID"
PORT = "ORCHESTRATOR_CHANNEL_PORT"
TOKEN = "ORCHESTRATOR_CHANNEL_TOKEN"
IDEMPOTENCY_KEY = "ORCHESTRATOR_IDEMPOTENCY_KEY"
# How long the log may still flow once bash has exited (a background child holding the
# pipe is killed with the group first, so this is a bound, not a wait).
DRAIN = 5.0


def record_script(script: Script) -> None:
    """The run's first operation: the hash of the text it runs. Recorded on the first
    call; on a replay, a different hash is a mismatch (the call stops, the run pauses)."""
    call, scope = current()
    place = call.place(scope, "script", script.sha256)
    if call.recorded(place) is None and not call.check:
        call.record(scope, place.entry(status="ok", value={"script": script.name},
                                       started=scope.now, ended=scope.now))


async def run_script(ctx: Context, name: str, payload: Any, texts: Texts) -> dict[str, Any]:
    """Run workflow `name`'s script for one call of its run (see the module docstring)."""
    call, _ = current()
    script = await texts.get(name, call.script)
    record_script(script)
    work = Path(tempfile.mkdtemp(prefix="orchestrator-script-"))
    channel = Channel()
    proc: asyncio.subprocess.Process | None = None
    reader: asyncio.Task[bytes] | None = None
    try:
        private = work / ".orchestrator"
        private.mkdir()
        (private / "script.sh").write_text(script.text)
        (private / "shim.sh").write_text(SHIM)
        (private / "input.json").write_text(json.dumps({"payload": payload}))
        port = await channel.open()
        env = environment(drop=(IDEMPOTENCY_KEY,))
        env.update({INPUT_FILE: str(private / "input.json"), RUN_ID: ctx.run_id,
                    PORT: str(port), TOKEN: channel.token,
                    "BASH_ENV": str(private / "shim.sh")})
        proc = await asyncio.create_subprocess_exec(
            "bash", "-eu", str(private / "script.sh"), cwd=str(work), env=env,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, start_new_session=True)
        assert proc.stdout is not None
        reader = asyncio.ensure_future(proc.stdout.read())
        ops = Operations(ctx, channel, env)
        # Its end, not its pipes' (a background job it left may hold them).
        exited = asyncio.ensure_future(ended(proc))
        try:
            while True:
                asked = asyncio.ensure_future(channel.requests.get())
                await asyncio.wait({asked, exited}, return_when=asyncio.FIRST_COMPLETED)
                if not asked.done():
                    asked.cancel()
                    break
                req = asked.result()
                # Suspend (the run waits) or the call's end passes through: the
                # channel's close answers the request, and the process group dies.
                answer = await ops.answer(req)
                if not req.answer.done():
                    req.answer.set_result(answer)
        finally:
            if not exited.done():
                exited.cancel()
        code = proc.returncode if proc.returncode is not None else 1
        code = code if code >= 0 else 128 - code
    finally:
        channel.close()
        if proc is not None:
            kill_group(proc.pid)
            if proc.returncode is None:
                await proc.wait()
        log = ""
        if reader is not None:
            try:
                log = (await asyncio.wait_for(reader, DRAIN)).decode("utf-8", "replace")
            except (TimeoutError, asyncio.CancelledError):
                reader.cancel()
        shutil.rmtree(work, ignore_errors=True)
    if code != 0:
        raise TerminalError(f"script exited {code}", code="script_failed",
                            details={"exit_code": code, "log": log})
    return {"exit_code": 0, "log": log}

