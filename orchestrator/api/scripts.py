"""Durable shell scripts through the API: submit one to run (POST /scripts/runs), store
one as a workflow that events or a schedule start (PUT /scripts/{name}), list, read and
delete the stored ones; and their OpenAPI paths."""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse

from orchestrator.api.models import PutScript, SubmitScript
from orchestrator.api.operations import BODY_ERRORS, body, errors, op, path_param
from orchestrator.api.requests import read_json, validated
from orchestrator.api.runs import started_answer
from orchestrator.api.schemas import Schema, ref
from orchestrator.api.schemas import json_body as _json
from orchestrator.api.state import api_state
from orchestrator.errors import NotFound
from orchestrator.services.admission import StartRequest
from orchestrator.services.scripts.texts import check_script

__all__ = ["delete_script", "get_script", "list_scripts", "paths", "put_script",
           "submit_script"]


async def submit_script(request: Request) -> JSONResponse:
    rt = api_state(request).rt
    doc = await read_json(request)
    req = validated(SubmitScript, doc)
    key = request.headers.get("idempotency-key")

    def submit() -> JSONResponse:
        text = check_script(req.text, f"script {req.name!r}")
        fields: dict[str, Any] = {}
        if req.throttle is not None:
            fields["throttle"] = req.throttle.model_dump()
        wf = rt.runs.manifest.script(req.name, text, **fields)
        started = rt.runs.admit(StartRequest(
            req.name, req.input, None, {"source": "api", "script": req.name},
            idempotency_key=key, document=doc, adhoc=wf))
        return started_answer(started.run, started)

    return await run_in_threadpool(submit)


async def put_script(request: Request) -> JSONResponse:
    rt = api_state(request).rt
    req = validated(PutScript, await read_json(request))
    name = request.path_params["name"]
    entry = await run_in_threadpool(
        lambda: rt.runs.manifest.register(name, req.text, on=[{"event": e} for e in req.on],
                                          schedule=req.schedule))
    return JSONResponse(entry.doc())


async def list_scripts(request: Request) -> JSONResponse:
    rt = api_state(request).rt
    entries = await run_in_threadpool(rt.runs.manifest.registry.all)
    return JSONResponse({"scripts": [e.doc() for e in entries]})


async def get_script(request: Request) -> JSONResponse:
    rt = api_state(request).rt
    name = request.path_params["name"]

    def read() -> dict[str, Any]:
        entry = rt.runs.manifest.registry.get(name)
        if entry is None:
            raise NotFound(f"no stored script {name!r}")
        return {**entry.doc(), "text": rt.runs.manifest.texts.get(entry.sha256)}

    return JSONResponse(await run_in_threadpool(read))


async def delete_script(request: Request) -> JSONResponse:
    rt = api_state(request).rt
    name = request.path_params["name"]
    await run_in_threadpool(rt.runs.manifest.unregister, name)
    return JSONResponse({"name": name, "deleted": True})


def paths() -> dict[str, Schema]:
    name = path_param("name", "The stored script's name (a workflow name).",
                      {"type": "string", "minLength": 1, "maxLength": 128})
    entry = {"type": "object", "properties": {
        "name": {"type": "string"}, "sha256": {"type": "string"},
        "on": {"type": "array", "items": {"type": "object"}},
        "schedule": {"type": ["object", "null"]}, "updated_at": {"type": "number"},
        "text": {"type": "string"}}}
    return {
        "/scripts/runs": {
            "post": op("submitScript", "Start a run of a bash script (durable: each"
                       " `orchestrator step` in it is a checkpoint).", tag="scripts",
                       description="Its text is stored by hash with the run; a script host"
                       " (a backend with the `shell` capability) runs it. An"
                       " Idempotency-Key answers a repeat with the first run.",
                       body=body("SubmitScript", required=True),
                       responses={"201": _json(ref("Started"), "Started"),
                                  "200": _json(ref("Started"), "The run existed already"),
                                  **errors(*BODY_ERRORS, "503", notes={
                                      "400": "An empty or binary script, a bad throttle,"
                                      " or no backend with the shell capability"})}),
        },
        "/scripts": {
            "get": op("listScripts", "The stored scripts (handlers and schedules).",
                      tag="scripts",
                      responses={"200": _json({"type": "object", "properties": {
                          "scripts": {"type": "array", "items": entry}}}, "The scripts"),
                          **errors("503")}),
        },
        "/scripts/{name}": {
            "put": op("putScript", "Store a script as workflow `name`: events it is `on`"
                      " start it, and its `schedule` fires it.", tag="scripts",
                      parameters=[name], body=body("PutScript", required=True),
                      responses={"200": _json(entry, "The stored script"),
                                 **errors(*BODY_ERRORS, "409", "503", notes={
                                     "409": "The name is a manifest workflow's"})}),
            "get": op("getScript", "A stored script, with its text.", tag="scripts",
                      parameters=[name],
                      responses={"200": _json(entry, "The script"),
                                 **errors("404", "503")}),
            "delete": op("deleteScript", "Delete a stored script (runs started go on).",
                         tag="scripts", parameters=[name],
                         responses={"200": _json({"type": "object"}, "Deleted"),
                                    **errors("404", "503")}),
        },
    }
