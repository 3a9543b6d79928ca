"""What starts runs besides POST /runs: events, webhooks and schedules; and their OpenAPI
paths (`paths`)."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse

from orchestrator.api.models import EmitEvent
from orchestrator.api.operations import BODY_ERRORS, body, errors, limit_param, op, path_param
from orchestrator.api.requests import read_body, read_json, validated
from orchestrator.api.schemas import ANY, JSON, STRING, Schema, ref
from orchestrator.api.schemas import json_body as _json
from orchestrator.api.state import api_state
from orchestrator.errors import UsageError

__all__ = [
    "deliver_webhook", "emit_event", "list_events", "list_schedules", "paths",
    "pause_schedule", "resume_schedule", "trigger_schedule",
]


async def emit_event(request: Request) -> JSONResponse:
    rt = api_state(request).rt
    req = validated(EmitEvent, await read_json(request))
    result = await run_in_threadpool(
        lambda: rt.events.emit(req.name, req.data, key=req.key, event_id=req.id)
    )
    return JSONResponse(result, status_code=200 if result["duplicate"] else 201)


async def list_events(request: Request) -> JSONResponse:
    rt = api_state(request).rt
    name = request.query_params.get("name")
    if not name:
        raise UsageError("query parameter 'name' is required")
    try:
        limit = max(1, min(int(request.query_params.get("limit", "20")), 100))
    except ValueError:
        raise UsageError("limit: not an integer") from None
    events = await run_in_threadpool(rt.events.recent, name, limit)
    return JSONResponse({"events": events})


async def deliver_webhook(request: Request) -> JSONResponse:
    rt = api_state(request).rt
    raw = await read_body(request)
    result = await run_in_threadpool(
        rt.webhooks.deliver, request.path_params["name"], request.headers, raw
    )
    return JSONResponse(result, status_code=200 if result["duplicate"] else 202)


async def list_schedules(request: Request) -> JSONResponse:
    rt = api_state(request).rt
    return JSONResponse({"schedules": await run_in_threadpool(rt.scheduler.list_all)})


async def pause_schedule(request: Request) -> JSONResponse:
    rt = api_state(request).rt
    return JSONResponse(await run_in_threadpool(rt.scheduler.pause, request.path_params["name"]))


async def resume_schedule(request: Request) -> JSONResponse:
    rt = api_state(request).rt
    return JSONResponse(await run_in_threadpool(rt.scheduler.resume,
                                                request.path_params["name"]))


async def trigger_schedule(request: Request) -> JSONResponse:
    rt = api_state(request).rt
    return JSONResponse(await run_in_threadpool(rt.scheduler.trigger,
                                                request.path_params["name"]))


# ---- OpenAPI ---------------------------------------------------------------------------


def paths() -> dict[str, Schema]:
    schedule = path_param("name", "A scheduled workflow.")
    schedule_action = errors("404", "503", notes={"404": "No schedule for that workflow"})
    return {
        "/events": {
            "post": op(
                "emitEvent", "Store an event and start the workflows it triggers.",
                tag="events",
                description="Each workflow with a matching `on:` trigger starts one run,"
                " with a run id derived from the event, so a redelivery starts nothing new.",
                body=body("EmitEvent", required=True),
                responses={
                    "201": _json(ref("EmitResult"), "Stored"),
                    "200": _json(ref("EmitResult"), "A duplicate of a stored event"),
                    **errors(*BODY_ERRORS, "409", "503",
                             notes={"409": "A concurrency or throttle write lost a race"}),
                },
            ),
            "get": op(
                "listEvents", "The newest stored events of one name.", tag="events",
                parameters=[{"name": "name", "in": "query", "required": True,
                             "description": "The event name (missing: 400).",
                             "schema": {"type": "string", "minLength": 1}}, limit_param()],
                responses={"200": _json(ref("Events"), "Events, newest first"),
                           **errors("400", "503")},
            ),
        },
        "/webhooks/{name}": {
            "post": op(
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
                    path_param("name", "The webhook's name in the manifest."),
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
                    **errors("400", "401", "404", "409", "413", "503", notes={
                        "401": "The signature is missing, malformed, wrong or stale",
                        "404": "No such webhook",
                        "409": "A concurrency or throttle write lost a race",
                    }),
                },
            ),
        },
        "/schedules": {
            "get": op("listSchedules", "Every schedule and its state.", tag="schedules",
                      responses={"200": _json(ref("Schedules"), "The schedules"),
                                 **errors("503")}),
        },
        "/schedules/{name}/pause": {
            "post": op("pauseSchedule", "Stop firing until resumed.", tag="schedules",
                       parameters=[schedule],
                       responses={"200": _json(ref("Schedule"), "The schedule"),
                                  **schedule_action}),
        },
        "/schedules/{name}/resume": {
            "post": op("resumeSchedule", "Fire again, from the next tick after now.",
                       tag="schedules", parameters=[schedule],
                       responses={"200": _json(ref("Schedule"), "The schedule"),
                                  **schedule_action}),
        },
        "/schedules/{name}/trigger": {
            "post": op("triggerSchedule", "Fire now, out of schedule (the next tick stays).",
                       tag="schedules", parameters=[schedule],
                       responses={"200": _json(ref("Fired"), "The runs started"),
                                  **schedule_action,
                                  **errors("400", "409", notes={
                                      "400": "The fire failed (e.g. its forEach rows"
                                      " could not be fetched)",
                                      "409": "A concurrency write lost a race",
                                  })}),
        },
    }
