"""The dashboard's actions (form posts), each through the service the API's own route
calls, so each is checked exactly as the API checks it. A bad field or a refused action
comes back to the page it was sent from with the reason (`problem=`), and changes
nothing; a done one with what it did (`done=`), or on the run it started."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from orchestrator.api.state import api_state
from orchestrator.api.ui.session import who
from orchestrator.errors import OrchestratorError, UsageError

__all__ = ["answer", "cancel", "emit", "execute_hook", "redrive", "rerun", "reset", "resume",
           "schedule", "signal", "start"]

NOTHING = object()


def _json_field(form: Any, name: str, *, blank: Any = NOTHING) -> Any:
    raw = str(form.get(name) or "").strip()
    if not raw:
        if blank is NOTHING:
            raise UsageError(f"{name}: required (JSON)")
        return blank
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise UsageError(f"{name}: not JSON ({exc.args[0]})") from None


def _back(path: str, **message: str) -> Response:
    return RedirectResponse(f"{path}?{urlencode(message)}", status_code=303)


async def _act(request: Request, back: str, do: Callable[[Any, Any], str | Response]) -> Response:
    """Run `do(rt, form)` in a thread; its text is the message shown on `back`, a
    response (a run it started) is followed; a refusal comes back as the problem."""
    rt = api_state(request).rt
    form = await request.form()
    try:
        result = await run_in_threadpool(do, rt, form)
    except OrchestratorError as exc:  # a refusal, a 410 hook included
        return _back(back, problem=exc.message)
    return result if isinstance(result, Response) else _back(back, done=result)


def _run_back(request: Request) -> str:
    return f"/ui/runs/{request.path_params['run_id']}"


async def cancel(request: Request) -> Response:
    run_id = request.path_params["run_id"]

    def do(rt: Any, form: Any) -> str:
        reason = str(form.get("reason") or "").strip() or "cancelled from the dashboard"
        if len(reason) > 1000:
            raise UsageError("reason: at most 1000 characters")
        rt.runs.kill(run_id, reason)
        return f"cancelled: {reason}"

    return await _act(request, _run_back(request), do)


async def rerun(request: Request) -> Response:
    run_id = request.path_params["run_id"]

    def do(rt: Any, form: Any) -> Response:
        kwargs: dict[str, Any] = {}
        if form.get("edit") == "on":
            kwargs["input"] = _json_field(form, "input", blank=None)
        run, _ = rt.runs.rerun(run_id, **kwargs)
        return RedirectResponse(f"/ui/runs/{run.run_id}?done=rerun+of+{run_id}",
                                status_code=303)

    return await _act(request, _run_back(request), do)


async def start(request: Request) -> Response:
    workflow = request.path_params["workflow"]

    def do(rt: Any, form: Any) -> Response:
        payload = _json_field(form, "input", blank=None)
        run, _ = rt.runs.start(workflow, payload, None,
                               trigger={"source": "api", "via": "dashboard"})
        return RedirectResponse(f"/ui/runs/{run.run_id}?done=started", status_code=303)

    return await _act(request, "/ui/workflows", do)


async def signal(request: Request) -> Response:
    run_id = request.path_params["run_id"]

    def do(rt: Any, form: Any) -> str:
        name = str(form.get("name") or "").strip()
        if not name:
            raise UsageError("signal: a name is required")
        payload = _json_field(form, "payload", blank={})
        if not isinstance(payload, dict):
            raise UsageError("payload: a signal's payload is a JSON object")
        rt.signals.send(run_id, name, payload, None)
        return f"signal {name} sent"

    return await _act(request, _run_back(request), do)


async def execute_hook(request: Request) -> Response:
    run_id, op = request.path_params["run_id"], request.path_params["op"]

    def do(rt: Any, form: Any) -> str:
        payload = _json_field(form, "payload", blank={})
        if not isinstance(payload, dict):
            raise UsageError("payload: a hook's payload is a JSON object")
        rt.hooks.execute(rt.hooks.token_for(run_id, op), payload)
        return "hook executed"

    return await _act(request, _run_back(request), do)


async def resume(request: Request) -> Response:
    run_id = request.path_params["run_id"]

    def do(rt: Any, form: Any) -> str:
        rt.durable.resume(run_id)
        return "resumed"

    return await _act(request, _run_back(request), do)


async def reset(request: Request) -> Response:
    run_id = request.path_params["run_id"]

    def do(rt: Any, form: Any) -> str:
        try:
            to = int(str(form.get("to") or ""))
        except ValueError:
            raise UsageError("to: a position (0 or more)") from None
        rt.durable.reset(run_id, to)
        return f"reset to position {to}"

    return await _act(request, _run_back(request), do)


async def schedule(request: Request) -> Response:
    name, action = request.path_params["workflow"], request.path_params["action"]

    def do(rt: Any, form: Any) -> str:
        if action not in ("pause", "resume", "trigger"):
            raise UsageError(f"schedule: no action {action!r}")
        getattr(rt.scheduler, action)(name)
        return f"schedule of {name}: {action}"

    return await _act(request, "/ui/workflows", do)


async def emit(request: Request) -> Response:
    def do(rt: Any, form: Any) -> str:
        name = str(form.get("name") or "").strip()
        if not name:
            raise UsageError("event: a name is required")
        data = _json_field(form, "data", blank={})
        key = str(form.get("key") or "").strip() or None
        result = rt.events.emit(name, data, key=key, event_id=None)
        started = result.get("runs") or []
        return f"event {name} stored; runs started: {len(started)}"

    return await _act(request, "/ui/events", do)


async def redrive(request: Request) -> Response:
    letters = request.app.state.ui.dead_letters

    def do(rt: Any, form: Any) -> str:
        only = form.getlist("message")
        moved = letters.redrive(set(map(str, only)) if only else None)
        return f"{moved} message(s) sent back to the dispatch queue"

    return await _act(request, "/ui/dlq", do)


async def answer(request: Request) -> Response:
    run_id, step = request.path_params["run_id"], request.path_params["step"]
    name = await run_in_threadpool(who, request)

    def do(rt: Any, form: Any) -> str:
        decision = str(form.get("decision") or "")
        if decision not in ("approve", "reject"):
            raise UsageError("decision: approve or reject")
        comment = str(form.get("comment") or "").strip() or None
        rt.approvals.answer(run_id, step, decision == "approve", comment, name)
        return f"{step} of {run_id} {decision}d"

    return await _act(request, "/ui/approvals", do)
