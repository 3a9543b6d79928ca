"""The OpenAPI 3.1 document of the orchestrator's HTTP API, built from the same pydantic
models the handlers validate bodies with."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

__all__ = ["openapi_document"]


def _error(description: str) -> dict[str, Any]:
    return {"description": description,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}


def _json(schema: dict[str, Any], description: str = "OK") -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def openapi_document(start: type[BaseModel], cancel: type[BaseModel], version: str
                     ) -> dict[str, Any]:
    run_id = {"name": "run_id", "in": "path", "required": True, "schema": {"type": "string"}}
    bad = {"400": _error("Malformed body or parameter"), "413": _error("Body too large"),
           "422": _error("Body failed validation")}
    view = {"$ref": "#/components/schemas/RunView"}
    return {
        "openapi": "3.1.0",
        "info": {"title": "orchestrator", "version": version},
        "paths": {
            "/runs": {
                "post": {
                    "operationId": "startRun",
                    "summary": "Start a run (a known run_id returns the existing run).",
                    "requestBody": {"required": True, "content": {"application/json": {
                        "schema": {"$ref": "#/components/schemas/StartRun"}}}},
                    "responses": {
                        "201": _json({"$ref": "#/components/schemas/Started"}, "Started"),
                        "200": _json({"$ref": "#/components/schemas/Started"}, "Existing run"),
                        "404": _error("No such workflow"), **bad,
                    },
                },
                "get": {
                    "operationId": "listRuns",
                    "summary": "Runs of a workflow, newest first.",
                    "parameters": [
                        {"name": "workflow", "in": "query", "required": True,
                         "schema": {"type": "string"}},
                        {"name": "limit", "in": "query",
                         "schema": {"type": "integer", "minimum": 1, "maximum": 100}},
                        {"name": "cursor", "in": "query", "schema": {"type": "string"}},
                    ],
                    "responses": {"200": _json({"type": "object"}),
                                  "400": _error("Missing or malformed parameter")},
                },
            },
            "/runs/{run_id}": {
                "get": {
                    "operationId": "getRun",
                    "parameters": [run_id],
                    "responses": {"200": _json(view), "404": _error("No such run")},
                },
            },
            "/runs/{run_id}/cancel": {
                "post": {
                    "operationId": "cancelRun",
                    "summary": "Nothing new starts; in-flight steps land; the rest is skipped.",
                    "parameters": [run_id],
                    "requestBody": {"content": {"application/json": {
                        "schema": {"$ref": "#/components/schemas/CancelRun"}}}},
                    "responses": {"200": _json(view), "404": _error("No such run"),
                                  "409": _error("The run already finished"), **bad},
                },
            },
            "/workflows": {"get": {"operationId": "listWorkflows",
                                   "responses": {"200": _json({"type": "object"})}}},
            "/healthz": {"get": {"operationId": "health",
                                 "responses": {"200": _json({"type": "object"})}}},
        },
        "components": {
            "schemas": {
                "StartRun": start.model_json_schema(),
                "CancelRun": cancel.model_json_schema(),
                "Started": {"type": "object", "required": ["run_id", "workflow", "status"],
                            "properties": {"run_id": {"type": "string"},
                                           "workflow": {"type": "string"},
                                           "status": {"type": "string"},
                                           "created": {"type": "boolean"}}},
                "RunView": {"type": "object",
                            "required": ["run_id", "workflow", "status", "steps"],
                            "properties": {"run_id": {"type": "string"},
                                           "workflow": {"type": "string"},
                                           "status": {"enum": ["running", "success", "failed",
                                                              "killed"]},
                                           "steps": {"type": "array",
                                                     "items": {"type": "object"}}}},
                "Error": {"type": "object", "required": ["error"], "properties": {
                    "error": {"type": "object", "required": ["code", "message"],
                              "properties": {"code": {"type": "string"},
                                             "message": {"type": "string"}}}}},
            }
        },
    }
