"""The OpenAPI 3.1 document of the orchestrator's HTTP API (served at `/openapi.json`).

Request bodies are the pydantic models the handlers validate with (models.py), and
every limit quoted comes from the module that enforces it (requests, services.runs, events,
idempotency), so the document cannot drift from the code by a constant. Response shapes
mirror what app.py and services.views.run_view build; tests/integration/test_api_fuzz.py checks
the live API against this document."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel

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
from orchestrator.api.requests import MAX_BODY
from orchestrator.api.schemas import (
    ANY,
    JSON,
    RUN_STATUS,
    STRING,
    Schema,
    ref,
    response_schemas,
)
from orchestrator.api.schemas import json_body as _json
from orchestrator.services.events import ID_RE, MAX_EVENT_BYTES, NAME_RE
from orchestrator.services.idempotency import KEY_RE
from orchestrator.services.runs import MAX_INPUT_BYTES, RUN_ID_RE
from orchestrator.strict_json import MAX_DEPTH

__all__ = ["BODY_MODELS", "openapi_document"]

BODY_MODELS: tuple[type[BaseModel], ...] = (StartRun, CancelRun, RerunRun, EmitEvent,
                                            ResumeRun, ResetRun, CreateHook, RunEvent)

# ---- request bodies --------------------------------------------------------------------

# Rules the services enforce beyond the models' own checks (a miss is a 400 there, not a
# 422): (model, field) -> pattern of the string it must be.
_PATTERNS: dict[tuple[str, str], re.Pattern[str]] = {
    ("StartRun", "run_id"): RUN_ID_RE,
    ("RerunRun", "run_id"): RUN_ID_RE,
    ("EmitEvent", "name"): NAME_RE,
    ("EmitEvent", "id"): ID_RE,
}
_FIELD_NOTES: dict[tuple[str, str], str] = {
    ("StartRun", "input"): f"Any JSON value, at most {MAX_INPUT_BYTES} bytes serialized.",
    ("RerunRun", "input"): f"Any JSON value, at most {MAX_INPUT_BYTES} bytes serialized;"
    " leave it out to keep the old run's input.",
    ("StartRun", "run_id"): "Choose the run id; a run id that exists already returns that run"
    " (200, created false).",
    ("EmitEvent", "data"): f"Any JSON value, at most {MAX_EVENT_BYTES} bytes serialized.",
    ("EmitEvent", "id"): "The event id; an id seen before under the same name is a duplicate"
    " (200) and starts nothing new.",
}


def _string_branch(prop: Schema) -> Schema:
    """The part of a property's schema that describes it as a string (`str | None` is an
    anyOf of a string and a null)."""
    branches: list[Schema] = [prop, *prop.get("anyOf", ())]
    for branch in branches:
        if branch.get("type") == "string":
            return branch
    raise ValueError(f"no string branch in {prop!r}")


def _model_schemas(models: Iterable[type[BaseModel]]) -> dict[str, Schema]:
    """Each model's JSON schema under its name, with its `$defs` hoisted beside it (refs
    rewritten to `#/components/schemas/...`) and the services' extra rules added."""
    out: dict[str, Schema] = {}
    for model in models:
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        for name, sub in {**schema.pop("$defs", {}), model.__name__: schema}.items():
            if name in out and out[name] != sub:
                raise ValueError(f"two different schemas are both named {name!r}")
            out[name] = sub
    for (model_name, field), pattern in _PATTERNS.items():
        if model_name in out:
            _string_branch(out[model_name]["properties"][field])["pattern"] = pattern.pattern
    for (model_name, field), note in _FIELD_NOTES.items():
        if model_name in out:
            out[model_name]["properties"][field]["description"] = note
    return out


# ---- responses -------------------------------------------------------------------------

_ERROR_TEXT = {
    "410": "Gone: the hook was executed already (single-use) or expired",
    "400": "Malformed request: a body that is not JSON (or has duplicate keys, NaN or"
    f" Infinity, or nests deeper than {MAX_DEPTH} levels), or a parameter or field value"
    " the service refuses",
    "401": "Missing or invalid `Authorization: Bearer <key>`",
    "404": "Not found",
    "409": "Conflicts with the current state",
    "413": f"Body larger than {MAX_BODY} bytes (refused before it is parsed)",
    "422": "Body failed validation; the message names each wrong field",
    "503": "The store is unavailable or contended; retry later",
}


def _errors(*codes: str, notes: dict[str, str] | None = None) -> dict[str, Schema]:
    """Error responses: each code with its generic text, or the one `notes` gives it."""
    out: dict[str, Schema] = {}
    for code in codes:
        out[code] = {"description": (notes or {}).get(code, _ERROR_TEXT[code]),
                     "content": {JSON: {"schema": ref("Error")}}}
    if "401" in out:
        out["401"]["headers"] = {"WWW-Authenticate": {
            "description": "`Bearer`", "schema": {"type": "string"}}}
    return out


BODY_ERRORS = ("400", "413", "422")


def _op(operation_id: str, summary: str, responses: dict[str, Schema], *, tag: str,
        description: str | None = None, parameters: list[Schema] | None = None,
        body: Schema | None = None, open_: bool = False) -> Schema:
    """One operation; every one but the open ones needs a bearer key (401 without)."""
    op: Schema = {"operationId": operation_id, "summary": summary, "tags": [tag]}
    if description:
        op["description"] = description
    if parameters:
        op["parameters"] = parameters
    if body is not None:
        op["requestBody"] = body
    if open_:
        op["security"] = []
    else:
        responses = {**responses, **_errors("401")}
    op["responses"] = dict(sorted(responses.items()))
    return op


def _body(name: str, *, required: bool) -> Schema:
    return {"required": required, "content": {JSON: {"schema": ref(name)}}}


def _path(name: str, description: str, schema: Schema | None = None) -> Schema:
    return {"name": name, "in": "path", "required": True, "description": description,
            "schema": schema or {"type": "string", "minLength": 1}}


def _limit() -> Schema:
    return {"name": "limit", "in": "query", "required": False,
            "description": "Page size; an integer outside 1-100 is clamped to that range,"
            " anything else is a 400.",
            "schema": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20}}


# ---- the document ----------------------------------------------------------------------


def _paths(retention: float) -> dict[str, Schema]:
    run_id = _path("run_id", "A run id (unknown, expired or malformed: 404).",
                   {"type": "string", "pattern": RUN_ID_RE.pattern})
    schedule = _path("name", "A scheduled workflow.")
    started = ref("Started")
    view = ref("RunView")
    hours = retention / 3600
    idempotency = {
        "name": "Idempotency-Key", "in": "header", "required": False,
        "description": "Makes a retry safe: the same key with the same body (key order does"
        " not matter) returns the run the first request started (200); the same key with"
        f" another body is a 422. Keys are kept {hours:g} h. 1-255 printable ASCII"
        " characters without spaces (else 400).",
        "schema": {"type": "string", "minLength": 1, "maxLength": 255,
                   "pattern": KEY_RE.pattern},
    }
    schedule_action = _errors("404", "503", notes={"404": "No schedule for that workflow"})
    return {
        "/runs": {
            "post": _op(
                "startRun", "Start a run of a workflow.", tag="runs",
                description="A `run_id` that exists already returns the existing run"
                " (200, `created: false`); see also `Idempotency-Key`.",
                parameters=[idempotency], body=_body("StartRun", required=True),
                responses={
                    "201": _json(started, "Started"),
                    "200": _json(started, "The run existed already (same run_id, or same"
                                 " Idempotency-Key and body)"),
                    **_errors(*BODY_ERRORS, "404", "409", "503", notes={
                        "404": "No such workflow",
                        "409": "A concurrency or throttle write lost a race",
                        "422": "Body failed validation, or the Idempotency-Key was used with"
                        " another body (code idempotency_key_reused)",
                    }),
                },
            ),
            "get": _op(
                "listRuns", "Runs, newest first (of one workflow, or of all).", tag="runs",
                description="A status filter is applied after the read, so a page may hold"
                " fewer than `limit` runs while `next_cursor` still leads on.",
                parameters=[
                    {"name": "workflow", "in": "query", "required": False,
                     "description": "Only runs of this workflow.", "schema": STRING},
                    {"name": "status", "in": "query", "required": False,
                     "description": "Only runs in this status (anything else: 400).",
                     "schema": RUN_STATUS},
                    _limit(),
                    {"name": "cursor", "in": "query", "required": False,
                     "description": "The `next_cursor` of the previous page (opaque; anything"
                     " else: 400).", "schema": STRING},
                ],
                responses={"200": _json(ref("RunList"), "A page of runs"),
                           **_errors("400", "503")},
            ),
        },
        "/runs/{run_id}": {
            "get": _op("getRun", "A run with its steps.", tag="runs", parameters=[
                run_id, {"name": "steps", "in": "query", "required": False,
                         "description": "false: the run alone, without its steps (one read"
                         " of the run's row: what a poller of the status needs)",
                         "schema": {"type": "string", "enum": ["true", "false"],
                                    "default": "true"}},
                {"name": "wait", "in": "query", "required": False,
                 "description": "Seconds (0 to 25) to hold the answer while the run is queued"
                 " or running: it comes as soon as the run ends (within 0.1 s), or when the"
                 " time is up, whichever is first. A follower's long poll.",
                 "schema": {"type": "number", "minimum": 0, "maximum": 25, "default": 0}}],
                       responses={"200": _json(view, "The run"),
                                  **_errors("400", "404", "503",
                                            notes={"404": "No such run"})}),
        },
        "/runs/{run_id}/events": {
            "get": _op("getRunEvents", "Every transition of a run and its steps, oldest"
                       " first, and its custom events.", tag="runs", parameters=[run_id],
                       responses={"200": _json(ref("RunEvents"), "The run's history"),
                                  **_errors("404", "503", notes={"404": "No such run"})}),
            "post": _op("addRunEvent", "Add a custom event to a run (kept beside its"
                        " transitions, for as long as the run).", tag="runs",
                        parameters=[run_id], body=_body("RunEvent", required=True),
                        responses={"201": _json(ref("CustomEvent"), "Added"),
                                   **_errors(*BODY_ERRORS, "404", "503",
                                             notes={"404": "No such run"})}),
        },
        "/runs/{run_id}/cancel": {
            "post": _op(
                "cancelRun", "Cancel a queued or running run.", tag="runs",
                description="Nothing new starts; in-flight steps land; the rest is skipped."
                " An empty body is `{}`.",
                parameters=[run_id], body=_body("CancelRun", required=False),
                responses={"200": _json(view, "The run, being cancelled"),
                           **_errors(*BODY_ERRORS, "404", "409", "503", notes={
                               "404": "No such run",
                               "409": "The run already finished (code run_finished)",
                           })},
            ),
        },
        "/runs/{run_id}/rerun": {
            "post": _op(
                "rerunRun", "A new run of a failed or cancelled run's definition.",
                tag="runs",
                description="Reuses every successful step's output and runs the rest again."
                " An empty body is `{}`.",
                parameters=[run_id], body=_body("RerunRun", required=False),
                responses={
                    "201": _json(started, "Started (rerun_of names the old run)"),
                    "200": _json(started, "A run with the chosen run_id existed already"),
                    **_errors(*BODY_ERRORS, "404", "409", "503", notes={
                        "404": "No such run",
                        "409": "The run is still going (run_not_finished) or it succeeded"
                        " (nothing_to_rerun)",
                    }),
                },
            ),
        },
        "/runs/{run_id}/signals/{name}": {
            "post": _op(
                "sendSignal", "Send a signal to a durable run.", tag="runs",
                description="Signals queue per run and name until a wait consumes them (first"
                " in, first out): one sent before the run waits is not lost. The body is the"
                " payload (a JSON object; empty: `{}`). With an `Idempotency-Key`, a resend"
                " queues nothing (200, `duplicate: true`).",
                parameters=[run_id, _path("name", "The signal's name.", {
                    "type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"}),
                    {"name": "Idempotency-Key", "in": "header", "required": False,
                     "description": "The same key sends the signal once.",
                     "schema": {"type": "string", "minLength": 1, "maxLength": 255}}],
                body=_body("SignalPayload", required=False),
                responses={
                    "202": _json(ref("SignalResult"), "Queued; the run is woken"),
                    "200": _json(ref("SignalResult"), "Sent before with this key"),
                    **_errors(*BODY_ERRORS, "404", "409", "503", notes={
                        "404": "No such run",
                        "409": "The run finished (run_finished) or is not durable (conflict)",
                        "422": "The payload is not a JSON object",
                    }),
                },
            ),
        },
        "/runs/{run_id}/children": {
            "get": _op("getRunChildren", "A run's child runs (ctx.call, ctx.spawn, or started"
                       " with parent_run_id), oldest first.", tag="runs", parameters=[run_id],
                       responses={"200": _json(ref("RunChildren"), "The children"),
                                  **_errors("404", "503", notes={"404": "No such run"})}),
        },
        "/runs/{run_id}/journal": {
            "get": _op("getRunJournal", "A durable run's journal, to keep as a golden"
                       " journal and replay against new code (check mode).", tag="runs",
                       parameters=[run_id],
                       responses={"200": _json(ref("Journal"), "The journal"),
                                  **_errors("404", "409", "503", notes={
                                      "404": "No such run",
                                      "409": "A DAG run (conflict): it has no journal"})}),
        },
        "/runs/{run_id}/parent": {
            "get": _op("getRunParent", "A run's parent run, if it has one.", tag="runs",
                       parameters=[run_id],
                       responses={"200": _json(ref("RunParent"), "The parent (null: none)"),
                                  **_errors("404", "503", notes={"404": "No such run"})}),
        },
        "/hooks": {
            "post": _op(
                "createHook", "Create a hook for a durable run (from outside its workflow).",
                tag="hooks",
                description="Returns the token once: only its hash is stored. Executing it"
                " (POST /hooks/{token}) sends `signal` to the run with `metadata` merged over"
                " the payload.",
                body=_body("CreateHook", required=True),
                responses={"201": _json(ref("HookCreated"), "Created"),
                           **_errors(*BODY_ERRORS, "404", "409", "503", notes={
                               "404": "No such run",
                               "409": "The run finished (run_finished) or is not durable",
                           })},
            ),
        },
        "/hooks/{token}": {
            "post": _op(
                "executeHook", "Execute a hook: deliver its signal to its run, once.",
                tag="hooks", open_=True,
                description="No bearer key: the token is the credential. The body (a JSON"
                " object; empty: `{}`) is the signal's payload, with the hook's metadata"
                " merged over it. The same request sent again is answered 200 (duplicate);"
                " any other request to a used or expired hook is a 410, to an unknown token a"
                " 404, and neither changes anything.",
                parameters=[_path("token", "The hook's secret token.")],
                body=_body("SignalPayload", required=False),
                responses={
                    "202": _json(ref("HookResult"), "Delivered"),
                    "200": _json(ref("HookResult"), "This very request, delivered before"),
                    **_errors(*BODY_ERRORS, "404", "409", "410", "503", notes={
                        "404": "No such hook",
                        "409": "The hook's run has finished (run_finished)",
                        "422": "The payload is not a JSON object",
                    }),
                },
            ),
        },
        "/runs/{run_id}/resume": {
            "post": _op(
                "resumeRun", "Call a durable run's workflow again (after a fix).", tag="runs",
                description="A paused run (a replay mismatch) resumes from its journal; any"
                " other waiting durable run is only woken. An empty body is `{}`.",
                parameters=[run_id], body=_body("ResumeRun", required=False),
                responses={"200": _json(ref("ResumeResult"), "Resumed"),
                           **_errors(*BODY_ERRORS, "404", "409", "503", notes={
                               "404": "No such run",
                               "409": "The run finished (run_finished), is not durable, or is"
                               " being advanced right now (conflict: try again)",
                           })},
            ),
        },
        "/runs/{run_id}/reset": {
            "post": _op(
                "resetRun", "Forget a durable run's journal from a position on.", tag="runs",
                description="Operations at `to` and after (in the workflow's top scope) run"
                " again; the run's status is kept (a paused run resumes).",
                parameters=[run_id], body=_body("ResetRun", required=True),
                responses={"200": _json(ref("ResetResult"), "Reset"),
                           **_errors(*BODY_ERRORS, "404", "409", "503", notes={
                               "404": "No such run",
                               "409": "The run finished (run_finished), is not durable, or is"
                               " being advanced right now (conflict: try again)",
                           })},
            ),
        },
        "/workflows": {
            "get": _op("listWorkflows", "The manifest's workflows.", tag="workflows",
                       responses={"200": _json(ref("Workflows"), "The workflows")}),
        },
        "/events": {
            "post": _op(
                "emitEvent", "Store an event and start the workflows it triggers.",
                tag="events",
                description="Each workflow with a matching `on:` trigger starts one run,"
                " with a run id derived from the event, so a redelivery starts nothing new.",
                body=_body("EmitEvent", required=True),
                responses={
                    "201": _json(ref("EmitResult"), "Stored"),
                    "200": _json(ref("EmitResult"), "A duplicate of a stored event"),
                    **_errors(*BODY_ERRORS, "409", "503",
                              notes={"409": "A concurrency or throttle write lost a race"}),
                },
            ),
            "get": _op(
                "listEvents", "The newest stored events of one name.", tag="events",
                parameters=[{"name": "name", "in": "query", "required": True,
                             "description": "The event name (missing: 400).",
                             "schema": {"type": "string", "minLength": 1}}, _limit()],
                responses={"200": _json(ref("Events"), "Events, newest first"),
                           **_errors("400", "503")},
            ),
        },
        "/webhooks/{name}": {
            "post": _op(
                "deliverWebhook", "A signed delivery starts the webhook's workflow.",
                tag="webhooks", open_=True,
                description="No bearer key: the delivery's signature is checked on the raw"
                " bytes instead (`github`: X-Hub-Signature-256 and X-GitHub-Delivery;"
                " `standard`: webhook-id, webhook-timestamp, webhook-signature; `stripe`:"
                " Stripe-Signature), and a failure is a 401 with nothing stored. The"
                " delivery id decides the run, so a redelivery returns the first run"
                " (200). A JSON body is parsed as JSON (400 if it is not), any other body"
                " is taken as UTF-8 text.",
                parameters=[
                    _path("name", "The webhook's name in the manifest."),
                    *({"name": h, "in": "header", "required": False, "schema": STRING}
                      for h in ("X-Hub-Signature-256", "X-GitHub-Delivery", "webhook-id",
                                "webhook-timestamp", "webhook-signature",
                                "Stripe-Signature")),
                ],
                body={"required": False, "content": {JSON: {"schema": ANY},
                                                     "text/plain": {"schema": STRING}}},
                responses={
                    "202": _json(ref("WebhookResult"), "Accepted: the run started"),
                    "200": _json(ref("WebhookResult"), "A redelivery: the first run"),
                    **_errors("400", "401", "404", "409", "413", "503", notes={
                        "401": "The signature is missing, malformed, wrong or stale",
                        "404": "No such webhook",
                        "409": "A concurrency or throttle write lost a race",
                    }),
                },
            ),
        },
        "/schedules": {
            "get": _op("listSchedules", "Every schedule and its state.", tag="schedules",
                       responses={"200": _json(ref("Schedules"), "The schedules"),
                                  **_errors("503")}),
        },
        "/schedules/{name}/pause": {
            "post": _op("pauseSchedule", "Stop firing until resumed.", tag="schedules",
                        parameters=[schedule],
                        responses={"200": _json(ref("Schedule"), "The schedule"),
                                   **schedule_action}),
        },
        "/schedules/{name}/resume": {
            "post": _op("resumeSchedule", "Fire again, from the next tick after now.",
                        tag="schedules", parameters=[schedule],
                        responses={"200": _json(ref("Schedule"), "The schedule"),
                                   **schedule_action}),
        },
        "/schedules/{name}/trigger": {
            "post": _op("triggerSchedule", "Fire now, out of schedule (the next tick stays).",
                        tag="schedules", parameters=[schedule],
                        responses={"200": _json(ref("Fired"), "The runs started"),
                                   **schedule_action,
                                   **_errors("400", "409", notes={
                                       "400": "The fire failed (e.g. its forEach rows"
                                       " could not be fetched)",
                                       "409": "A concurrency write lost a race",
                                   })}),
        },
        "/healthz": {
            "get": _op("health", "Liveness.", tag="meta", open_=True,
                       responses={"200": _json(ref("Health"), "Alive")}),
        },
        "/openapi.json": {
            "get": _op("openapi", "This document.", tag="meta", open_=True,
                       responses={"200": _json({"type": "object"}, "OpenAPI 3.1")}),
        },
    }


def openapi_document(version: str, *, idempotency_retention: float = 24 * 3600.0
                     ) -> dict[str, Any]:
    """The document; `idempotency_retention` (seconds) is quoted for Idempotency-Key."""
    schemas = _model_schemas(BODY_MODELS)
    for name, schema in response_schemas().items():
        if name in schemas:
            raise ValueError(f"response schema {name!r} clashes with a request model")
        schemas[name] = schema
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "orchestrator",
            "version": version,
            "description": (
                "Durable workflows over stateless HTTP functions.\n\n"
                "Every route but `/healthz`, `/openapi.json` and `/webhooks/{name}` (which"
                " checks its own signature) needs `Authorization: Bearer <key>` (keys from"
                " `orchestrator keys create`), unless the server runs with"
                " ORCH_API_AUTH=off.\n\n"
                "Every error is JSON `{\"error\": {\"code\", \"message\"}}`. Bodies are"
                f" read strictly: more than {MAX_BODY} bytes ({MAX_BODY / 2**20:g} MiB) is a"
                f" 413 before anything is parsed; nesting deeper than {MAX_DEPTH} levels,"
                " duplicate object keys, NaN and Infinity are a 400; a body that parses but"
                " does not fit its schema (an unknown field included) is a 422. An"
                f" `Idempotency-Key` on POST /runs is kept {idempotency_retention / 3600:g}"
                " h. A 503 is retryable."
            ),
        },
        "tags": [{"name": t} for t in ("runs", "workflows", "events", "webhooks",
                                       "schedules", "meta")],
        "security": [{"bearer": []}],
        "paths": _paths(idempotency_retention),
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {
                "type": "http", "scheme": "bearer",
                "description": "An API key from `orchestrator keys create`."}},
        },
    }
