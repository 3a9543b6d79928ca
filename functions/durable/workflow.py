"""`@workflow`: declare a durable workflow, and `advance`: run one call of it.

    @workflow("send-welcome-email", max_steps=100, execution_timeout="1h")
    async def send_welcome_email(ctx: Context, payload: dict) -> dict: ...

A call replays the journal it is given and stops at the frontier; what it reports is a
list of operations for the orchestrator to commit in order (see `call.py`). A failure
of the workflow (an exception that escapes it, a circuit breaker) is an operation too:
the HTTP answer is 200 whenever the call itself worked."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from functions.durable.call import Call, Scope, roundtrip
from functions.durable.context import Context
from functions.durable.durations import Duration, seconds
from functions.durable.errors import StepFailed, Suspend, WorkflowError
from functions.failures import TerminalError

__all__ = ["Workflow", "advance", "registered", "workflow"]

WorkflowFn = Callable[[Context, Any], Awaitable[Any]]

_REGISTRY: dict[str, Workflow] = {}


@dataclass(frozen=True)
class Workflow:
    name: str
    fn: WorkflowFn
    max_steps: int | None = None
    execution_timeout: float | None = None

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "maxSteps": self.max_steps,
                "executionTimeout": self.execution_timeout}


def workflow(name: str, *, max_steps: int | None = None,
             execution_timeout: Duration | None = None) -> Callable[[WorkflowFn], Workflow]:
    """Declare `async def fn(ctx, payload)` as the durable workflow `name`. `max_steps`
    caps its operations and `execution_timeout` its age: past either, the run ends
    `failed` (codes `max_steps_exceeded`, `execution_timeout`)."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"a workflow needs a non-empty name, got {name!r}")
    if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, int)
                                  or max_steps < 1):
        raise ValueError(f"max_steps must be a positive integer, got {max_steps!r}")
    limit = (None if execution_timeout is None
             else seconds(execution_timeout, "execution_timeout", allow_zero=False))

    def declare(fn: WorkflowFn) -> Workflow:
        wf = Workflow(name, fn, max_steps, limit)
        _REGISTRY[name] = wf
        return wf

    return declare


def registered() -> dict[str, Workflow]:
    """Every workflow declared so far, by name."""
    return dict(_REGISTRY)


async def advance(wf: Workflow, body: Mapping[str, Any]) -> dict[str, Any]:
    """One call of `wf`: `body` is the request (run, input, journal, target, attempts,
    mode); the answer is `{"ops": [...], "deadline": ...}`."""
    run = body.get("run") or {}
    started_at = float(run.get("started_at") or time.time())
    now = float(run.get("now") or time.time())
    call = Call.of(
        list(body.get("journal") or ()),
        run_id=str(run.get("run_id", "")),
        workflow=wf.name,
        started_at=started_at,
        now=now,
        target=str(body.get("target") or ""),
        attempts={str(k): int(v) for k, v in (body.get("attempts") or {}).items()},
        check=body.get("mode") == "check",
        subject=None if run.get("subject") is None else str(run["subject"]),
        max_value=None if run.get("max_value") is None else int(run["max_value"]),
        max_steps=wf.max_steps,
    )
    deadline = None if wf.execution_timeout is None else started_at + wf.execution_timeout
    answer: dict[str, Any] = {"ops": call.ops, "deadline": deadline}
    if deadline is not None and now >= deadline and not call.check:
        call.halt("execution_timeout",
                  f"the run is older than its execution_timeout of {wf.execution_timeout} s")
        return answer
    scope = Scope("", now=started_at, last_started=started_at)
    tokens = call.enter(scope)
    try:
        value = await wf.fn(Context(call), body.get("input"))
        if not call.halted:
            call.ops.append({"op": "complete", "value": roundtrip(
                value, "the workflow's result", call.max_value)})
    except Suspend:
        pass
    except StepFailed as exc:
        _fail(call, {"code": exc.code, "message": str(exc), "step": exc.step})
    except WorkflowError as exc:
        _fail(call, {"code": exc.code, "message": str(exc)})
    except TerminalError as exc:  # raised by the workflow's own code: its code stands
        error = {"code": exc.code, "message": exc.message}
        if exc.details is not None:
            error["details"] = exc.details
        _fail(call, error)
    except Exception as exc:
        _fail(call, {"code": "workflow_failed", "message": f"{type(exc).__name__}: {exc}"})
    finally:
        call.leave(tokens)
    return answer


def _fail(call: Call, error: dict[str, Any]) -> None:
    if not call.halted:
        call.ops.append({"op": "fail", "error": error})
        call.halted = True
