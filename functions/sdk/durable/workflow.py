"""`@workflow`: declare a durable workflow, and `advance`: run one call of it.

    @workflow("send-welcome-email", max_steps=100, execution_timeout="1h")
    async def send_welcome_email(ctx: Context, payload: dict) -> dict: ...

A call replays the journal it is given and runs on from the frontier as its protocol
version allows (see `call.py`); what it reports is a sequence of operations for the
orchestrator to commit in order: one answer (version 1), or a stream (version 2). A failure
of the workflow (an exception that escapes it, a circuit breaker) is an operation too:
the HTTP answer is 200 whenever the call itself worked."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from functions.sdk.durable.call import Call, Scope, roundtrip
from functions.sdk.durable.context import Context
from functions.sdk.durable.debugging import Stops
from functions.sdk.durable.durations import Duration, seconds
from functions.sdk.durable.errors import StepFailed, Suspend, WorkflowError
from functions.sdk.failures import TerminalError
from functions.sdk.protocol import (
    PROTOCOLS,
    CompleteOp,
    DurableCode,
    DurableOp,
    DurableRequestBody,
)

__all__ = ["Workflow", "advance", "op_doc", "play", "registered", "request_of", "start",
           "workflow"]

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
                "executionTimeout": self.execution_timeout, "protocols": list(PROTOCOLS)}


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


def op_doc(op: DurableOp) -> dict[str, Any]:
    """An operation as JSON: what was given, with its `op` first."""
    return {"op": op.op.value, **op.model_dump(mode="json", exclude_unset=True)}


def request_of(body: Mapping[str, Any] | DurableRequestBody) -> DurableRequestBody:
    """The request as its model; a mapping built in process (a test, a golden check) may
    leave out the run's times, which are then now."""
    if isinstance(body, DurableRequestBody):
        return body
    run = dict(body.get("run") or {})
    now = time.time()
    run.setdefault("started_at", run.get("now") or now)
    run.setdefault("now", now)
    return DurableRequestBody.model_validate({**body, "run": run})


def start(wf: Workflow, req: DurableRequestBody, protocol: int,
          sink: Callable[[DurableOp], None] | None = None,
          present: Callable[[], bool] | None = None) -> tuple[Call, float | None]:
    """The call `req` asks for, answered in `protocol`, and the run's deadline.
    `present()` says whether the caller is still there (a streamed call)."""
    run = req.run
    call = Call.of(
        list(req.journal),
        run_id=run.run_id,
        workflow=wf.name,
        started_at=run.started_at,
        now=run.now,
        target=req.target,
        attempts=dict(req.attempts),
        check=req.mode in ("check", "replay"),
        debug=Stops(req.break_at) if req.mode == "replay" else None,
        subject=run.subject,
        max_value=run.max_value,
        max_steps=wf.max_steps,
        protocol=protocol,
        until=None if req.budget is None else time.monotonic() + req.budget,
        sink=sink,
        present=present,
        script=req.script,
    )
    deadline = None if wf.execution_timeout is None else run.started_at + wf.execution_timeout
    return call, deadline


async def play(wf: Workflow, call: Call, payload: Any, deadline: float | None) -> None:
    """Run the workflow from the top in `call`; what it reports goes to the call's sink."""
    if deadline is not None and call.now >= deadline and not call.check:
        call.halt(DurableCode.EXECUTION_TIMEOUT,
                  f"the run is older than its execution_timeout of {wf.execution_timeout} s")
        return
    scope = Scope("", now=call.started_at, last_started=call.started_at)
    tokens = call.enter(scope)
    try:
        value = await wf.fn(Context(call), payload)
        if not call.halted:
            call.emit(CompleteOp(value=roundtrip(value, "the workflow's result", call.max_value)))
    except Suspend:
        pass
    except StepFailed as exc:
        call.fail({"code": exc.code, "message": str(exc), "step": exc.step})
    except WorkflowError as exc:
        call.fail({"code": exc.code, "message": str(exc)})
    except TerminalError as exc:  # raised by the workflow's own code: its code stands
        error = {"code": exc.code, "message": exc.message}
        if exc.details is not None:
            error["details"] = exc.details
        call.fail(error)
    except Exception as exc:
        call.fail({"code": DurableCode.WORKFLOW_FAILED, "message": f"{type(exc).__name__}: {exc}"})
    finally:
        call.leave(tokens)


async def advance(wf: Workflow, body: Mapping[str, Any] | DurableRequestBody,
                  protocol: int | None = None) -> dict[str, Any]:
    """One call of `wf`, every operation in one answer `{"ops": [...], "deadline": ...}`
    (mode replay: and `stops`, where it stopped in the debugger: debugging.py).
    `body` is the request (run, input, journal, target, attempts, mode, break_at);
    `protocol` the version whose rules the call follows (default: the one the body asks
    for)."""
    req = request_of(body)
    version = min(req.protocol if protocol is None else protocol, max(PROTOCOLS))
    call, deadline = start(wf, req, version)
    await play(wf, call, req.input, deadline)
    answer: dict[str, Any] = {"ops": [op_doc(op) for op in call.ops], "deadline": deadline}
    if call.debug is not None:
        answer["stops"] = call.debug.stops
    return answer
