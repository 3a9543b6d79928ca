"""Durable runs: signals, hooks, resume and reset, the journal, child and parent runs;
and their OpenAPI paths (`paths`)."""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse

from orchestrator.api.models import NAME_CHARS, CreateHook, ResetRun, ResumeRun
from orchestrator.api.operations import BODY_ERRORS, body, errors, op, path_param, run_id_param
from orchestrator.api.requests import read_json, read_object, validated
from orchestrator.api.runs import summary
from orchestrator.api.schemas import Schema, ref
from orchestrator.api.schemas import json_body as _json
from orchestrator.api.state import api_state, run_or_404
from orchestrator.errors import Code, Conflict
from orchestrator.services.values import MAX_VALUE_BYTES, NAME_RULE

__all__ = [
    "children", "create_hook", "execute_hook", "journal", "parent", "paths", "reset_run",
    "resume_run", "send_signal",
]


async def send_signal(request: Request) -> JSONResponse:
    rt = api_state(request).rt
    payload = await read_object(request, "a signal's payload")
    key = request.headers.get("idempotency-key")
    result = await run_in_threadpool(
        rt.signals.send, request.path_params["run_id"], request.path_params["name"],
        payload, key)
    return JSONResponse(result, status_code=200 if result["duplicate"] else 202)


async def journal(request: Request) -> JSONResponse:
    rt = api_state(request).rt
    run_id = request.path_params["run_id"]

    def read() -> dict[str, Any]:
        run = run_or_404(rt, run_id)
        if run.definition.durable is None:
            raise Conflict(Code.CONFLICT, f"run {run_id!r} is a DAG run: it has no journal")
        trigger = run.trigger
        subject = (trigger.detail.get("key") if trigger is not None
                   and trigger.source == "event" else None)
        return {"run_id": run_id, "workflow": run.definition.durable,
                "input": run.input, "started_at": run.started_at or run.created_at,
                "subject": subject, "journal": rt.store.journal.read_journal(run_id)}

    return JSONResponse(await run_in_threadpool(read))


async def children(request: Request) -> JSONResponse:
    rt = api_state(request).rt
    run_id = request.path_params["run_id"]

    def read() -> dict[str, Any]:
        run_or_404(rt, run_id)
        ids = rt.children.of(run_id)
        found = rt.store.runs.get_runs(ids, rt.clock()) if ids else {}
        return {"run_id": run_id, "children": [summary(found[i]) for i in ids if i in found]}

    return JSONResponse(await run_in_threadpool(read))


async def parent(request: Request) -> JSONResponse:
    rt = api_state(request).rt
    run_id = request.path_params["run_id"]

    def read() -> dict[str, Any]:
        run = run_or_404(rt, run_id)
        pid = rt.children.parent_of(run)
        up = rt.store.runs.get_run(pid, rt.clock()) if pid else None
        return {"run_id": run_id, "parent_run_id": pid,
                "parent": None if up is None else summary(up)}

    return JSONResponse(await run_in_threadpool(read))


async def resume_run(request: Request) -> JSONResponse:
    rt = api_state(request).rt
    validated(ResumeRun, await read_json(request))
    result = await run_in_threadpool(rt.durable.resume, request.path_params["run_id"])
    return JSONResponse(result)


async def reset_run(request: Request) -> JSONResponse:
    rt = api_state(request).rt
    req = validated(ResetRun, await read_json(request))
    result = await run_in_threadpool(rt.durable.reset, request.path_params["run_id"], req.to)
    return JSONResponse(result)


async def create_hook(request: Request) -> JSONResponse:
    rt = api_state(request).rt
    req = validated(CreateHook, await read_json(request))
    made = await run_in_threadpool(
        rt.hooks.create_for, req.run_id, req.signal, req.metadata, req.ttl, req.token)
    return JSONResponse({**made, "run_id": req.run_id}, status_code=201)


async def execute_hook(request: Request) -> JSONResponse:
    rt = api_state(request).rt
    payload = await read_object(request, "a hook's payload")
    result = await run_in_threadpool(rt.hooks.execute, request.path_params["token"], payload)
    return JSONResponse(result, status_code=200 if result["duplicate"] else 202)


# ---- OpenAPI ---------------------------------------------------------------------------

# The 409 of an operator's action on a durable run (resume, reset).
_ADMIN_409 = ("The run finished (run_finished), is not durable, or is being advanced right"
              " now (conflict: try again)")


def paths() -> dict[str, Schema]:
    run_id = run_id_param()
    return {
        "/runs/{run_id}/signals/{name}": {
            "post": op(
                "sendSignal", "Send a signal to a durable run.", tag="runs",
                description="Signals queue per run and name until a wait consumes them (first"
                " in, first out): one sent before the run waits is not lost. The body is the"
                f" payload (a JSON object, at most {MAX_VALUE_BYTES} bytes; empty: `{{}}`)."
                " With an `Idempotency-Key`, a resend queues nothing (200, `duplicate:"
                " true`).",
                parameters=[run_id, path_param(
                    "name", f"The signal's name: {NAME_RULE} (compared in Unicode NFC;"
                    " percent-encoded in the path).",
                    {"type": "string", "minLength": 1, "maxLength": NAME_CHARS}),
                    {"name": "Idempotency-Key", "in": "header", "required": False,
                     "description": "The same key sends the signal once.",
                     "schema": {"type": "string", "minLength": 1, "maxLength": 255}}],
                body=body("SignalPayload", required=False),
                responses={
                    "202": _json(ref("SignalResult"), "Queued; the run is woken"),
                    "200": _json(ref("SignalResult"), "Sent before with this key"),
                    **errors(*BODY_ERRORS, "404", "409", "503", notes={
                        "400": "Malformed JSON, a payload over the cap (value_too_large), or"
                        " a name that breaks the rule (invalid_name)",
                        "404": "No such run",
                        "409": "The run finished (run_finished) or is not durable (conflict)",
                        "422": "The payload is not a JSON object",
                    }),
                },
            ),
        },
        "/runs/{run_id}/children": {
            "get": op("getRunChildren", "A run's child runs (ctx.call, ctx.spawn, or started"
                      " with parent_run_id), oldest first.", tag="runs", parameters=[run_id],
                      responses={"200": _json(ref("RunChildren"), "The children"),
                                 **errors("404", "503", notes={"404": "No such run"})}),
        },
        "/runs/{run_id}/journal": {
            "get": op("getRunJournal", "A durable run's journal, to keep as a golden"
                      " journal and replay against new code (check mode).", tag="runs",
                      parameters=[run_id],
                      responses={"200": _json(ref("Journal"), "The journal"),
                                 **errors("404", "409", "503", notes={
                                     "404": "No such run",
                                     "409": "A DAG run (conflict): it has no journal"})}),
        },
        "/runs/{run_id}/parent": {
            "get": op("getRunParent", "A run's parent run, if it has one.", tag="runs",
                      parameters=[run_id],
                      responses={"200": _json(ref("RunParent"), "The parent (null: none)"),
                                 **errors("404", "503", notes={"404": "No such run"})}),
        },
        "/hooks": {
            "post": op(
                "createHook", "Create a hook for a durable run (from outside its workflow).",
                tag="hooks",
                description="Returns the token once: only its hash is stored. Executing it"
                " (POST /hooks/{token}) sends `signal` to the run with `metadata` merged over"
                " the payload.",
                body=body("CreateHook", required=True),
                responses={"201": _json(ref("HookCreated"), "Created"),
                           **errors(*BODY_ERRORS, "404", "409", "503", notes={
                               "400": "Malformed JSON, metadata over the cap"
                               " (value_too_large), or a signal name that breaks the rule"
                               " (invalid_name)",
                               "404": "No such run",
                               "409": "The run finished (run_finished) or is not durable",
                           })},
            ),
        },
        "/hooks/{token}": {
            "post": op(
                "executeHook", "Execute a hook: deliver its signal to its run, once.",
                tag="hooks", open_=True,
                description="No bearer key: the token is the credential. The body (a JSON"
                " object; empty: `{}`) is the signal's payload, with the hook's metadata"
                " merged over it. The same request sent again is answered 200 (duplicate);"
                " any other request to a used or expired hook is a 410, to an unknown token a"
                " 404, and neither changes anything. The hook is used up only with the signal"
                " it sends: a refused or failed request leaves it unused.",
                parameters=[path_param("token", "The hook's secret token.")],
                body=body("SignalPayload", required=False),
                responses={
                    "202": _json(ref("HookResult"), "Delivered"),
                    "200": _json(ref("HookResult"), "This very request, delivered before"),
                    **errors(*BODY_ERRORS, "404", "409", "410", "503", notes={
                        "400": "Malformed JSON, or a payload that, merged with the hook's"
                        " metadata, is over the cap (value_too_large): the hook stays"
                        " unused",
                        "404": "No such hook",
                        "409": "The hook's run has finished (run_finished)",
                        "422": "The payload is not a JSON object",
                    }),
                },
            ),
        },
        "/runs/{run_id}/resume": {
            "post": op(
                "resumeRun", "Call a durable run's workflow again (after a fix).", tag="runs",
                description="A paused run (a replay mismatch) resumes from its journal; any"
                " other waiting durable run is only woken. An empty body is `{}`.",
                parameters=[run_id], body=body("ResumeRun", required=False),
                responses={"200": _json(ref("ResumeResult"), "Resumed"),
                           **errors(*BODY_ERRORS, "404", "409", "503", notes={
                               "404": "No such run", "409": _ADMIN_409})},
            ),
        },
        "/runs/{run_id}/reset": {
            "post": op(
                "resetRun", "Forget a durable run's journal from a position on.", tag="runs",
                description="Operations at `to` and after (in the workflow's top scope) run"
                " again; the run's status is kept (a paused run resumes).",
                parameters=[run_id], body=body("ResetRun", required=True),
                responses={"200": _json(ref("ResetResult"), "Reset"),
                           **errors(*BODY_ERRORS, "404", "409", "503", notes={
                               "404": "No such run", "409": _ADMIN_409})},
            ),
        },
    }
