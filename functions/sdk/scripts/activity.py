"""The activity workflow (`POST /durable/activity`): one command run with retries, for a
script's `orchestrator activity submit|run`. The script spawns it as a child run of
`activity.<capability>` (the orchestrator picks a backend with that capability) whose end
signals the script's run back (`notify`).

Input: `{name, argv, attempts, backoff, retry_on_exit}`. One step named `name` runs `argv`
(no shell) up to `attempts` times in all, waiting `backoff` seconds, doubled after each
failure; with `retry_on_exit` only those exit statuses are tried again (any other
non-zero exit fails at once). Output `{stdout, stderr, exit_code}`; a final failure fails
the run with `{stdout, stderr, exit_code}` in the error's details."""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

from functions.sdk.durable.context import Context
from functions.sdk.durable.errors import StepFailed
from functions.sdk.durable.steps import StepCall, StepOptions
from functions.sdk.durable.workflow import Workflow
from functions.sdk.failures import RetryableError, TerminalError
from functions.sdk.scripts.operations import last_line, run_command

__all__ = ["ACTIVITY", "activity_workflow"]

ACTIVITY = "activity"


def _input(payload: Any) -> tuple[str, list[str], int, float, set[int]]:
    if not isinstance(payload, dict):
        raise TerminalError("an activity's input is {name, argv, attempts, backoff,"
                            f" retry_on_exit}}, got {payload!r}", code="invalid_input")
    name, argv = payload.get("name"), payload.get("argv")
    if not isinstance(name, str) or not name:
        raise TerminalError("an activity needs a name", code="invalid_input")
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise TerminalError(f"activity {name!r}: argv is a non-empty list of strings",
                            code="invalid_input")
    attempts = int(payload.get("attempts") or 1)
    backoff = float(payload.get("backoff") or 0.0)
    retry = {int(c) for c in payload.get("retry_on_exit") or []}
    return name, argv, max(1, attempts), max(0.0, backoff), retry


async def activity(ctx: Context, payload: Any) -> dict[str, Any]:
    name, argv, attempts, backoff, retry = _input(payload)

    async def body() -> dict[str, Any]:
        work = tempfile.mkdtemp(prefix="orchestrator-activity-")
        env = {**os.environ, "ORCHESTRATOR_IDEMPOTENCY_KEY": ctx.idempotency_key,
               "ORCHESTRATOR_RUN_ID": ctx.run_id}
        try:
            outcome = await run_command(argv, work, env)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        code = outcome["exit_code"]
        if code == 0:
            return outcome
        message = f"exit {code}: {last_line(outcome['stderr'])}"
        if ctx.attempt < attempts and (not retry or code in retry):
            raise RetryableError(message, code="exit_status", details=outcome,
                                 retry_after=backoff * 2 ** (ctx.attempt - 1))
        raise TerminalError(message, code="exit_status", details=outcome)

    try:
        value: dict[str, Any] = await StepCall(name, body,
                                               options=StepOptions(retries=attempts - 1))
    except StepFailed as exc:
        raise TerminalError(str(exc.error.get("message", exc)), code=exc.code,
                            details=exc.details) from None
    return value


def activity_workflow() -> Workflow:
    """The activity workflow, as a FunctionApp serves it."""
    return Workflow(ACTIVITY, activity)
