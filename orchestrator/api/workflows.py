"""Workflows: what the manifest declares; and its OpenAPI path (`paths`)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse

from orchestrator.api.operations import op
from orchestrator.api.schemas import Schema, ref
from orchestrator.api.schemas import json_body as _json
from orchestrator.api.state import api_state
from orchestrator.presentation.flow import flow_of

__all__ = ["list_workflows", "paths"]


async def list_workflows(request: Request) -> JSONResponse:
    out = []
    manifest = api_state(request).rt.manifest
    for name, wf in manifest.workflows.items():
        out.append({
            "name": name,
            "description": wf.description,
            "steps": list(wf.steps),
            "on_failure": wf.on_failure,
            "schedule": wf.schedule.model_dump(exclude_none=True) if wf.schedule else None,
            "events": [t.event for t in getattr(wf, "on", None) or ()],
            "kind": "durable" if wf.durable else "dag",
            "webhooks": [hook for hook, spec in manifest.webhooks.items()
                         if spec.workflow == name],
            "flow": flow_of(wf, manifest.backends),
        })
    return JSONResponse({"workflows": out})


def paths() -> dict[str, Schema]:
    return {
        "/workflows": {
            "get": op("listWorkflows", "The manifest's workflows.", tag="workflows",
                      responses={"200": _json(ref("Workflows"), "The workflows")}),
        },
    }
