"""The plain step route `POST /run` for a YAML workflow's `run:` steps: the step's payload
field `command` runs as `bash -eu -c "$command"` in a fresh directory, the run's input
in the file at `ORCHESTRATOR_INPUT_FILE` (`{"payload": <input>}`). Exit 0 answers
`{stdout, stderr, exit_code: 0}`; any other exit is a RetryableError (503) `exit N: <the
last line on stderr>` with `{stdout, stderr, exit_code}` in its details, so the step's
`retry:` applies (a `run:` step that declares none is not retried: its definition's
retries are 0 then, as a reference pipeline's job without `retry:`)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from functions.sdk.failures import RetryableError, TerminalError
from functions.sdk.request import StepRequest
from functions.sdk.scripts.operations import last_line, run_command

__all__ = ["RUN_ROUTE", "run_step"]

RUN_ROUTE = "/run"


async def run_step(req: StepRequest) -> dict[str, Any]:
    """Run the step's `command` with bash (exit 0: its output; else a failure its
    step's `retry:` may retry)."""
    command = req.payload.get("command")
    if not isinstance(command, str) or not command.strip():
        raise TerminalError(f"step {req.step!r}: the payload's `command` is the shell text to"
                            f" run, got {command!r}", code="invalid_payload")
    work = Path(tempfile.mkdtemp(prefix="orchestrator-run-"))
    try:
        (work / ".input.json").write_text(json.dumps({"payload": req.input}))
        env = {**os.environ, "ORCHESTRATOR_INPUT_FILE": str(work / ".input.json"),
               "ORCHESTRATOR_RUN_ID": req.run_id}
        if req.idempotency_key:
            env["ORCHESTRATOR_IDEMPOTENCY_KEY"] = req.idempotency_key
        outcome = await run_command(["bash", "-eu", "-c", command], str(work), env)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if outcome["exit_code"] != 0:
        raise RetryableError(f"exit {outcome['exit_code']}: {last_line(outcome['stderr'])}",
                             code="exit_status", details=outcome)
    return outcome
