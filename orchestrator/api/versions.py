"""Versions of the backends' code and the open runs pinned to them: list them, register
one, make one current after checking every open run against it, retire one; check the
open runs against any code, and migrate the compatible ones (services/versions/); and
their OpenAPI paths."""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse

from orchestrator.api.models import (
    CheckRuns,
    MigrateRuns,
    PromoteVersion,
    RegisterVersion,
    RetireVersion,
)
from orchestrator.api.operations import BODY_ERRORS, body, errors, op, path_param
from orchestrator.api.requests import read_json, validated
from orchestrator.api.schemas import Schema, ref
from orchestrator.api.schemas import json_body as _json
from orchestrator.api.state import api_state
from orchestrator.errors import UsageError
from orchestrator.services.versions import Moves, Target

__all__ = ["check_runs", "list_versions", "migrate_runs", "paths", "promote_version",
           "register_version", "retire_version"]


def _moves(request: Request) -> Moves:
    return api_state(request).rt.moves()


async def list_versions(request: Request) -> JSONResponse:
    moves = _moves(request)
    backend = request.path_params.get("backend")
    found = await run_in_threadpool(moves.listing, backend)
    return JSONResponse({"backends": found})


async def register_version(request: Request) -> JSONResponse:
    req = validated(RegisterVersion, await read_json(request))
    moves = _moves(request)
    done = await run_in_threadpool(moves.register, request.path_params["backend"], req.url,
                                   req.version)
    return JSONResponse(done, status_code=201 if done["new"] else 200)


async def promote_version(request: Request) -> JSONResponse:
    req = validated(PromoteVersion, await read_json(request))
    moves = _moves(request)

    def promote() -> dict[str, Any]:
        backend = moves.backend_of(request.path_params["backend"])
        return moves.promote(backend, request.path_params["version"],
                             pin_incompatible=req.pin_incompatible)

    return JSONResponse(await run_in_threadpool(promote))


async def retire_version(request: Request) -> JSONResponse:
    req = validated(RetireVersion, await read_json(request))
    moves = _moves(request)

    def retire() -> dict[str, Any]:
        backend = moves.backend_of(request.path_params["backend"])
        return moves.retire(backend, request.path_params["version"], migrate=req.migrate,
                            cancel=req.cancel)

    return JSONResponse(await run_in_threadpool(retire))


async def check_runs(request: Request) -> JSONResponse:
    req = validated(CheckRuns, await read_json(request))
    if sum(x is not None for x in (req.version, req.functions_url, req.script)) != 1:
        raise UsageError("give exactly one of version, functions_url and script")
    if req.script is not None and req.workflow is None:
        raise UsageError("script: name the script workflow its runs are of (workflow)")
    moves = _moves(request)

    def check() -> dict[str, Any]:
        if req.script is not None:
            assert req.workflow is not None
            target, verdicts = moves.check_script(req.workflow, req.script)
            backend = "scripts"
        else:
            backend = moves.backend_of(req.backend)
            if req.version is not None:
                target = moves.target(backend, req.version)
            else:
                assert req.functions_url is not None
                moves.require_app(req.functions_url)
                target = Target(req.functions_url, moves.secrets.get(backend))
            verdicts = moves.check(backend, target, workflow=req.workflow)
        diverging = [v for v in verdicts if v.status == "diverging"]
        unchecked = [v for v in verdicts if v.status == "unchecked"]
        return {"backend": backend, "version": target.version, "url": target.url,
                "checked": len(verdicts), "compatible": len(verdicts) - len(diverging)
                - len(unchecked), "diverging": len(diverging), "unchecked": len(unchecked),
                "runs": [v.doc() for v in verdicts]}

    return JSONResponse(await run_in_threadpool(check))


async def migrate_runs(request: Request) -> JSONResponse:
    req = validated(MigrateRuns, await read_json(request))
    moves = _moves(request)

    def migrate() -> dict[str, Any]:
        return moves.migrate(moves.backend_of(req.backend), req.to, workflow=req.workflow)

    return JSONResponse(await run_in_threadpool(migrate))


def paths() -> dict[str, Schema]:
    backend = path_param("backend", "The backend (the manifest's name).",
                         {"type": "string", "minLength": 1, "maxLength": 128})
    version = path_param("version", "A version's label.",
                         {"type": "string", "minLength": 1, "maxLength": 64})
    listing = _json(ref("VersionList"), "Each backend's live versions, with their open runs")
    return {
        "/versions": {
            "get": op("listVersions", "The live versions of every backend's code, the"
                      " current one, and the open durable runs pinned to each.",
                      tag="versions", responses={"200": listing, **errors("503")}),
        },
        "/versions/{backend}": {
            "get": op("getVersions", "One backend's live versions.", tag="versions",
                      parameters=[backend],
                      responses={"200": listing, **errors("404", "503")}),
            "post": op("registerVersion", "Register code served at a URL as a version of"
                       " the backend (not current: promote it).", tag="versions",
                       parameters=[backend], body=body("RegisterVersion", required=True),
                       responses={"200": _json(ref("VersionRegistered"), "Known already"),
                                  "201": _json(ref("VersionRegistered"), "Registered"),
                                  **errors(*BODY_ERRORS, "404", "409", "503")}),
        },
        "/versions/{backend}/{version}/promote": {
            "post": op("promoteVersion", "Check every open run against the version, then"
                       " make it current and move the compatible runs to it; with any run"
                       " diverging, nothing moves (unless pin_incompatible).",
                       tag="versions", parameters=[backend, version],
                       body=body("PromoteVersion", required=False),
                       responses={"200": _json(ref("VersionPromotion"), "What was checked"
                                               " and moved (promoted false: it was not)"),
                                  **errors(*BODY_ERRORS, "404", "409", "503")}),
        },
        "/versions/{backend}/{version}/retire": {
            "post": op("retireVersion", "Retire a version no open run is pinned to (409"
                       " version_pinned, naming how many, otherwise).", tag="versions",
                       parameters=[backend, version],
                       body=body("RetireVersion", required=False),
                       responses={"200": _json(ref("VersionRetired"), "Retired"),
                                  **errors(*BODY_ERRORS, "404", "409", "503")}),
        },
        "/runs/check": {
            "post": op("checkRuns", "Replay every open durable run's journal against code"
                       " (a live version, or a functions app's URL), running nothing: each"
                       " compatible or diverging at its first position.", tag="versions",
                       body=body("CheckRuns", required=True),
                       responses={"200": _json(ref("RunsCheck"), "Each run's verdict"),
                                  **errors(*BODY_ERRORS, "404", "503")}),
        },
        "/runs/migrate": {
            "post": op("migrateRuns", "Move the open durable runs that the check finds"
                       " compatible to a live version.", tag="versions",
                       body=body("MigrateRuns", required=True),
                       responses={"200": _json(ref("RunsMigration"), "What moved"),
                                  **errors(*BODY_ERRORS, "404", "503")}),
        },
    }
