"""The OpenAPI 3.1 document of the orchestrator's HTTP API (served at `/openapi.json`).

Each resource declares its paths beside its handlers (runs.py, durable_runs.py, workflows.py,
triggers.py, built with operations.py); this module puts them together with the shared
components. Request bodies are the pydantic models the handlers validate with (models.py),
and every limit quoted comes from the module that enforces it (requests, services.runs,
events, idempotency), so the document cannot drift from the code by a constant. Response
shapes mirror what the handlers and services.views.run_view build;
tests/integration/test_api_fuzz.py checks the live API against this document, and
tests/unit/test_openapi_document.py pins it byte for byte."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel

from orchestrator.api import (
    approvals,
    bulk,
    cells,
    durable_runs,
    health,
    run_copies,
    runs,
    scripts,
    triggers,
    versions,
    workflow_stats,
    workflows,
)
from orchestrator.api.models import (
    AnswerApproval,
    BulkAction,
    CancelRun,
    CheckRuns,
    CreateHook,
    EmitEvent,
    MigrateRuns,
    PromoteVersion,
    PutScript,
    PutStateCell,
    RegisterVersion,
    RerunRun,
    ResetRun,
    ResumeRun,
    RetireVersion,
    RunEvent,
    RunExport,
    StartRun,
    SubmitScript,
)
from orchestrator.api.operations import op
from orchestrator.api.requests import MAX_BODY
from orchestrator.api.schemas import Schema, ref, response_schemas
from orchestrator.api.schemas import json_body as _json
from orchestrator.services.runs import RUN_ID_RE
from orchestrator.services.triggers.events import ID_RE
from orchestrator.services.values import EVENT_NAME_RULE, MAX_VALUE_BYTES, NAME_RULE
from orchestrator.strict_json import MAX_DEPTH

__all__ = ["BODY_MODELS", "openapi_document"]

BODY_MODELS: tuple[type[BaseModel], ...] = (StartRun, CancelRun, RerunRun, EmitEvent,
                                            ResumeRun, ResetRun, CreateHook, RunEvent,
                                            AnswerApproval, PutStateCell,
                                            SubmitScript, PutScript, RegisterVersion,
                                            PromoteVersion, RetireVersion, CheckRuns,
                                            MigrateRuns, RunExport, BulkAction)

# ---- request bodies --------------------------------------------------------------------

# Rules the services enforce beyond the models' own checks (a miss is a 400 there, not a
# 422): (model, field) -> pattern of the string it must be.
_PATTERNS: dict[tuple[str, str], re.Pattern[str]] = {
    ("StartRun", "run_id"): RUN_ID_RE,
    ("RerunRun", "run_id"): RUN_ID_RE,
    ("EmitEvent", "id"): ID_RE,
}
# A value over its cap is a 400 `value_too_large`; a name that breaks the rule a 400
# `invalid_name` (services/values.py).
_VALUE = f"Any JSON value, at most {MAX_VALUE_BYTES} bytes as compact UTF-8 JSON"
_FIELD_NOTES: dict[tuple[str, str], str] = {
    ("StartRun", "input"): f"{_VALUE}.",
    ("RerunRun", "input"): f"{_VALUE}; leave it out to keep the old run's input.",
    ("StartRun", "run_id"): "Choose the run id; a run id that exists already returns that run"
    " (200, created false).",
    ("EmitEvent", "data"): f"{_VALUE}.",
    ("EmitEvent", "name"): f"The event's name: {EVENT_NAME_RULE} (compared in Unicode NFC).",
    ("CreateHook", "signal"): f"The signal the hook delivers to the run: {NAME_RULE}"
    " (compared in Unicode NFC).",
    ("CreateHook", "metadata"): f"Merged over the payload it is executed with (a JSON"
    f" object); at most {MAX_VALUE_BYTES} bytes, and so is the payload merged with it.",
    ("RunEvent", "payload"): f"{_VALUE}.",
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


# ---- the document ----------------------------------------------------------------------


def _meta_paths() -> dict[str, Schema]:
    """The app's own plumbing (its handlers are in app.py): liveness and this document."""
    return {
        "/healthz": {
            "get": op("health", "Liveness.", tag="meta", open_=True,
                      responses={"200": _json(ref("Health"), "Alive")}),
        },
        "/openapi.json": {
            "get": op("openapi", "This document.", tag="meta", open_=True,
                      responses={"200": _json({"type": "object"}, "OpenAPI 3.1")}),
        },
    }


def _paths(retention: float) -> dict[str, Schema]:
    """Every resource's paths, each declared beside its handlers, in this order."""
    out: dict[str, Schema] = {}
    for part in (runs.paths(retention), bulk.paths(), durable_runs.paths(), run_copies.paths(),
                 approvals.paths(), cells.paths(), workflows.paths(),
                 workflow_stats.paths(), triggers.paths(),
                 scripts.paths(), versions.paths(), health.paths(), _meta_paths()):
        for path, item in part.items():
            if path in out:
                raise ValueError(f"path {path!r} is declared by two resources")
            out[path] = item
    return out


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
