"""The stack's health over HTTP: `GET /health` (queues, processes, backends as JSON:
services/health/overview.py) and `GET /metrics` (Prometheus: metrics.py), and their
OpenAPI paths. Both want the bearer key as every route does; Prometheus sends it with
`authorization: {type: Bearer, credentials: <key>}` in its scrape config."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse

from orchestrator.api.operations import errors, op
from orchestrator.api.schemas import Schema
from orchestrator.api.schemas import json_body as _json
from orchestrator.api.state import api_state

__all__ = ["health", "paths"]


async def health(request: Request) -> JSONResponse:
    """The queues' depths, the processes alive and gone, the backends' calls in flight."""
    reads = api_state(request).rt.health()
    found = await run_in_threadpool(reads.read)
    return JSONResponse(found.as_json())


_PROCESS: Schema = {"type": "object", "properties": {
    "kind": {"type": "string", "enum": ["worker", "sweeper", "api"]},
    "id": {"type": "string"}, "started_at": {"type": "number"},
    "last_seen": {"type": "number"}, "seconds_since": {"type": "number"},
    "every": {"type": "number"}, "version": {"type": "string"},
    "handled": {"type": "object", "additionalProperties": {"type": "integer"}},
    "in_flight": {"type": "object", "additionalProperties": {"type": "integer"}},
    "stopped": {"type": "boolean"}, "alive": {"type": "boolean"}}}

_HEALTH: Schema = {"type": "object", "required": ["at", "queues", "processes", "backends"],
                   "properties": {
    "at": {"type": "number"},
    "queues": {"type": "array", "items": {"type": "object", "properties": {
        "queue": {"type": "string", "enum": ["dispatch", "timer", "dead_letter"]},
        "visible": {"type": "integer"}, "in_flight": {"type": "integer"},
        "delayed": {"type": "integer"}}}},
    "dead_letters": {"type": "integer"},
    "processes": {"type": "object", "properties": {
        "alive": {"type": "array", "items": _PROCESS},
        "gone": {"type": "array", "items": _PROCESS}}},
    "backends": {"type": "array", "items": {"type": "object", "properties": {
        "backend": {"type": "string"},
        "concurrency": {"type": ["integer", "null"]}, "rate": {"type": ["string", "null"]},
        "holding": {"type": ["integer", "null"]}, "running": {"type": "integer"}}}},
    "oldest_message_age": {"type": "null",
                           "description": "Not available: SQS reports it to CloudWatch only"},
}}


def paths() -> dict[str, Schema]:
    return {
        "/health": {
            "get": op("getHealth", "The stack's health: each queue's depth (SQS's approximate"
                      " counts), the dead letters, the processes alive (a heartbeat within"
                      " three beats) and gone recently, each backend's calls in flight and"
                      " limits.", tag="meta",
                      responses={"200": _json(_HEALTH, "The stack's health"),
                                 **errors("503")}),
        },
        "/metrics": {
            "get": op("getMetrics", "The whole stack's metrics in Prometheus's text format"
                      " (README: Metrics).", tag="meta",
                      responses={"200": {"description": "Prometheus text format 0.0.4",
                                         "content": {"text/plain": {"schema":
                                                                    {"type": "string"}}}},
                                 **errors("503")}),
        },
    }
