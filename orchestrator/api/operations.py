"""Builders of the OpenAPI document's operations (openapi.py): one operation with its
error responses, its parameters and its body. Each resource module (runs.py, durable.py,
workflows.py, triggers.py) declares its own paths with these, next to its handlers."""

from __future__ import annotations

from orchestrator.api.requests import MAX_BODY
from orchestrator.api.schemas import JSON, Schema, ref
from orchestrator.services.runs import RUN_ID_RE
from orchestrator.strict_json import MAX_DEPTH

__all__ = ["BODY_ERRORS", "body", "errors", "limit_param", "op", "path_param",
           "run_id_param"]

_ERROR_TEXT = {
    "410": "Gone: the hook was executed already (single-use) or expired",
    "400": "Malformed request: a body that is not JSON (or has duplicate keys, NaN or"
    f" Infinity, or nests deeper than {MAX_DEPTH} levels), or a parameter or field value"
    " the service refuses",
    "401": "Missing or invalid `Authorization: Bearer <key>`",
    "403": "Authenticated, but not allowed",
    "404": "Not found",
    "409": "Conflicts with the current state",
    "413": f"Body larger than {MAX_BODY} bytes (refused before it is parsed)",
    "422": "Body failed validation; the message names each wrong field",
    "503": "The store is unavailable or contended; retry later",
}


def errors(*codes: str, notes: dict[str, str] | None = None) -> dict[str, Schema]:
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


def op(operation_id: str, summary: str, responses: dict[str, Schema], *, tag: str,
       description: str | None = None, parameters: list[Schema] | None = None,
       body: Schema | None = None, open_: bool = False) -> Schema:
    """One operation; every one but the open ones needs a bearer key (401 without)."""
    out: Schema = {"operationId": operation_id, "summary": summary, "tags": [tag]}
    if description:
        out["description"] = description
    if parameters:
        out["parameters"] = parameters
    if body is not None:
        out["requestBody"] = body
    if open_:
        out["security"] = []
    else:
        responses = {**responses, **errors("401")}
    out["responses"] = dict(sorted(responses.items()))
    return out


def body(name: str, *, required: bool) -> Schema:
    return {"required": required, "content": {JSON: {"schema": ref(name)}}}


def path_param(name: str, description: str, schema: Schema | None = None) -> Schema:
    return {"name": name, "in": "path", "required": True, "description": description,
            "schema": schema or {"type": "string", "minLength": 1}}


def run_id_param() -> Schema:
    return path_param("run_id", "A run id (unknown, expired or malformed: 404).",
                      {"type": "string", "pattern": RUN_ID_RE.pattern})


def limit_param() -> Schema:
    return {"name": "limit", "in": "query", "required": False,
            "description": "Page size; an integer outside 1-100 is clamped to that range,"
            " anything else is a 400.",
            "schema": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20}}
