"""Runs: start, list, read (with a long poll), history and custom events, cancel, rerun;
and their OpenAPI paths (`paths`)."""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import uuid
from datetime import UTC, datetime
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from orchestrator.adapters.store.codec import is_key
from orchestrator.api.models import CancelRun, RerunRun, RunEvent, StartRun
from orchestrator.api.operations import (
    BODY_ERRORS,
    body,
    errors,
    limit_param,
    op,
    run_id_param,
)
from orchestrator.api.requests import read_json, validated
from orchestrator.api.schemas import RUN_STATUS, STRING, Schema, ref
from orchestrator.api.schemas import json_body as _json
from orchestrator.api.state import api_state, run_or_404
from orchestrator.engine.search import parse_query
from orchestrator.engine.states import RunStatus
from orchestrator.errors import UsageError
from orchestrator.services.admission import Started, StartRequest
from orchestrator.services.admission.dedupe import KEY_RE
from orchestrator.services.values import check_value

__all__ = [
    "add_run_event", "cancel_run", "decode_cursor", "encode_cursor", "get_run", "list_runs",
    "paths", "rerun_run", "run_events", "start_run", "started_answer", "summary",
]

# The attributes a listing's LastEvaluatedKey can hold (table and index keys).
CURSOR_KEYS = frozenset({"run_id", "workflow", "created_at", "listed"})
# A search's cursor (adapters/store/run_search.py): the last run's index key.
FIND_CURSOR_KEYS = frozenset({"find"})
# How often a long poll (`GET /runs/{id}?wait=`) reads the run's row, and its longest wait
# (below API Gateway's 30 s integration timeout).
FOLLOW_EVERY = 0.1
MAX_WAIT = 25.0


def encode_cursor(last: dict[str, Any] | None) -> str | None:
    return base64.urlsafe_b64encode(json.dumps(last).encode()).decode() if last else None


def decode_cursor(cursor: str | None) -> dict[str, Any] | None:
    if not cursor:
        return None
    try:
        start = json.loads(base64.urlsafe_b64decode(cursor.encode()))
    except (ValueError, binascii.Error):
        start = None
    if not (is_key(start, CURSOR_KEYS) or is_key(start, FIND_CURSOR_KEYS)):
        raise UsageError("cursor: not a cursor this API returned")
    return start


def summary(r: Any) -> dict[str, Any]:
    """A run as listings show it (GET /runs, a run's children and parent)."""
    return {
        "run_id": r.run_id,
        "workflow": r.workflow,
        "status": r.shown_status,
        "created_at": r.created_at,
        "started_at": r.started_at,
        "finished_at": r.finished_at,
        "trigger": None if r.trigger is None else r.trigger.to_json(),
        "rerun_of": r.rerun_of,
    }


def started_answer(run: Any, created: bool | Started, **extra: Any) -> JSONResponse:
    """The answer to a start: the run, how it was taken (201 when created, else 200)."""
    taken = created if isinstance(created, Started) else None
    out = {
        "run_id": run.run_id,
        "workflow": run.workflow,
        "status": run.shown_status,
        **(taken.fields() if taken is not None else {"created": created}),
        **extra,
    }
    if run.error:
        out["error"] = run.error
    return JSONResponse(out, status_code=201 if out["created"] else 200)


def _wait_seconds(raw: str) -> float:
    try:
        wait = float(raw)
    except ValueError:
        raise UsageError(f"wait: {raw!r} is not a number of seconds") from None
    if not 0 <= wait <= MAX_WAIT:
        raise UsageError(f"wait: {raw!r} must be between 0 and {MAX_WAIT:g} seconds")
    return wait


async def start_run(request: Request) -> JSONResponse:
    state = api_state(request)
    rt = state.rt
    doc = await read_json(request)
    req = validated(StartRun, doc)
    key = request.headers.get("idempotency-key")

    def start() -> JSONResponse:
        trigger: dict[str, Any] = {"source": "api"}
        if req.parent_run_id is not None:
            rt.children.require(req.parent_run_id)  # 404 if there is no such run
            trigger["parent_run_id"] = req.parent_run_id
        started = rt.runs.admit(StartRequest(
            req.workflow, req.input, req.run_id, trigger, idempotency_key=key, document=doc,
            priority=req.priority))
        if req.parent_run_id is not None:
            rt.children.link(req.parent_run_id, started.run.run_id, started.run.workflow)
        return started_answer(started.run, started)

    return await run_in_threadpool(start)


async def get_run(request: Request) -> Response:
    rt = api_state(request).rt
    flag = request.query_params.get("steps", "true")
    if flag not in ("true", "false"):
        raise UsageError(f"steps: {flag!r} is not true or false")
    run_id = request.path_params["run_id"]
    wait = _wait_seconds(request.query_params.get("wait", "0"))
    if wait > 0:
        # A long poll: the run's own row, every FOLLOW_EVERY seconds, until the run is
        # no longer queued or running or `wait` passed; its steps are read once.
        deadline = rt.clock() + wait
        while True:
            run = await run_in_threadpool(run_or_404, rt, run_id)
            # A paused run waits for an operator: the follower is told at once.
            if (run.status.terminal or run.paused is not None
                    or rt.clock() + FOLLOW_EVERY > deadline):
                break
            await asyncio.sleep(FOLLOW_EVERY)
    view = await run_in_threadpool(lambda: rt.runs.view_body(run_id, steps=flag == "true"))
    return Response(view, media_type="application/json")


async def run_events(request: Request) -> JSONResponse:
    rt = api_state(request).rt
    run_id = request.path_params["run_id"]
    events = await run_in_threadpool(rt.runs.history, run_id)
    custom = await run_in_threadpool(rt.store.journal.run_events, run_id)
    return JSONResponse({"run_id": run_id, "events": events, "custom": custom})


async def add_run_event(request: Request) -> JSONResponse:
    rt = api_state(request).rt
    req = validated(RunEvent, await read_json(request))
    run_id = request.path_params["run_id"]
    check_value("payload (a custom event's)", req.payload)

    def add() -> dict[str, Any]:
        run_or_404(rt, run_id)
        return rt.store.journal.add_run_event(run_id, req.event_type, req.payload,
                                              uuid.uuid4().hex, rt.clock())

    return JSONResponse(await run_in_threadpool(add), status_code=201)


def _one(name: str, param: str | None, written: str | None) -> str | None:
    """A filter given as a parameter, in the query, or both alike."""
    if param is not None and written is not None and param != written:
        raise UsageError(f"{name}: {param!r} here and {written!r} in q: a run has one")
    return param or written


def _time(name: str, value: str | None) -> float | None:
    """A time parameter: epoch seconds, or an ISO 8601 time (UTC unless it says)."""
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        raise UsageError(f"{name}: {value!r} is neither epoch seconds nor an ISO 8601"
                         " time") from None
    return (at if at.tzinfo else at.replace(tzinfo=UTC)).timestamp()


async def list_runs(request: Request) -> JSONResponse:
    rt = api_state(request).rt
    q = request.query_params
    text, where = q.get("q"), q.get("where")
    if text and where and text != where:
        raise UsageError(f"q: {text!r} and where: {where!r}: where is another name of q;"
                         " give one")
    query = parse_query(text or where, "q" if text else "where")
    workflow = _one("workflow", q.get("workflow") or None, query.filters.get("workflow"))
    status = _one("status", q.get("status") or None, query.filters.get("status"))
    if status is not None and status not in {s.value for s in RunStatus} | {"paused"}:
        known = ", ".join([*(s.value for s in RunStatus), "paused"])
        raise UsageError(f"status: {status!r} is not a run status ({known})")
    try:
        limit = int(q.get("limit", "20"))
    except ValueError:
        raise UsageError("limit: not an integer") from None
    limit = max(1, min(limit, 100))
    start = decode_cursor(q.get("cursor"))
    since = _time("since", q.get("since"))
    if query or since is not None:
        if not query:
            raise UsageError("since: goes with q (a search); a listing pages back in time")
        runs, last = await run_in_threadpool(
            lambda: rt.store.runs.find_runs(query, rt.clock(), workflow=workflow,
                                            status=status, since=since, limit=limit,
                                            start=start))
    else:
        if start is not None and "find" in start:
            raise UsageError("cursor: a search's cursor goes with its q")
        runs, last = await run_in_threadpool(
            lambda: rt.store.runs.list_runs(workflow, rt.clock(), status=status, limit=limit,
                                            start=start)
        )
    return JSONResponse({"runs": [summary(r) for r in runs], "next_cursor": encode_cursor(last)})


async def cancel_run(request: Request) -> JSONResponse:
    rt = api_state(request).rt
    req = validated(CancelRun, await read_json(request))
    view = await run_in_threadpool(rt.runs.kill, request.path_params["run_id"], req.reason)
    return JSONResponse(view)


async def rerun_run(request: Request) -> JSONResponse:
    rt = api_state(request).rt
    req = validated(RerunRun, await read_json(request))
    kwargs: dict[str, Any] = {"new_run_id": req.run_id}
    if "input" in req.model_fields_set:
        kwargs["input"] = req.input
    run, created = await run_in_threadpool(
        lambda: rt.runs.rerun(request.path_params["run_id"], **kwargs)
    )
    return started_answer(run, created, rerun_of=run.rerun_of)


# ---- OpenAPI ---------------------------------------------------------------------------


def paths(retention: float) -> dict[str, Schema]:
    """The paths above; `retention` (seconds) is how long an Idempotency-Key is kept."""
    run_id = run_id_param()
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
    return {
        "/runs": {
            "post": op(
                "startRun", "Start a run of a workflow.", tag="runs",
                description="A `run_id` that exists already returns the existing run"
                " (200, `created: false`); see also `Idempotency-Key`.",
                parameters=[idempotency], body=body("StartRun", required=True),
                responses={
                    "201": _json(started, "Started"),
                    "200": _json(started, "The run existed already (same run_id, or same"
                                 " Idempotency-Key and body)"),
                    **errors(*BODY_ERRORS, "404", "409", "503", notes={
                        "404": "No such workflow",
                        "409": "A concurrency or throttle write lost a race",
                        "422": "Body failed validation, or the Idempotency-Key was used with"
                        " another body (code idempotency_key_reused)",
                    }),
                },
            ),
            "get": op(
                "listRuns", "Runs, newest first (of one workflow, or of all).", tag="runs",
                description="A status filter is applied after the read, so a page may hold"
                " fewer than `limit` runs while `next_cursor` still leads on.",
                parameters=[
                    {"name": "workflow", "in": "query", "required": False,
                     "description": "Only runs of this workflow.", "schema": STRING},
                    {"name": "status", "in": "query", "required": False,
                     "description": "Only runs in this status (anything else: 400).",
                     "schema": RUN_STATUS},
                    {"name": "q", "in": "query", "required": False,
                     "description": "Search: runs whose input, output, error or trigger"
                     " match every clause (`input.customer = \"acme\"`, `error ~ \"timeout\"`,"
                     " `order:1042`, a bare word; `status = failed` and `workflow = x` are"
                     " filters). Read from the search index, never a scan (README, \"Finding"
                     " runs\"). A query that cannot be read: 400 naming what.",
                     "schema": STRING},
                    {"name": "where", "in": "query", "required": False,
                     "description": "The same as `q` (both, unless equal: 400).",
                     "schema": STRING},
                    {"name": "since", "in": "query", "required": False,
                     "description": "With `q`: only runs created at this time or later"
                     " (epoch seconds or ISO 8601).", "schema": STRING},
                    limit_param(),
                    {"name": "cursor", "in": "query", "required": False,
                     "description": "The `next_cursor` of the previous page (opaque; anything"
                     " else: 400).", "schema": STRING},
                ],
                responses={"200": _json(ref("RunList"), "A page of runs"),
                           **errors("400", "503")},
            ),
        },
        "/runs/{run_id}": {
            "get": op("getRun", "A run with its steps.", tag="runs", parameters=[
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
                                 **errors("400", "404", "503",
                                          notes={"404": "No such run"})}),
        },
        "/runs/{run_id}/events": {
            "get": op("getRunEvents", "Every transition of a run and its steps, oldest"
                      " first, and its custom events.", tag="runs", parameters=[run_id],
                      responses={"200": _json(ref("RunEvents"), "The run's history"),
                                 **errors("404", "503", notes={"404": "No such run"})}),
            "post": op("addRunEvent", "Add a custom event to a run (kept beside its"
                       " transitions, for as long as the run).", tag="runs",
                       parameters=[run_id], body=body("RunEvent", required=True),
                       responses={"201": _json(ref("CustomEvent"), "Added"),
                                  **errors(*BODY_ERRORS, "404", "503",
                                           notes={"404": "No such run"})}),
        },
        "/runs/{run_id}/cancel": {
            "post": op(
                "cancelRun", "Cancel a queued or running run.", tag="runs",
                description="Nothing new starts; in-flight steps land; the rest is skipped."
                " An empty body is `{}`.",
                parameters=[run_id], body=body("CancelRun", required=False),
                responses={"200": _json(view, "The run, being cancelled"),
                           **errors(*BODY_ERRORS, "404", "409", "503", notes={
                               "404": "No such run",
                               "409": "The run already finished (code run_finished)",
                           })},
            ),
        },
        "/runs/{run_id}/rerun": {
            "post": op(
                "rerunRun", "A new run of a failed or cancelled run's definition.",
                tag="runs",
                description="Reuses every successful step's output and runs the rest again."
                " An empty body is `{}`.",
                parameters=[run_id], body=body("RerunRun", required=False),
                responses={
                    "201": _json(started, "Started (rerun_of names the old run)"),
                    "200": _json(started, "A run with the chosen run_id existed already"),
                    **errors(*BODY_ERRORS, "404", "409", "503", notes={
                        "404": "No such run",
                        "409": "The run is still going (run_not_finished) or it succeeded"
                        " (nothing_to_rerun)",
                    }),
                },
            ),
        },
    }
