"""The HTTP API (Starlette): runs, events, webhooks and schedules.

Every error is JSON `{"error": {"code", "message"}}` with a 4xx status for bad input;
a body is size-checked before it is parsed (requests.py, strict_json.py). Every route
but `/healthz`, `/openapi.json` and `/webhooks/{name}` (which checks its own signature)
wants `Authorization: Bearer <key>` (keys from `orchestrator keys create`), unless
ORCH_API_AUTH=off.

This module holds the route table, the bearer-key check and the error answers; the
handlers are module-level functions per resource (runs.py, durable_runs.py, workflows.py,
triggers.py), which reach the Runtime through the app's state (state.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from orchestrator import __version__, telemetry
from orchestrator.api import (
    approvals,
    bulk,
    cells,
    durable_runs,
    health,
    metrics,
    run_copies,
    runs,
    scripts,
    triggers,
    ui,
    versions,
    workflow_stats,
    workflows,
)
from orchestrator.api.openapi import openapi_document
from orchestrator.api.requests import TooLarge, error
from orchestrator.api.state import ApiState, api_state
from orchestrator.errors import (
    ConditionFailed,
    Conflict,
    Forbidden,
    NotFound,
    OrchestratorError,
    Unauthorized,
    Unprocessable,
    UsageError,
)
from orchestrator.runtime import Runtime
from orchestrator.services.access.apikeys import ApiKeys
from orchestrator.services.durable.hooks import Gone

__all__ = ["create_app"]

OPEN_PATHS = ("/healthz", "/openapi.json", "/hooks/{token}", "/approvals/links/{token}")
KEY_CACHE_SECONDS = 30.0
Handler = Callable[[Request], Awaitable[Response]]


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


def _guarded(handler: Handler) -> Handler:
    async def wrapped(request: Request) -> Response:
        state = api_state(request)
        if state.rt.settings.api_auth:
            await run_in_threadpool(state.check_key, request.headers.get("authorization"))
        return await handler(request)

    return wrapped


async def _on_error(request: Request, exc: Exception) -> Response:
    if isinstance(exc, HTTPException):  # routing: no such path, or wrong method
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http")
        message = (f"no route {request.method} {request.url.path}" if exc.status_code == 404
                   else str(exc.detail))
        resp = error(exc.status_code, code, message)
        resp.headers.update(exc.headers or {})
        return resp
    if isinstance(exc, TooLarge):
        return error(413, "body_too_large", f"request body exceeds {exc.limit} bytes")
    if isinstance(exc, Unauthorized):
        resp = error(401, exc.code, exc.message)
        resp.headers["WWW-Authenticate"] = "Bearer"
        return resp
    if isinstance(exc, Forbidden):
        return error(403, exc.code, exc.message)
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


async def healthz(request: Request) -> JSONResponse:
    return JSONResponse({"ok": True})


async def openapi(request: Request) -> JSONResponse:
    return JSONResponse(api_state(request).spec)


def _route(path: str, handler: Handler, method: str) -> Route:
    open_path = path in OPEN_PATHS or path.startswith("/webhooks/")
    return Route(path, handler if open_path else _guarded(handler), methods=[method])


def _routes() -> list[BaseRoute]:
    return [
        _route("/runs", runs.start_run, "POST"),
        _route("/runs/check", versions.check_runs, "POST"),
        _route("/runs/migrate", versions.migrate_runs, "POST"),
        _route("/runs", runs.list_runs, "GET"),
        _route("/bulk-actions", bulk.start_job, "POST"),
        _route("/bulk-actions", bulk.list_jobs, "GET"),
        _route("/bulk-actions/{job_id}", bulk.get_job, "GET"),
        _route("/runs/{run_id}", runs.get_run, "GET"),
        _route("/runs/{run_id}/events", runs.run_events, "GET"),
        _route("/runs/{run_id}/events", runs.add_run_event, "POST"),
        _route("/runs/{run_id}/cancel", runs.cancel_run, "POST"),
        _route("/runs/{run_id}/rerun", runs.rerun_run, "POST"),
        _route("/runs/{run_id}/signals/{name}", durable_runs.send_signal, "POST"),
        _route("/runs/{run_id}/resume", durable_runs.resume_run, "POST"),
        _route("/runs/{run_id}/children", durable_runs.children, "GET"),
        _route("/runs/{run_id}/journal", durable_runs.journal, "GET"),
        _route("/runs/{run_id}/parent", durable_runs.parent, "GET"),
        _route("/runs/{run_id}/export", run_copies.export_run, "GET"),
        _route("/runs/import", run_copies.import_run, "POST"),
        _route("/hooks", durable_runs.create_hook, "POST"),
        _route("/hooks/{token}", durable_runs.execute_hook, "POST"),
        _route("/runs/{run_id}/reset", durable_runs.reset_run, "POST"),
        _route("/runs/{run_id}/approvals/{step}", approvals.answer, "POST"),
        _route("/runs/{run_id}/approvals/{step}", approvals.get_approval, "GET"),
        _route("/approvals", approvals.inbox, "GET"),
        _route("/approvals/links/{token}", approvals.answer_link, "POST"),
        _route("/state/{entity}", cells.list_cells, "GET"),
        _route("/state/{entity}/{key}", cells.get_cell, "GET"),
        _route("/state/{entity}/{key}", cells.put_cell, "PUT"),
        _route("/state/{entity}/{key}", cells.delete_cell, "DELETE"),
        _route("/workflows", workflows.list_workflows, "GET"),
        _route("/workflows/{name}/stats", workflow_stats.workflow_stats, "GET"),
        _route("/scripts/runs", scripts.submit_script, "POST"),
        _route("/scripts", scripts.list_scripts, "GET"),
        _route("/scripts/{name}", scripts.put_script, "PUT"),
        _route("/scripts/{name}", scripts.get_script, "GET"),
        _route("/scripts/{name}", scripts.delete_script, "DELETE"),
        _route("/events", triggers.emit_event, "POST"),
        _route("/events", triggers.list_events, "GET"),
        _route("/webhooks/{name}", triggers.deliver_webhook, "POST"),
        _route("/schedules", triggers.list_schedules, "GET"),
        _route("/schedules/{name}/pause", triggers.pause_schedule, "POST"),
        _route("/schedules/{name}/resume", triggers.resume_schedule, "POST"),
        _route("/schedules/{name}/trigger", triggers.trigger_schedule, "POST"),
        _route("/versions", versions.list_versions, "GET"),
        _route("/versions/{backend}", versions.list_versions, "GET"),
        _route("/versions/{backend}", versions.register_version, "POST"),
        _route("/versions/{backend}/{version}/promote", versions.promote_version, "POST"),
        _route("/versions/{backend}/{version}/retire", versions.retire_version, "POST"),
        _route("/health", health.health, "GET"),
        _route("/metrics", metrics.metrics, "GET"),
        _route("/healthz", healthz, "GET"),
        _route("/openapi.json", openapi, "GET"),
        *ui.routes(),  # the dashboard: signed in by cookie (ui/session.py)
    ]


def create_app(rt: Runtime, *, badge: str | None = None) -> Starlette:
    """The API over `rt`: its handlers find `rt` and the rest at `app.state.api`; the
    dashboard (/ui) its own at `app.state.ui`, with `badge` ("DEV" on the embedded
    emulator) on every page."""
    handlers: dict[Any, Any] = {
        OrchestratorError: _on_error, TooLarge: _on_error, HTTPException: _on_error,
    }
    app = Starlette(routes=_routes(), exception_handlers=handlers)
    app.state.api = ApiState(
        rt=rt,
        check_key=_KeyCheck(ApiKeys(rt.control), rt.clock),
        spec=openapi_document(__version__,
                              idempotency_retention=rt.settings.idempotency_retention),
    )
    app.state.ui = ui.ui_state(rt, badge)
    return telemetry.instrument_app(app)  # type: ignore[no-any-return]
