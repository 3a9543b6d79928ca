"""`GET /workflows/{name}/stats?window=day|week`: a workflow's health over the last day
(hour by hour) or week (6 hours a bucket), its newest failures grouped by error code and
its triggers (services/health/workflow_stats.py; the dashboard's workflow page draws
the same); and its OpenAPI path. Beside the stats' reads, a scheduled workflow costs one
read of its schedule's item."""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse

from orchestrator.api.operations import errors, op, path_param
from orchestrator.api.schemas import Schema
from orchestrator.api.schemas import json_body as _json
from orchestrator.api.state import api_state
from orchestrator.api.ui.reads import workflow_triggers
from orchestrator.errors import NotFound, UsageError
from orchestrator.runtime import Runtime
from orchestrator.services.health.workflow_stats import ENDED, WINDOWS, Window, WorkflowStats

__all__ = ["paths", "read_stats", "window_of", "workflow_stats"]


def window_of(raw: str | None) -> Window:
    """The `window` query parameter (`day` by default)."""
    window = WINDOWS.get(raw or "day")
    if window is None:
        raise UsageError(f"window: {raw!r} is not one of {', '.join(WINDOWS)}")
    return window


def read_stats(rt: Runtime, name: str, window: Window) -> dict[str, Any]:
    """The stats of workflow `name` (NotFound: the manifest has none) with its triggers.
    Blocking: call from a thread."""
    if name not in rt.manifest.workflows:
        raise NotFound(f"no workflow named {name!r}")
    stats = WorkflowStats(rt.store, rt.clock).read(name, window)
    return {**stats, "triggers": workflow_triggers(rt, name)}


async def workflow_stats(request: Request) -> JSONResponse:
    rt = api_state(request).rt
    window = window_of(request.query_params.get("window"))
    found = await run_in_threadpool(read_stats, rt, request.path_params["name"], window)
    return JSONResponse(found)


_RATE: Schema = {"type": ["number", "null"], "minimum": 0, "maximum": 1,
                 "description": "Runs ended `success` over all that ended; null: none ended"}
_SECONDS: Schema = {"type": ["number", "null"],
                    "description": "Seconds, estimated from the duration histogram by linear"
                    " interpolation inside its bucket; null: no step attempt"}
_SUMMARY: dict[str, Schema] = {
    "started": {"type": "integer"},
    "finished": {"type": "object", "properties": {s: {"type": "integer"} for s in ENDED}},
    "success_rate": _RATE,
    "steps": {"type": "integer", "description": "Call steps' attempts timed"},
    "p50": _SECONDS, "p95": _SECONDS,
}
_STATS: Schema = {"type": "object", "required": [
    "workflow", "window", "at", "bucket_seconds", "buckets", "totals", "failures", "triggers"],
    "properties": {
    "workflow": {"type": "string"},
    "window": {"type": "string", "enum": list(WINDOWS)},
    "at": {"type": "number"},
    "bucket_seconds": {"type": "integer", "enum": [3600, 21600]},
    "buckets": {"type": "array", "items": {"type": "object", "properties": {
        "start": {"type": "number"}, "end": {"type": "number"}, **_SUMMARY}}},
    "totals": {"type": "object", "properties": _SUMMARY},
    "failures": {"type": "object", "properties": {
        "scanned": {"type": "integer", "description": "The newest failed runs read"},
        "groups": {"type": "array", "items": {"type": "object", "properties": {
            "code": {"type": "string", "description": "The run's error code; for a run"
                     " failed by a step (`step_failed`), the step's error code"},
            "count": {"type": "integer"},
            "step": {"type": ["string", "null"], "description": "The newest run's failed step"},
            "newest_run_id": {"type": "string"}, "newest_at": {"type": "number"},
            "message": {"type": "string"}}}}}},
    "triggers": {"type": "object", "properties": {
        "events": {"type": "array", "items": {"type": "string"}},
        "webhooks": {"type": "array", "items": {"type": "string"}},
        "schedule": {"type": ["object", "null"]}}},
}}


def paths() -> dict[str, Schema]:
    window = {"name": "window", "in": "query", "required": False,
              "description": "`day`: the last 24 hours, a bucket an hour; `week`: 28 buckets"
              " of 6 hours (aligned on 00, 06, 12, 18 UTC). Default `day`.",
              "schema": {"type": "string", "enum": list(WINDOWS), "default": "day"}}
    return {
        "/workflows/{name}/stats": {
            "get": op("getWorkflowStats", "A workflow's runs started and finished, success"
                      " rate and step latency p50/p95 over the last day or week (from the"
                      " hourly counters the processes' heartbeats add to), its newest"
                      " failures grouped by error code, and its triggers.", tag="workflows",
                      parameters=[path_param("name", "A workflow of the manifest (else 404)."),
                                  window],
                      responses={"200": _json(_STATS, "The workflow's stats"),
                                 **errors("400", "404", "503")}),
        },
    }
