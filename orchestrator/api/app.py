"""The HTTP API (Starlette): runs, events, webhooks and schedules.

Every error is JSON `{"error": {"code", "message"}}` with a 4xx status for bad input;
a body is size-checked before it is parsed (requests.py, strict_json.py). Every route
but `/healthz`, `/openapi.json` and `/webhooks/{name}` (which checks its own signature)
wants `Authorization: Bearer <key>` (keys from `orchestrator keys create`), unless
ORCH_API_AUTH=off."""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from orchestrator import __version__
from orchestrator.api.models import (
    CancelRun,
    CreateHook,
    EmitEvent,
    RerunRun,
    ResetRun,
    ResumeRun,
    RunEvent,
    StartRun,
)
from orchestrator.api.openapi import openapi_document
from orchestrator.api.requests import (
    MAX_BODY,
    TooLarge,
    error,
    read_body,
    read_json,
    read_object,
    validated,
)
from orchestrator.engine.states import RunStatus
from orchestrator.errors import (
    Code,
    ConditionFailed,
    Conflict,
    NotFound,
    OrchestratorError,
    Unauthorized,
    Unprocessable,
    UsageError,
)
from orchestrator.runtime import Runtime
from orchestrator.services.apikeys import ApiKeys
from orchestrator.services.events import MAX_EVENT_BYTES
from orchestrator.services.hooks import Gone
from orchestrator.services.idempotency import IdempotencyKeys

__all__ = ["create_app"]

OPEN_PATHS = ("/healthz", "/openapi.json", "/hooks/{token}")
KEY_CACHE_SECONDS = 30.0
# The attributes a listing's LastEvaluatedKey can hold (table and index keys).
CURSOR_KEYS = frozenset({"run_id", "workflow", "created_at", "listed"})
Handler = Callable[[Request], Awaitable[Response]]


def _cursor(last: dict[str, Any] | None) -> str | None:
    return base64.urlsafe_b64encode(json.dumps(last).encode()).decode() if last else None


def _uncursor(cursor: str | None) -> dict[str, Any] | None:
    if not cursor:
        return None
    try:
        start = json.loads(base64.urlsafe_b64decode(cursor.encode()))
    except (ValueError, binascii.Error):
        start = None
    if not isinstance(start, dict) or not set(start) <= CURSOR_KEYS or not all(
        isinstance(v, dict) and len(v) == 1 and set(v) <= {"S", "N"} for v in start.values()
    ):
        raise UsageError("cursor: not a cursor this API returned")
    return start


def _summary(r: Any) -> dict[str, Any]:
    return {
        "run_id": r.run_id,
        "workflow": r.workflow,
        "status": r.shown_status,
        "created_at": r.created_at,
        "started_at": r.started_at,
        "finished_at": r.finished_at,
        "trigger": None if r.trigger is None else r.trigger.to_json(),
        "rerun_of": r.rerun_of,
    }


def _started(run: Any, created: bool, **extra: Any) -> JSONResponse:
    body = {
        "run_id": run.run_id,
        "workflow": run.workflow,
        "status": run.shown_status,
        "created": created,
        **extra,
    }
    if run.error:
        body["error"] = run.error
    return JSONResponse(body, status_code=201 if created else 200)


class _KeyCheck:
    """Bearer keys, checked against their stored hashes (cached briefly)."""

    def __init__(self, keys: ApiKeys, clock: Callable[[], float]) -> None:
        self.keys = keys
        self.clock = clock
        self.ok: dict[str, float] = {}
        self.lock = threading.Lock()

    def __call__(self, header: str | None) -> None:
        if not header:
            raise Unauthorized("missing_api_key",
                               "Authorization: Bearer <key> is required "
                               "(create a key with `orchestrator keys create`)")
        scheme, _, key = header.partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise Unauthorized("bad_api_key", "Authorization must be 'Bearer <key>'")
        key = key.strip()
        now = time.monotonic()
        with self.lock:
            if self.ok.get(key, 0.0) > now:
                return
        if self.keys.check(key, self.clock()) is None:
            raise Unauthorized("bad_api_key", "the API key is not valid")
        with self.lock:
            if len(self.ok) > 1000:
                self.ok.clear()
            self.ok[key] = now + KEY_CACHE_SECONDS


# How often a long poll (`GET /runs/{id}?wait=`) reads the run's row, and its longest wait
# (below API Gateway's 30 s integration timeout).
FOLLOW_EVERY = 0.1
MAX_WAIT = 25.0


def _wait_seconds(raw: str) -> float:
    try:
        wait = float(raw)
    except ValueError:
        raise UsageError(f"wait: {raw!r} is not a number of seconds") from None
    if not 0 <= wait <= MAX_WAIT:
        raise UsageError(f"wait: {raw!r} must be between 0 and {MAX_WAIT:g} seconds")
    return wait


def create_app(rt: Runtime) -> Starlette:
    idempotency = IdempotencyKeys(rt.control, rt.settings.idempotency_retention)
    check_key = _KeyCheck(ApiKeys(rt.control), rt.clock)

    # ---- runs --------------------------------------------------------------------------

    async def start_run(request: Request) -> JSONResponse:
        doc = await read_json(request)
        body = validated(StartRun, doc)
        key = request.headers.get("idempotency-key")

        def start() -> JSONResponse:
            run_id = body.run_id
            if key is not None:
                run_id, _ = idempotency.claim(
                    key, doc, body.run_id or rt.runs.new_run_id(body.workflow, rt.clock()),
                    rt.clock(),
                )
            trigger: dict[str, Any] = {"source": "api"}
            if key:
                trigger["idempotency_key"] = key
            if body.parent_run_id is not None:
                rt.children.require(body.parent_run_id)  # 404 if there is no such run
                trigger["parent_run_id"] = body.parent_run_id
            run, created = rt.runs.start(body.workflow, body.input, run_id, trigger=trigger)
            if body.parent_run_id is not None:
                rt.children.link(body.parent_run_id, run.run_id, run.workflow)
            return _started(run, created)

        return await run_in_threadpool(start)

    async def get_run(request: Request) -> Response:
        flag = request.query_params.get("steps", "true")
        if flag not in ("true", "false"):
            raise UsageError(f"steps: {flag!r} is not true or false")
        run_id = request.path_params["run_id"]
        wait = _wait_seconds(request.query_params.get("wait", "0"))
        if wait > 0:
            # A long poll: the run's own row, every FOLLOW_EVERY seconds, until the run is
            # no longer queued or running or `wait` passed; its steps are read once.
            deadline = rt.clock() + wait
            while True:
                run = await run_in_threadpool(rt.runs.get, run_id)
                # A paused run waits for an operator: the follower is told at once.
                if (run.status.terminal or run.paused is not None
                        or rt.clock() + FOLLOW_EVERY > deadline):
                    break
                await asyncio.sleep(FOLLOW_EVERY)
        body = await run_in_threadpool(lambda: rt.runs.view_body(run_id, steps=flag == "true"))
        return Response(body, media_type="application/json")

    async def run_events(request: Request) -> JSONResponse:
        run_id = request.path_params["run_id"]
        events = await run_in_threadpool(rt.runs.history, run_id)
        custom = await run_in_threadpool(rt.store.run_events, run_id)
        return JSONResponse({"run_id": run_id, "events": events, "custom": custom})

    async def add_run_event(request: Request) -> JSONResponse:
        body = validated(RunEvent, await read_json(request))
        run_id = request.path_params["run_id"]
        if len(json.dumps(body.payload)) > MAX_EVENT_BYTES:
            raise UsageError(f"payload: larger than {MAX_EVENT_BYTES} bytes")

        def add() -> dict[str, Any]:
            rt.runs.get(run_id)  # 404 if there is no such run
            return rt.store.add_run_event(run_id, body.event_type, body.payload,
                                          uuid.uuid4().hex, rt.clock())

        return JSONResponse(await run_in_threadpool(add), status_code=201)

    async def list_runs(request: Request) -> JSONResponse:
        q = request.query_params
        workflow = q.get("workflow") or None
        status = q.get("status") or None
        if status is not None and status not in {s.value for s in RunStatus} | {"paused"}:
            known = ", ".join([*(s.value for s in RunStatus), "paused"])
            raise UsageError(f"status: {status!r} is not a run status ({known})")
        try:
            limit = int(q.get("limit", "20"))
        except ValueError:
            raise UsageError("limit: not an integer") from None
        limit = max(1, min(limit, 100))
        start = _uncursor(q.get("cursor"))
        runs, last = await run_in_threadpool(
            lambda: rt.store.list_runs(workflow, rt.clock(), status=status, limit=limit,
                                       start=start)
        )
        return JSONResponse({"runs": [_summary(r) for r in runs], "next_cursor": _cursor(last)})

    async def journal(request: Request) -> JSONResponse:
        run_id = request.path_params["run_id"]

        def read() -> dict[str, Any]:
            run = rt.runs.get(run_id)
            if run.definition.durable is None:
                raise Conflict(Code.CONFLICT, f"run {run_id!r} is a DAG run: it has no journal")
            trigger = run.trigger
            subject = (trigger.detail.get("key") if trigger is not None
                       and trigger.source == "event" else None)
            return {"run_id": run_id, "workflow": run.definition.durable,
                    "input": run.input, "started_at": run.started_at or run.created_at,
                    "subject": subject, "journal": rt.store.read_journal(run_id)}

        return JSONResponse(await run_in_threadpool(read))

    async def children(request: Request) -> JSONResponse:
        run_id = request.path_params["run_id"]

        def read() -> dict[str, Any]:
            rt.runs.get(run_id)  # 404 if there is no such run
            ids = rt.children.of(run_id)
            found = rt.store.get_runs(ids, rt.clock()) if ids else {}
            return {"run_id": run_id,
                    "children": [_summary(found[i]) for i in ids if i in found]}

        return JSONResponse(await run_in_threadpool(read))

    async def parent(request: Request) -> JSONResponse:
        run_id = request.path_params["run_id"]

        def read() -> dict[str, Any]:
            run = rt.runs.get(run_id)
            pid = rt.children.parent_of(run)
            up = rt.store.get_run(pid, rt.clock()) if pid else None
            return {"run_id": run_id, "parent_run_id": pid,
                    "parent": None if up is None else _summary(up)}

        return JSONResponse(await run_in_threadpool(read))

    async def cancel_run(request: Request) -> JSONResponse:
        body = validated(CancelRun, await read_json(request))
        view = await run_in_threadpool(rt.runs.kill, request.path_params["run_id"], body.reason)
        return JSONResponse(view)

    async def send_signal(request: Request) -> JSONResponse:
        payload = await read_object(request, "a signal's payload")
        key = request.headers.get("idempotency-key")
        result = await run_in_threadpool(
            rt.signals.send, request.path_params["run_id"], request.path_params["name"],
            payload, key)
        return JSONResponse(result, status_code=200 if result["duplicate"] else 202)

    async def resume_run(request: Request) -> JSONResponse:
        validated(ResumeRun, await read_json(request))
        result = await run_in_threadpool(rt.durable.resume, request.path_params["run_id"])
        return JSONResponse(result)

    async def reset_run(request: Request) -> JSONResponse:
        body = validated(ResetRun, await read_json(request))
        result = await run_in_threadpool(rt.durable.reset, request.path_params["run_id"],
                                         body.to)
        return JSONResponse(result)

    async def create_hook(request: Request) -> JSONResponse:
        body = validated(CreateHook, await read_json(request))
        made = await run_in_threadpool(
            rt.hooks.create_for, body.run_id, body.signal, body.metadata, body.ttl, body.token)
        return JSONResponse({**made, "run_id": body.run_id}, status_code=201)

    async def execute_hook(request: Request) -> JSONResponse:
        payload = await read_object(request, "a hook's payload")
        result = await run_in_threadpool(rt.hooks.execute, request.path_params["token"],
                                         payload)
        return JSONResponse(result, status_code=200 if result["duplicate"] else 202)

    async def rerun_run(request: Request) -> JSONResponse:
        doc = await read_json(request)
        body = validated(RerunRun, doc)
        kwargs: dict[str, Any] = {"new_run_id": body.run_id}
        if "input" in body.model_fields_set:
            kwargs["input"] = body.input
        run, created = await run_in_threadpool(
            lambda: rt.runs.rerun(request.path_params["run_id"], **kwargs)
        )
        return _started(run, created, rerun_of=run.rerun_of)

    async def workflows(request: Request) -> JSONResponse:
        out = []
        for name, wf in rt.manifest.workflows.items():
            out.append({
                "name": name,
                "description": wf.description,
                "steps": list(wf.steps),
                "on_failure": wf.on_failure,
                "schedule": wf.schedule.model_dump(exclude_none=True) if wf.schedule else None,
                "events": [t.event for t in getattr(wf, "on", None) or ()],
                "kind": "durable" if wf.durable else "dag",
            })
        return JSONResponse({"workflows": out})

    # ---- events, webhooks, schedules ---------------------------------------------------

    async def emit_event(request: Request) -> JSONResponse:
        body = validated(EmitEvent, await read_json(request))
        result = await run_in_threadpool(
            lambda: rt.events.emit(body.name, body.data, key=body.key, event_id=body.id)
        )
        return JSONResponse(result, status_code=200 if result["duplicate"] else 201)

    async def list_events(request: Request) -> JSONResponse:
        name = request.query_params.get("name")
        if not name:
            raise UsageError("query parameter 'name' is required")
        try:
            limit = max(1, min(int(request.query_params.get("limit", "20")), 100))
        except ValueError:
            raise UsageError("limit: not an integer") from None
        events = await run_in_threadpool(rt.events.recent, name, limit)
        return JSONResponse({"events": events})

    async def webhook(request: Request) -> JSONResponse:
        raw = await read_body(request)
        result = await run_in_threadpool(
            rt.webhooks.deliver, request.path_params["name"], request.headers, raw
        )
        return JSONResponse(result, status_code=200 if result["duplicate"] else 202)

    async def schedules(request: Request) -> JSONResponse:
        return JSONResponse({"schedules": await run_in_threadpool(rt.scheduler.list_all)})

    def schedule_action(action: str) -> Handler:
        async def handle(request: Request) -> Response:
            name = request.path_params["name"]
            result = await run_in_threadpool(getattr(rt.scheduler, action), name)
            return JSONResponse(result)

        return handle

    # ---- plumbing ----------------------------------------------------------------------

    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"ok": True})

    spec = openapi_document(__version__, idempotency_retention=rt.settings.idempotency_retention)

    async def openapi(request: Request) -> JSONResponse:
        return JSONResponse(spec)

    def guarded(handler: Handler) -> Handler:
        async def wrapped(request: Request) -> Response:
            if rt.settings.api_auth:
                await run_in_threadpool(check_key, request.headers.get("authorization"))
            return await handler(request)

        return wrapped

    async def on_error(request: Request, exc: Exception) -> Response:
        if isinstance(exc, HTTPException):  # routing: no such path, or wrong method
            code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http")
            message = (f"no route {request.method} {request.url.path}" if exc.status_code == 404
                       else str(exc.detail))
            resp = error(exc.status_code, code, message)
            resp.headers.update(exc.headers or {})
            return resp
        if isinstance(exc, TooLarge):
            return error(413, "body_too_large", f"request body exceeds {MAX_BODY} bytes")
        if isinstance(exc, Unauthorized):
            resp = error(401, exc.code, exc.message)
            resp.headers["WWW-Authenticate"] = "Bearer"
            return resp
        if isinstance(exc, NotFound):
            return error(404, exc.code, exc.message)
        if isinstance(exc, Gone):
            return error(410, exc.code, exc.message)
        if isinstance(exc, Conflict):
            return error(409, exc.code, exc.message)
        if isinstance(exc, ConditionFailed):
            return error(409, "conflict", exc.message)
        if isinstance(exc, Unprocessable):
            return error(422, exc.code, exc.message)
        if isinstance(exc, UsageError):
            return error(400, exc.code, exc.message)
        if isinstance(exc, OrchestratorError) and exc.retryable:
            return error(503, exc.code, exc.message)
        if isinstance(exc, OrchestratorError):
            return error(400, exc.code, exc.message)
        raise exc

    def route(path: str, handler: Handler, method: str) -> Route:
        open_path = path in OPEN_PATHS or path.startswith("/webhooks/")
        return Route(path, handler if open_path else guarded(handler), methods=[method])

    routes = [
        route("/runs", start_run, "POST"),
        route("/runs", list_runs, "GET"),
        route("/runs/{run_id}", get_run, "GET"),
        route("/runs/{run_id}/events", run_events, "GET"),
        route("/runs/{run_id}/events", add_run_event, "POST"),
        route("/runs/{run_id}/cancel", cancel_run, "POST"),
        route("/runs/{run_id}/rerun", rerun_run, "POST"),
        route("/runs/{run_id}/signals/{name}", send_signal, "POST"),
        route("/runs/{run_id}/resume", resume_run, "POST"),
        route("/runs/{run_id}/children", children, "GET"),
        route("/runs/{run_id}/journal", journal, "GET"),
        route("/runs/{run_id}/parent", parent, "GET"),
        route("/hooks", create_hook, "POST"),
        route("/hooks/{token}", execute_hook, "POST"),
        route("/runs/{run_id}/reset", reset_run, "POST"),
        route("/workflows", workflows, "GET"),
        route("/events", emit_event, "POST"),
        route("/events", list_events, "GET"),
        route("/webhooks/{name}", webhook, "POST"),
        route("/schedules", schedules, "GET"),
        route("/schedules/{name}/pause", schedule_action("pause"), "POST"),
        route("/schedules/{name}/resume", schedule_action("resume"), "POST"),
        route("/schedules/{name}/trigger", schedule_action("trigger"), "POST"),
        route("/healthz", healthz, "GET"),
        route("/openapi.json", openapi, "GET"),
    ]
    handlers: dict[Any, Any] = {
        OrchestratorError: on_error, TooLarge: on_error, HTTPException: on_error,
    }
    return Starlette(routes=routes, exception_handlers=handlers)
