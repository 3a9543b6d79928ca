"""Bulk actions: cancel, rerun or resume many runs as a job (services/bulk.py): start one
(or count what it would act on), follow it, read what it did to each run."""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse

from orchestrator.api.models import BulkAction
from orchestrator.api.operations import BODY_ERRORS, body, errors, op, path_param
from orchestrator.api.requests import read_json, validated
from orchestrator.api.schemas import Schema
from orchestrator.api.schemas import json_body as _json
from orchestrator.api.state import api_state
from orchestrator.errors import UsageError

__all__ = ["get_job", "list_jobs", "paths", "start_job"]


async def start_job(request: Request) -> JSONResponse:
    rt = api_state(request).rt
    req = validated(BulkAction, await read_json(request))
    spec: dict[str, Any] = req.model_dump(exclude={"dry_run", "job_id", "expected"},
                                          exclude_none=True)
    if "input" in req.model_fields_set:
        spec["input"] = req.input
    if req.dry_run:
        return JSONResponse(await run_in_threadpool(rt.bulk.count, spec))
    job, created = await run_in_threadpool(
        lambda: rt.bulk.start(spec, req.job_id, expected=req.expected))
    return JSONResponse(job.to_json(), status_code=202 if created else 200,
                        headers={"Location": f"/bulk-actions/{job.job_id}"})


async def get_job(request: Request) -> JSONResponse:
    rt = api_state(request).rt
    q = request.query_params
    try:
        limit = max(1, min(int(q.get("limit", "100")), 1000))
    except ValueError:
        raise UsageError("limit: not an integer") from None
    job_id = request.path_params["job_id"]

    def read() -> dict[str, Any]:
        job = rt.bulk.get(job_id)
        runs, more = rt.store.bulk.report(job_id, rt.clock(), after=q.get("cursor") or None,
                                          limit=limit)
        return {**job.to_json(), "runs": [o.to_json() for o in runs], "next_cursor": more}

    return JSONResponse(await run_in_threadpool(read))


async def list_jobs(request: Request) -> JSONResponse:
    rt = api_state(request).rt

    def read() -> list[dict[str, Any]]:
        now = rt.clock()
        jobs = (rt.store.bulk.get(j, now) for j in rt.store.bulk.recent(now))
        return [j.to_json() for j in jobs if j is not None]

    return JSONResponse({"jobs": await run_in_threadpool(read)})


_JOB: Schema = {"type": "object", "description": "A bulk job: `action`, `spec` (action,"
                " run_ids | q, workflow, status; reason; input), `status` (running, done),"
                " `pages` done, `counts` by outcome (done, skipped, failed), `processed`,"
                " `created_at`, `finished_at`."}


def paths() -> dict[str, Schema]:
    job_id = path_param("job_id", "A bulk job's id.")
    return {
        "/bulk-actions": {
            "post": op(
                "startBulkAction", "Cancel, rerun or resume many runs, as a job.",
                tag="runs",
                description="Names the runs by `run_ids` or by a search (`q`, as GET /runs"
                " takes it) and/or `workflow` and `status`: the runs created before the job."
                " The job goes a page of 50 runs at a time, each page taken by any worker;"
                " each run's action is idempotent and its outcome recorded once. `dry_run`:"
                " only count the runs (200 with `count` and a `sample`). `job_id`: the same"
                " id again with the same body is that job (200); with another, 409.",
                body=body("BulkAction", required=True),
                responses={"202": _json(_JOB, "The job, started"),
                           "200": _json(_JOB, "The count (dry_run), or the job this id"
                                        " started before"),
                           **errors(*BODY_ERRORS, "409", "503")},
            ),
            "get": op("listBulkActions", "The newest bulk jobs, newest first.", tag="runs",
                      responses={"200": _json({"type": "object"}, "{jobs: [...]}")}),
        },
        "/bulk-actions/{job_id}": {
            "get": op(
                "getBulkAction", "A bulk job's progress and what it did to each run.",
                tag="runs",
                parameters=[job_id,
                            {"name": "limit", "in": "query", "required": False,
                             "description": "Runs of the report a page holds (1-1000, 100).",
                             "schema": {"type": "integer"}},
                            {"name": "cursor", "in": "query", "required": False,
                             "description": "The report's `next_cursor`.",
                             "schema": {"type": "string"}}],
                responses={"200": _json(_JOB, "The job, with `runs`: [{run_id, outcome,"
                                        " detail, new_run_id}] and `next_cursor`"),
                           **errors("400", "404", "503")},
            ),
        },
    }
