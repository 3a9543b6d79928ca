"""Durable state cells from outside a run: list an entity's cells, read one, set one,
delete one (to inspect and repair what `ctx.state` keeps); and their OpenAPI paths."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse

from orchestrator.api.models import PutStateCell
from orchestrator.api.operations import BODY_ERRORS, body, errors, op, path_param
from orchestrator.api.requests import limit_of, read_json, validated
from orchestrator.api.schemas import Schema, ref
from orchestrator.api.schemas import json_body as _json
from orchestrator.api.state import api_state

__all__ = ["delete_cell", "get_cell", "list_cells", "paths", "put_cell"]


async def list_cells(request: Request) -> JSONResponse:
    rt = api_state(request).rt
    found = await run_in_threadpool(rt.state.list, request.path_params["entity"],
                                    request.query_params.get("after") or None,
                                    limit_of(request))
    return JSONResponse(found)


async def get_cell(request: Request) -> JSONResponse:
    rt = api_state(request).rt
    found = await run_in_threadpool(rt.state.get, request.path_params["entity"],
                                    request.path_params["key"])
    return JSONResponse(found)


async def put_cell(request: Request) -> JSONResponse:
    rt = api_state(request).rt
    req = validated(PutStateCell, await read_json(request))
    done = await run_in_threadpool(rt.state.set, request.path_params["entity"],
                                   request.path_params["key"], req.value, req.ttl)
    return JSONResponse(done)


async def delete_cell(request: Request) -> JSONResponse:
    rt = api_state(request).rt
    done = await run_in_threadpool(rt.state.delete, request.path_params["entity"],
                                   request.path_params["key"])
    return JSONResponse(done)


def paths() -> dict[str, Schema]:
    entity = path_param("entity", "The entity the cells are scoped by (the rule of names).",
                        {"type": "string", "minLength": 1, "maxLength": 128})
    key = path_param("key", "The cell's key within its entity.",
                     {"type": "string", "minLength": 1, "maxLength": 512})
    bad = {"400": "An entity or key against the rule, a value over its cap, a bad TTL",
           "404": "No such cell"}
    return {
        "/state/{entity}": {
            "get": op("listStateCells", "An entity's live state cells, in key order.",
                      tag="state",
                      parameters=[entity,
                                  {"name": "after", "in": "query", "required": False,
                                   "description": "Start after this key (the `next` of the"
                                   " page before).", "schema": {"type": "string"}},
                                  {"name": "limit", "in": "query", "required": False,
                                   "schema": {"type": "integer", "minimum": 1,
                                              "maximum": 500}}],
                      responses={"200": _json(ref("StateCells"), "The cells"),
                                 **errors("400", "503", notes=bad)}),
        },
        "/state/{entity}/{key}": {
            "get": op("getStateCell", "One state cell.", tag="state", parameters=[entity, key],
                      responses={"200": _json(ref("StateCell"), "The cell"),
                                 **errors("400", "404", "503", notes=bad)}),
            "put": op("putStateCell", "Set a state cell (a repair: runs see it at once).",
                      tag="state", parameters=[entity, key],
                      body=body("PutStateCell", required=True),
                      responses={"200": _json(ref("StateCell"), "The cell as set"),
                                 **errors(*BODY_ERRORS, "503", notes=bad)}),
            "delete": op("deleteStateCell", "Delete a state cell.", tag="state",
                         parameters=[entity, key],
                         responses={"200": _json(ref("StateCellDeleted"), "Deleted"),
                                    **errors("400", "404", "503", notes=bad)}),
        },
    }
