"""A run copied between stacks (`orchestrator runs pull`): `GET /runs/{id}/export` reads
it whole, `POST /runs/import` writes it here, inert (adapters/store/run_copies.py); and
their OpenAPI paths (`paths`)."""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse

from orchestrator.adapters.store.codec import run_from_item
from orchestrator.adapters.store.run_copies import decoded, to_json_item
from orchestrator.api.models import EXPORT_FORMAT, RunExport
from orchestrator.api.operations import BODY_ERRORS, body, errors, op, run_id_param
from orchestrator.api.requests import read_json, validated
from orchestrator.api.schemas import Schema, ref
from orchestrator.api.schemas import json_body as _json
from orchestrator.api.state import api_state, run_or_404
from orchestrator.errors import Code, ConditionFailed, Conflict, NotFound, Unprocessable

__all__ = ["MAX_IMPORT", "export_run", "import_run", "paths"]

# An export carries its blobs inline: its import may be larger than other bodies.
MAX_IMPORT = 64 * 1024 * 1024


async def export_run(request: Request) -> JSONResponse:
    rt = api_state(request).rt
    run_id = request.path_params["run_id"]

    def read() -> dict[str, Any]:
        run_or_404(rt, run_id)  # a malformed, unknown or expired id: 404
        found = rt.store.copies.export_run(run_id)
        if found is None:
            raise NotFound(f"run {run_id!r} not found (or expired)")
        run, rows, blobs = found
        return {"format": EXPORT_FORMAT, "run_id": run_id, "exported_at": rt.clock(),
                "run": to_json_item(run), "rows": [to_json_item(r) for r in rows],
                "blobs": blobs}

    return JSONResponse(await run_in_threadpool(read))


async def import_run(request: Request) -> JSONResponse:
    rt = api_state(request).rt
    doc = validated(RunExport, await read_json(request, MAX_IMPORT))
    try:
        run, rows = decoded(doc.run_id, doc.run, doc.rows, doc.blobs)
    except ValueError as exc:  # names the field
        raise Unprocessable(Code.INVALID_BODY, str(exc)) from None
    source = doc.source or "another stack"

    def write() -> dict[str, Any]:
        if not rt.store.copies.run_exists(doc.run_id):
            # Found by a search like any run (adapters/store/run_search.py): its input,
            # trigger and error, before its row.
            rec = run_from_item(run)
            trigger = None if rec.trigger is None else rec.trigger.to_json()
            rt.store.runs.index_run(
                rec.run_id, rec.created_at,
                {"input": rec.input, "trigger": trigger, "error": rec.error},
                rec.expires_at or rec.created_at + rt.store.step_retention)
        try:
            n, status = rt.store.copies.import_run(run, rows, doc.blobs, source)
        except ConditionFailed as exc:
            raise Conflict(Code.CONFLICT, f"run {doc.run_id!r} is not imported: "
                           f"{exc.message}") from None
        return {"run_id": doc.run_id, "imported": source, "items": n,
                "blobs": len(doc.blobs), "status": status}

    return JSONResponse(await run_in_threadpool(write), status_code=201)


# ---- OpenAPI ---------------------------------------------------------------------------


def paths() -> dict[str, Schema]:
    return {
        "/runs/{run_id}/export": {
            "get": op(
                "exportRun", "A run whole, as the store has it, to import into another"
                " stack.", tag="runs",
                description="The run row and every item of the run's partition (its step"
                " rows; a durable run's driver, journal, signals and run events) as"
                " DynamoDB JSON, with the blobs they reference inlined: what"
                " `orchestrator runs pull` copies.",
                parameters=[run_id_param()],
                responses={"200": _json(ref("RunExport"), "The run's rows"),
                           **errors("404", "503", notes={"404": "No such run"})},
            ),
        },
        "/runs/import": {
            "post": op(
                "importRun", "Write a run exported from another stack into this one.",
                tag="runs",
                description="The rows are written first, the run row last with a conditional"
                " put (it is the commit point: rows an import that died half way left are"
                " written over by the next)."
                " The run keeps its status but is inert here: its rows get no wake and no"
                " lease and no message is sent, so no worker or sweep advances it; it is"
                " marked `imported` (from `source`). Read it, show it and replay its"
                f" journal. The body may be up to {MAX_IMPORT} bytes.",
                body=body("RunExport", required=True),
                responses={
                    "201": _json(ref("RunImported"), "Imported"),
                    **errors(*BODY_ERRORS, "409", "503", notes={
                        "413": f"Body larger than {MAX_IMPORT} bytes",
                        "409": "A run of that id is here already (conflict): nothing is"
                        " written",
                        "422": "Not an export (a field missing or wrong, an unknown"
                        " format, a row of another run): the message names the field",
                    }),
                },
            ),
        },
    }
