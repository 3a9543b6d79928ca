"""The HTTP API (Starlette): start runs, read them, list them, cancel them.

Every error is JSON `{"error": {"code", "message"}}` with a 4xx status for bad input;
a body is size-checked before it is parsed."""

from __future__ import annotations

import base64
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from orchestrator import __version__
from orchestrator.errors import ConditionFailed, NotFound, OrchestratorError, UsageError
from orchestrator.openapi import openapi_document
from orchestrator.runtime import Runtime

__all__ = ["create_app"]

MAX_BODY = 1024 * 1024
MAX_DEPTH = 64


class StartRun(BaseModel):
    model_config = ConfigDict(extra="forbid")
    workflow: str = Field(min_length=1, max_length=128)
    input: Any = None
    run_id: str | None = None


class CancelRun(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str = Field(default="cancelled by request", max_length=1000)


def error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


def _reject_constant(value: str) -> Any:
    raise ValueError(f"{value} is not valid JSON")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def _depth_ok(body: bytes) -> bool:
    """Nesting depth, counted on the raw bytes before parsing (strings skipped)."""
    depth, in_string, escaped = 0, False, False
    for byte in body:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > MAX_DEPTH:
                return False
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return True


async def read_json(request: Request) -> Any:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY:
        raise _TooLarge()
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            raise _TooLarge()
    if not body:
        return {}
    if not _depth_ok(body):
        raise UsageError(f"body: nested deeper than {MAX_DEPTH} levels")
    try:
        return json.loads(body, parse_constant=_reject_constant,
                          object_pairs_hook=_no_duplicates)
    except (ValueError, RecursionError) as exc:
        raise UsageError(f"body: invalid JSON: {exc}") from exc


class _TooLarge(Exception):
    pass


def _validation_message(exc: ValidationError) -> str:
    parts = []
    for e in exc.errors():
        loc = ".".join(str(x) for x in e["loc"]) or "body"
        parts.append(f"{loc}: {e['msg']}")
    return "; ".join(parts)


def create_app(rt: Runtime) -> Starlette:
    async def start_run(request: Request) -> JSONResponse:
        doc = await read_json(request)
        try:
            body = StartRun.model_validate(doc)
        except ValidationError as exc:
            return error(422, "invalid_body", _validation_message(exc))
        run, created = await run_in_threadpool(
            rt.runs.start, body.workflow, body.input, body.run_id
        )
        return JSONResponse(
            {
                "run_id": run.run_id,
                "workflow": run.workflow,
                "status": run.status.value,
                "created": created,
            },
            status_code=201 if created else 200,
        )

    async def get_run(request: Request) -> JSONResponse:
        view = await run_in_threadpool(rt.runs.view, request.path_params["run_id"])
        return JSONResponse(view)

    async def list_runs(request: Request) -> JSONResponse:
        workflow = request.query_params.get("workflow")
        if not workflow:
            return error(400, "missing_parameter", "query parameter 'workflow' is required")
        try:
            limit = int(request.query_params.get("limit", "20"))
        except ValueError:
            return error(400, "bad_parameter", "limit: not an integer")
        limit = max(1, min(limit, 100))
        cursor = request.query_params.get("cursor")
        start = None
        if cursor:
            try:
                start = json.loads(base64.urlsafe_b64decode(cursor.encode()))
            except ValueError:
                return error(400, "bad_parameter", "cursor: not a cursor this API returned")
        runs, last = await run_in_threadpool(
            rt.store.list_runs, workflow, rt.clock(), limit=limit, start=start
        )
        return JSONResponse(
            {
                "runs": [
                    {
                        "run_id": r.run_id,
                        "workflow": r.workflow,
                        "status": r.status.value,
                        "created_at": r.created_at,
                        "finished_at": r.finished_at,
                    }
                    for r in runs
                ],
                "next_cursor": base64.urlsafe_b64encode(json.dumps(last).encode()).decode()
                if last
                else None,
            }
        )

    async def cancel_run(request: Request) -> JSONResponse:
        doc = await read_json(request)
        try:
            body = CancelRun.model_validate(doc)
        except ValidationError as exc:
            return error(422, "invalid_body", _validation_message(exc))
        view = await run_in_threadpool(rt.runs.kill, request.path_params["run_id"], body.reason)
        return JSONResponse(view)

    async def workflows(request: Request) -> JSONResponse:
        return JSONResponse(
            {
                "workflows": [
                    {"name": name, "steps": list(wf.steps), "on_failure": wf.on_failure}
                    for name, wf in rt.manifest.workflows.items()
                ]
            }
        )

    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"ok": True})

    spec = openapi_document(StartRun, CancelRun, __version__)

    async def openapi(request: Request) -> JSONResponse:
        return JSONResponse(spec)

    async def on_error(request: Request, exc: Exception) -> JSONResponse:
        if isinstance(exc, _TooLarge):
            return error(413, "body_too_large", f"request body exceeds {MAX_BODY} bytes")
        if isinstance(exc, NotFound):
            return error(404, exc.code, exc.message)
        if isinstance(exc, ConditionFailed):
            return error(409, "conflict", exc.message)
        if isinstance(exc, UsageError):
            return error(400, exc.code, exc.message)
        if isinstance(exc, OrchestratorError) and exc.retryable:
            return error(503, exc.code, exc.message)
        if isinstance(exc, OrchestratorError):
            return error(400, exc.code, exc.message)
        raise exc

    routes = [
        Route("/runs", start_run, methods=["POST"]),
        Route("/runs", list_runs, methods=["GET"]),
        Route("/runs/{run_id}", get_run, methods=["GET"]),
        Route("/runs/{run_id}/cancel", cancel_run, methods=["POST"]),
        Route("/workflows", workflows, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/openapi.json", openapi, methods=["GET"]),
    ]
    handlers: dict[Any, Any] = {OrchestratorError: on_error, _TooLarge: on_error}
    return Starlette(routes=routes, exception_handlers=handlers)
