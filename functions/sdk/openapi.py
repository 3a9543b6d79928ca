"""The document a `FunctionApp` serves at GET /openapi.json: OpenAPI 3.1, one POST
operation per step route and per durable workflow, the request schemas of
`protocol`, and the error answers each may give."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from functions.sdk import signing
from functions.sdk.durable.workflow import Workflow
from functions.sdk.handlers import StepRoute
from functions.sdk.protocol import DURABLE_PREFIX, DurableRequestBody, ErrorBody, StepRequestBody

__all__ = ["document"]


def document(
    title: str,
    steps: Iterable[StepRoute],
    workflows: Sequence[Workflow],
    protocols: Sequence[int],
    signed: bool,
) -> dict[str, Any]:
    """The OpenAPI document of an app serving `steps` and `workflows`."""
    ref = "#/components/schemas/{model}"
    request_schema = StepRequestBody.model_json_schema(ref_template=ref)
    error_schema = ErrorBody.model_json_schema(ref_template=ref)
    schemas: dict[str, Any] = {
        **request_schema.pop("$defs", {}),
        **error_schema.pop("$defs", {}),
        "StepRequest": request_schema,
        "ErrorBody": error_schema,
    }

    def error(description: str) -> dict[str, Any]:
        return {
            "description": description,
            "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}
            },
        }

    responses: dict[str, Any] = {
        "200": {
            "description": "Success; the JSON body is the step's output.",
            "content": {"application/json": {"schema": {}}},
        },
        "400": error("The body is not JSON or not a step request."),
        "422": error("Terminal failure: the orchestrator will not retry."),
        "500": error("Unhandled error in the handler: retried."),
        "503": {
            **error("Retryable failure."),
            "headers": {
                "Retry-After": {
                    "description": "Seconds to wait before the next attempt.",
                    "schema": {"type": "integer", "minimum": 0},
                }
            },
        },
    }
    parameters: list[dict[str, Any]] = [
        _header(signing.IDEMPOTENCY_HEADER, "Same for every attempt of a step.", False),
        _header(signing.RUN_ID_HEADER, "Run id, for tracing.", False),
        _header(signing.STEP_HEADER, "Step name, for tracing.", False),
        _header(signing.ATTEMPT_HEADER, "Attempt number, for tracing.", False),
    ]
    if signed:
        responses["401"] = error("Missing, stale or invalid signature.")
        parameters += [
            _header(signing.TIMESTAMP_HEADER, "Unix seconds when the call was signed.", True),
            _header(signing.SIGNATURE_HEADER, "v1=<hex HMAC-SHA256>, see signing.", True),
        ]
    paths: dict[str, Any] = {}
    for entry in steps:
        operation: dict[str, Any] = {
            "operationId": _operation_id(entry.path),
            "parameters": parameters,
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {"schema": {"$ref": "#/components/schemas/StepRequest"}}
                },
            },
            "responses": dict(sorted(responses.items())),
        }
        if entry.summary:
            operation["summary"] = entry.summary
        if entry.description:
            operation["description"] = entry.description
        paths[entry.path] = {"post": operation}
    for wf in workflows:
        paths[DURABLE_PREFIX + wf.name] = {"post": {
            "operationId": _operation_id(DURABLE_PREFIX + wf.name),
            "summary": f"Durable workflow {wf.name}: one call (replay, then advance)",
            "x-durable-workflow": {**wf.describe(), "protocols": list(protocols)},
            "parameters": parameters,
            "requestBody": {"required": True, "content": {"application/json": {
                "schema": {"$ref": "#/components/schemas/DurableRequest"}}}},
            "responses": {
                "200": {"description": "The operations for the orchestrator to commit.",
                        "content": {"application/json": {"schema": {}}}},
                "400": error("The body is not a workflow call."),
                **({"401": responses["401"]} if "401" in responses else {}),
            },
        }}
    if workflows:
        durable = DurableRequestBody.model_json_schema(ref_template=ref)
        schemas.update(durable.pop("$defs", {}))
        schemas["DurableRequest"] = durable
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": "1"},
        "paths": paths,
        "components": {"schemas": schemas},
    }


def _header(name: str, description: str, required: bool) -> dict[str, Any]:
    return {
        "name": name,
        "in": "header",
        "required": required,
        "description": description,
        "schema": {"type": "string"},
    }


def _operation_id(path: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", path).strip("_") or "root"
