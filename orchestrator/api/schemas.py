"""The pieces the OpenAPI document is built of (openapi.py): small schema builders, the
shared types, and the schemas of every response body (mirroring what the handlers and
services.views build)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from orchestrator.engine.states import RunStatus, StepStatus

__all__ = [
    "ANY", "JSON", "RUN_STATUS", "STEP_STATUS", "STRING", "TIME", "Schema", "json_body",
    "nullable", "object_schema", "ref", "response_schemas",
]

JSON = "application/json"
Schema = dict[str, Any]



def ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def nullable(schema: Schema) -> Schema:
    return {"anyOf": [schema, {"type": "null"}]}


def object_schema(required: Iterable[str], properties: dict[str, Schema], *, open_: bool = False,
            description: str | None = None) -> Schema:
    """An object schema; `open_` allows properties beyond those listed."""
    out: Schema = {"type": "object", "required": list(required), "properties": properties}
    if not open_:
        out["additionalProperties"] = False
    if description:
        out["description"] = description
    return out


def json_body(schema: Schema, description: str) -> Schema:
    return {"description": description, "content": {JSON: {"schema": schema}}}


STRING: Schema = {"type": "string"}
TIME: Schema = {"type": "number", "description": "Unix time in seconds"}
ANY: Schema = {}
# `paused`: a durable run stopped by a replay mismatch (running underneath).
RUN_STATUS: Schema = {"type": "string", "enum": [*(s.value for s in RunStatus), "paused"]}
# A durable run's operations add: timed_out (a wait that ended by its timeout), waiting
# (a sleep or signal), retrying (a step between attempts), paused (a mismatch there).
STEP_STATUS: Schema = {"type": "string", "enum": [
    *(s.value for s in StepStatus), "timed_out", "waiting", "retrying", "paused"]}


# A step (or a durable run) held back by its backend's `limits:` (runners/backend_gate.py).
WAITING_FOR: Schema = {
    "type": "object", "required": ["backend", "limit"],
    "description": "Set while the step waits for its backend's limits (not called yet)",
    "properties": {
        "backend": STRING,
        "limit": {"type": "string", "enum": ["concurrency", "rate", "retry_after"],
                  "description": "concurrency: the backend has its limit of calls in"
                  " flight; rate: the next start under its rate is later; retry_after: a"
                  " 429's Retry-After holds it off"},
        "limits": {"type": "object", "description": "The backend's limits as declared"
                   " ({concurrency: N, rate: 'R/period'})"},
        "until": {**TIME, "description": "When it tries again at the latest (a freed slot"
                  " wakes it sooner)"},
    },
}


# How a trigger was taken (services/admission/result.py): every answer the same.
TAKEN: dict[str, Schema] = {
    "duplicate": {"type": "boolean",
                  "description": "true: this trigger was seen before (same Idempotency-Key,"
                  " event id, delivery id or run id); answered with the run it made then"},
    "debounced": {"type": "boolean",
                  "description": "true: a new trigger that joined a debounced burst already"
                  " queued (the run is the burst's; its input is now this trigger's)"},
    "outcome": {"type": "string",
                "enum": ["created", "queued", "skipped", "duplicate", "debounced",
                         "batched"]},
}


def response_schemas() -> dict[str, Schema]:
    nullable_time = nullable(TIME)
    nullable_string = nullable(STRING)
    trigger = nullable({"type": "object", "description": "Where the run came from:"
                         " {source: api | webhook | event | schedule | manual | rerun, ...ids}"})
    return {
        "Error": object_schema(["error"], {"error": object_schema(["code", "message"], {
            "code": {"type": "string", "description": "Stable, machine-readable"},
            "message": {"type": "string", "description": "Names the field, run or step"},
        })}),
        "Started": object_schema(["run_id", "workflow", "status", "created"], {
            "run_id": STRING, "workflow": STRING, "status": RUN_STATUS,
            "created": {"type": "boolean", "description": "false: the run existed already"},
            "error": {"type": "object", "description": "Why the run ended, if it has"},
            "rerun_of": nullable_string, **TAKEN,
        }),
        "StepView": object_schema(["step", "status", "attempts", "output", "error"], {
            "step": STRING, "status": STEP_STATUS,
            "attempts": {"type": "integer", "minimum": 0},
            "output": ANY, "error": ANY,
            "depends_on": {"type": "array", "items": STRING},
            "started_at": nullable_time, "finished_at": nullable_time,
            "output_bytes": nullable({"type": "integer", "minimum": 0}),
            "kind": {"type": "string", "description": "A durable run's operation: step, sleep,"
                     " signal, patch"},
            "scope": {"type": "string", "description": "Its scope ('' for the top)"},
            "position": nullable({"type": "integer", "minimum": 0}),
            "id": nullable_string,
            "until": nullable_time,
            "waiting_for": WAITING_FOR,
            "reused_from": {"type": "string", "description": "A rerun's step carried over"
                            " from the run it reruns (that run's id): its output copied,"
                            " the step not called again"},
        }, description="A step without a row yet shows only step, status (blocked),"
                       " attempts, output and error. A durable run's steps are its"
                       " operations, in order (kind, scope, position, id; until: when a"
                       " wait's timer ends)."),
        "Admission": object_schema(["group", "key", "policy", "throttle_key", "admit_at"], {
            "group": nullable_string, "key": nullable_string, "policy": nullable_string,
            "throttle_key": nullable_string, "admit_at": nullable_time,
            "limit": {**nullable({"type": "integer", "minimum": 1}),
                      "description": "The first concurrency limit's N"},
            "limits": {"type": "array", "description": "Every concurrency limit the run"
                       " must fit (group, key, limit, policy; turns: the key its waiting"
                       " runs take turns by)", "items": object_schema(
                           ["group", "key", "limit", "policy", "turns"], {
                               "group": STRING, "key": STRING, "policy": STRING,
                               "limit": {"type": "integer", "minimum": 1},
                               "turns": STRING})},
            "priority": {"type": "integer", "minimum": 0, "maximum": 100,
                         "description": "Its priority among runs waiting with it"},
        }),
        "RunView": object_schema(
            ["run_id", "workflow", "status", "input", "error", "created_at", "started_at",
             "finished_at", "kill_reason", "trigger", "rerun_of", "admission"],
            {"run_id": STRING, "workflow": STRING, "status": RUN_STATUS, "input": ANY,
             "error": nullable({"type": "object"}), "created_at": TIME,
             "started_at": nullable_time, "finished_at": nullable_time,
             "kill_reason": nullable_string, "trigger": trigger, "rerun_of": nullable_string,
             "imported": {**nullable_string, "description": "Copied from another stack"
                          " (`runs pull`): where from. Nothing here advances it"},
             "parent_run_id": {**nullable_string, "description": "The run's parent (a"
                               " durable run's child, or started with parent_run_id)"},
             "admission": nullable(ref("Admission")),
             "steps": {"type": "array", "items": ref("StepView"),
                       "description": "In dependency order (left out with ?steps=false)"},
             "kind": {"type": "string", "enum": ["durable"],
                      "description": "Set on a durable workflow's run"},
             "output": {**ANY, "description": "A durable run's result, once it succeeded"},
             "paused": nullable({"type": "object", "description": "A paused durable run:"
                                  " the replay mismatch, both operations shown"}),
             "version": {**nullable_string, "description": "A durable run's version of its"
                         " backend's code: it is called there (none: its backend has no"
                         " versions registered)"},
             "waiting": nullable({"type": "object", "description": "What a durable run"
                                   " waits for (kind, name, until)"}),
             "waiting_for": nullable(WAITING_FOR),
             "cost": ref("RunCost")},
        ),
        "RunCost": object_schema(
            ["requests", "total_requests", "dollars", "prices_date"],
            {"requests": {"type": "object", "additionalProperties": {"type": "integer"},
                          "description": "AWS requests made for the run, by"
                          " service.Operation (e.g. dynamodb.UpdateItem), most first"},
             "total_requests": {"type": "integer", "minimum": 0},
             "dollars": {"type": "number", "description": "Estimated at on-demand prices"
                         " (each request priced alone: a floor)"},
             "prices_date": {**STRING, "description": "The date of the prices (YYYY-MM-DD)"}},
            description="What the run cost (left out with ?steps=false): the requests"
                        " counted where they were made and stored with its rows",
        ),
        "RunSummary": object_schema(
            ["run_id", "workflow", "status", "created_at", "started_at", "finished_at",
             "trigger", "rerun_of"],
            {"run_id": STRING, "workflow": STRING, "status": RUN_STATUS, "created_at": TIME,
             "started_at": nullable_time, "finished_at": nullable_time, "trigger": trigger,
             "rerun_of": nullable_string},
        ),
        "RunList": object_schema(["runs", "next_cursor"], {
            "runs": {"type": "array", "items": ref("RunSummary")},
            "next_cursor": nullable({"type": "string", "description": "Pass as `cursor`"
                                      " for the next page; null on the last one"}),
        }),
        "HistoryEntry": object_schema(["at", "type"], {
            "at": TIME, "type": {"type": "string", "description": "e.g. run.running,"
                                 " step.started, step.success"},
            "step": {"type": "string", "description": "Set on a step's entries"},
        }, open_=True),
        "RunEvents": object_schema(["run_id", "events"], {
            "run_id": STRING, "events": {"type": "array", "items": ref("HistoryEntry")},
            "custom": {"type": "array", "items": ref("CustomEvent"),
                       "description": "Custom events (POST /runs/{id}/events), oldest first"}}),
        "CustomEvent": object_schema(["id", "event_type", "payload", "at"], {
            "id": STRING, "event_type": STRING, "payload": ANY, "at": TIME}),
        "Workflow": object_schema(["name", "description", "steps", "on_failure", "schedule",
                             "events"], {
            "name": STRING, "description": nullable_string,
            "steps": {"type": "array", "items": STRING},
            "on_failure": {"type": "string", "enum": ["halt", "continue-independent"]},
            "schedule": nullable({"type": "object"}),
            "events": {"type": "array", "items": STRING,
                       "description": "Event names that start it"},
            "kind": {"type": "string", "enum": ["dag", "durable"]},
            "webhooks": {"type": "array", "items": STRING,
                         "description": "Webhooks whose deliveries start it"},
            "flow": {"type": "object", "description": "Its flow control, as declared:"
                     " concurrency (a list of {group, key, limit, policy}), priority,"
                     " throttle, debounce, batch, cancelOn, and backends (the limits of"
                     " the backends it calls); a control it does not use is absent",
                     "properties": {
                         "concurrency": {"type": "array", "items": object_schema(
                             ["limit", "policy"], {
                                 "group": nullable_string, "key": STRING,
                                 "limit": {"type": "integer", "minimum": 1},
                                 "policy": {"type": "string",
                                            "enum": ["queue", "skip", "cancel-running"]}})},
                         "priority": {"oneOf": [{"type": "integer", "minimum": 0,
                                                 "maximum": 100}, STRING]},
                         "throttle": {"type": "object"}, "debounce": {"type": "object"},
                         "batch": {"type": "object"},
                         "cancelOn": {"type": "array", "items": {"type": "object"}},
                         "backends": {"type": "object",
                                      "additionalProperties": {"type": "object"}}}},
        }),
        "ResumeResult": object_schema(["run_id", "resumed", "was_paused"], {
            "run_id": STRING, "resumed": {"type": "boolean"},
            "was_paused": {"type": "boolean"}}),
        "ResetResult": object_schema(["run_id", "reset_to", "forgotten", "was_paused"], {
            "run_id": STRING, "reset_to": {"type": "integer", "minimum": 0},
            "forgotten": {"type": "integer", "minimum": 0,
                          "description": "Journal entries forgotten"},
            "was_paused": {"type": "boolean"}}),
        "Journal": object_schema(["run_id", "workflow", "input", "started_at", "subject",
                            "journal"], {
            "run_id": STRING, "workflow": STRING, "input": ANY, "started_at": TIME,
            "subject": nullable_string,
            "journal": {"type": "array", "items": {"type": "object"},
                        "description": "Every recorded operation: scope, pos, id, kind,"
                        " name, status, value or error, started, ended"}}),
        "RunImported": object_schema(["run_id", "imported", "items", "blobs", "status"], {
            "run_id": STRING,
            "imported": {**STRING, "description": "Where it came from (the export's source)"},
            "items": {"type": "integer", "minimum": 1, "description": "Items written"},
            "blobs": {"type": "integer", "minimum": 0, "description": "Blobs written"},
            "status": {**STRING, "description": "Its status, as it was there (kept)"}}),
        "RunChildren": object_schema(["run_id", "children"], {
            "run_id": STRING, "children": {"type": "array", "items": ref("RunSummary")}}),
        "RunParent": object_schema(["run_id", "parent_run_id", "parent"], {
            "run_id": STRING, "parent_run_id": nullable_string,
            "parent": nullable(ref("RunSummary"))}),
        "HookCreated": object_schema(["run_id", "signal", "expires_at", "metadata", "hook", "token",
                                "url"], {
            "run_id": STRING, "signal": STRING, "expires_at": TIME, "metadata": ANY,
            "hook": {"type": "string", "description": "A short id (a prefix of its hash)"},
            "token": {"type": "string", "description": "The secret: shown this once"},
            "url": {"type": "string", "description": "Where to POST it (ORCH_PUBLIC_URL +"
                    " /hooks/{token}, or the path alone)"}}),
        "HookResult": object_schema(["run_id", "signal", "duplicate", "signal_id"], {
            "run_id": STRING, "signal": STRING, "duplicate": {"type": "boolean"},
            "signal_id": STRING}),
        "SignalPayload": {"type": "object", "description": "Any JSON object: what the"
                          " run's wait_for_signal returns"},
        "Approval": object_schema(
            ["run_id", "step", "workflow", "prompt", "approvers", "created_at", "deadline",
             "status", "by", "at", "comment", "age"], {
                "run_id": STRING, "step": STRING, "workflow": STRING, "prompt": STRING,
                "approvers": {"type": "array", "items": STRING,
                              "description": "API key names that may answer (empty: any)"},
                "created_at": TIME, "deadline": TIME,
                "status": {"type": "string",
                           "enum": ["pending", "approved", "rejected", "timed_out"]},
                "by": nullable_string, "at": nullable(TIME), "comment": nullable_string,
                "age": {"type": "number", "description": "Seconds since it opened"},
                "expires_in": {"type": "number", "description": "Seconds left (open gates)"},
                "link": {"type": "string", "description": "The single-use answer link (a"
                         " gate opened with link: true, while open)"}}),
        "StateCell": object_schema(["entity", "key", "value", "version", "expires_at"], {
            "entity": STRING, "key": STRING, "value": ANY,
            "version": {"type": "integer", "description": "+1 on every write"},
            "expires_at": nullable(TIME)}),
        "StateCells": object_schema(["entity", "cells", "next"], {
            "entity": STRING, "cells": {"type": "array", "items": ref("StateCell")},
            "next": nullable_string}),
        "StateCellDeleted": object_schema(["entity", "key", "deleted"], {
            "entity": STRING, "key": STRING, "deleted": {"type": "boolean"}}),
        "ApprovalList": object_schema(["approvals"], {
            "approvals": {"type": "array", "items": ref("Approval")}}),
        **_version_schemas(),
        "SignalResult": object_schema(["run_id", "signal", "id", "duplicate"], {
            "run_id": STRING, "signal": STRING, "id": STRING,
            "duplicate": {"type": "boolean", "description": "true: sent before (same key)"},
        }),
        "Workflows": object_schema(["workflows"], {
            "workflows": {"type": "array", "items": ref("Workflow")}}),
        "EmitResult": object_schema(["id", "name", "duplicate", "runs"], {
            "id": STRING, "name": STRING, "duplicate": {"type": "boolean"},
            "runs": {"type": "array", "items": object_schema(["workflow", "run_id", "created"], {
                "workflow": STRING, "run_id": STRING, "created": {"type": "boolean"},
                **TAKEN})},
            "cancelled": {"type": "array", "items": STRING,
                          "description": "Runs this event cancelled (workflows' cancelOn)"},
        }),
        "Event": object_schema(["name", "key", "id", "data", "received_at"], {
            "name": STRING, "key": nullable_string, "id": STRING, "data": ANY,
            "received_at": TIME,
        }),
        "Events": object_schema(["events"], {"events": {"type": "array", "items": ref("Event")}}),
        "WebhookResult": object_schema(["run_id", "workflow", "delivery_id", "duplicate"], {
            "run_id": STRING, "workflow": STRING, "delivery_id": nullable_string,
            "status": RUN_STATUS, **TAKEN, "created": {"type": "boolean"},
        }),
        "Schedule": object_schema(
            ["workflow", "schedule", "paused", "next_fire", "last_fire", "last_runs",
             "missed", "last_error", "concurrency", "for_each"],
            {"workflow": STRING,
             "schedule": {"type": "string", "description": "e.g. `every 1h`"},
             "paused": {"type": "boolean"},
             "next_fire": nullable({**TIME, "description": "null while paused"}),
             "last_fire": nullable_time,
             "last_runs": {"type": "array", "items": STRING,
                           "description": "the first 100 run ids of the last fire"},
             "last_run_count": {"type": "integer", "minimum": 0,
                                "description": "how many runs the last fire started"},
             "missed": {"type": "integer", "minimum": 0},
             "last_error": {"anyOf": [{"type": "object"}, STRING, {"type": "null"}]},
             "concurrency": STRING, "for_each": {"type": "boolean"}},
        ),
        "Schedules": object_schema(["schedules"], {
            "schedules": {"type": "array", "items": ref("Schedule")}}),
        "Fired": object_schema(["workflow", "runs"], {
            "workflow": STRING, "runs": {"type": "array", "items": STRING}}),
        "Health": object_schema(["ok"], {"ok": {"const": True}}),
    }




def _version_schemas() -> dict[str, Schema]:
    """The answers of api/versions.py (services/versions/)."""
    string, strings = {"type": "string"}, {"type": "array", "items": {"type": "string"}}
    count = {"type": "integer", "minimum": 0}
    verdict = object_schema(["run_id", "workflow", "version", "status", "entries"], {
        "run_id": string, "workflow": string, "version": nullable(string),
        "status": {"enum": ["compatible", "diverging", "unchecked"]}, "entries": count,
        "position": {"type": "object", "description": "Where it diverges: scope, pos"},
        "recorded": {"type": "object", "description": "The operation recorded there"},
        "issued": {"type": "object", "description": "The operation the code issues there"},
        "message": string})
    version = object_schema(
        ["version", "url", "digest", "registered_at", "retiring", "current", "open_runs"], {
            "version": string, "url": string, "digest": nullable(string),
            "registered_at": {"type": "number"}, "retiring": {"type": "boolean"},
            "current": {"type": "boolean"},
            "open_runs": {**count, "description": "Open durable runs pinned to it"}})
    return {
        "VersionList": object_schema(["backends"], {"backends": {"type": "array", "items":
            object_schema(["backend", "current", "versions", "unversioned_runs"], {
                "backend": string, "current": nullable(string),
                "versions": {"type": "array", "items": version},
                "unversioned_runs": count})}}),
        "VersionRegistered": object_schema(["backend", "version", "url", "new"], {
            "backend": string, "version": string, "url": string, "new": {"type": "boolean"}}),
        "RunsCheck": object_schema(
            ["backend", "version", "url", "checked", "compatible", "diverging", "unchecked",
             "runs"], {
                "backend": string, "version": nullable(string), "url": string,
                "checked": count, "compatible": count, "diverging": count,
                "unchecked": count, "runs": {"type": "array", "items": verdict}}),
        "RunsMigration": object_schema(
            ["backend", "to", "moved", "already", "busy", "diverging", "unchecked"], {
                "backend": string, "to": string, "moved": strings, "already": strings,
                "busy": {**strings, "description": "Advancing through every look: they"
                         " stay on their version (live)"},
                "diverging": {"type": "array", "items": verdict},
                "unchecked": {"type": "array", "items": verdict}}, open_=True),
        "VersionPromotion": object_schema(["backend", "version", "promoted", "current"], {
            "backend": string, "version": string, "promoted": {"type": "boolean"},
            "current": nullable(string), "was": nullable(string), "checked": count,
            "compatible": count, "diverging": {"type": "array", "items": verdict},
            "unchecked": {"type": "array", "items": verdict}, "moved": strings,
            "busy": strings, "pinned": strings}),
        "VersionRetired": object_schema(["backend", "version", "retired"], {
            "backend": string, "version": string, "retired": {"type": "boolean"},
            "migration": {"type": "object"}, "cancelled": strings}),
    }
