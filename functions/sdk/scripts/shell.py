"""The plain step route `POST /run` for a YAML workflow's `run:` steps: the step's payload
field `command` runs as `bash -eu -c "$command"` in a fresh directory, the run's input
in the file at `ORCHESTRATOR_INPUT_FILE` (`{"payload": <input>}`). Exit 0 answers
`{stdout, stderr, exit_code: 0}`; any other exit is a RetryableError (503) `exit N: <the
last line on stderr>` with `{stdout, stderr, exit_code}` in its details, so the step's
`retry:` applies (a `run:` step that declares none is not retried: its definition's
retries are 0 then, as a reference pipeline's job without `retry:`)."""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from functions.sdk.failures import RetryableError, TerminalError
from functions.sdk.request import StepRequest
from functions.sdk.scripts.operations import last_line, run_command
from functions.sdk.scripts.processes import environment

__all__ = ["RUN_ROUTE", "run_step"]

RUN_ROUTE = "/run"


_VALUE = re.compile(r"ORCHESTRATOR_VALUE_[0-9]{1,4}")


def _values(given: Any) -> dict[str, str]:
    """The command's `${{ }}` holes, bound by the orchestrator to variables
    `ORCHESTRATOR_VALUE_<n>` (their values never become shell code); others refused."""
    if given is None:
        return {}
    if not isinstance(given, dict) or not all(
            isinstance(k, str) and _VALUE.fullmatch(k) and isinstance(v, str)
            for k, v in given.items()):
        raise TerminalError("the payload's `values` are {ORCHESTRATOR_VALUE_<n>: text}",
                            code="invalid_payload")
    return dict(given)


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
        env = {**environment(), **_values(req.payload.get("values")),
               "ORCHESTRATOR_INPUT_FILE": str(work / ".input.json"),
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
