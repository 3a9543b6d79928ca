"""Approvals: answering a gate (by API key, or through its single-use link), reading one,
and the inbox of open gates across runs; and their OpenAPI paths (`paths`)."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse

from orchestrator.api.models import AnswerApproval
from orchestrator.api.operations import BODY_ERRORS, body, errors, op, path_param, run_id_param
from orchestrator.api.requests import limit_of, read_json, validated
from orchestrator.api.schemas import Schema, ref
from orchestrator.api.schemas import json_body as _json
from orchestrator.api.state import api_state
from orchestrator.services.access.apikeys import ApiKeys
from orchestrator.services.coordination.approvals import ANONYMOUS

__all__ = ["answer", "answer_link", "get_approval", "inbox", "paths"]

# With ORCH_API_AUTH=off there are no keys to name who answered: this header may.
APPROVER_HEADER = "X-Approver"


def _who(request: Request) -> str:
    """The name of the API key that made the request (who answers)."""
    rt = api_state(request).rt
    if not rt.settings.api_auth:
        named = (request.headers.get(APPROVER_HEADER) or "").strip()
        return named[:128] or ANONYMOUS
    key = (request.headers.get("authorization") or "").partition(" ")[2].strip()
    return ApiKeys(rt.control).check(key, rt.clock()) or ANONYMOUS


async def answer(request: Request) -> JSONResponse:
    rt = api_state(request).rt
    req = validated(AnswerApproval, await read_json(request))
    who = await run_in_threadpool(_who, request)
    done = await run_in_threadpool(rt.approvals.answer, request.path_params["run_id"],
                                   request.path_params["step"], req.approved, req.comment, who)
    return JSONResponse(done)


async def answer_link(request: Request) -> JSONResponse:
    rt = api_state(request).rt
    req = validated(AnswerApproval, await read_json(request))
    done = await run_in_threadpool(rt.approvals.answer_link, request.path_params["token"],
                                   req.approved, req.comment)
    return JSONResponse(done)


async def get_approval(request: Request) -> JSONResponse:
    rt = api_state(request).rt
    found = await run_in_threadpool(rt.approvals.get, request.path_params["run_id"],
                                    request.path_params["step"])
    return JSONResponse(found)


async def inbox(request: Request) -> JSONResponse:
    rt = api_state(request).rt
    approver = request.query_params.get("approver") or None
    found = await run_in_threadpool(rt.approvals.inbox, approver, limit_of(request))
    return JSONResponse({"approvals": found})


# ---- OpenAPI ---------------------------------------------------------------------------

_ANSWER_ERRORS = {
    "400": "Malformed JSON",
    "403": "The key is not among the gate's approvers (forbidden)",
    "404": "No such run or gate",
    "409": "Answered already (approval_answered); an answer at or after the"
           " deadline (approval_timed_out); the run has finished (run_finished): nothing"
           " changed",
    "422": "The body does not fit {approved: bool, comment?: string}",
}


def paths() -> dict[str, Schema]:
    run_id = run_id_param()
    step = path_param("step", "The gate: a YAML approval step's name, or a durable"
                      " workflow's ctx.approval name.",
                      {"type": "string", "minLength": 1, "maxLength": 128})
    return {
        "/runs/{run_id}/approvals/{step}": {
            "post": op(
                "answerApproval", "Approve or reject an open approval gate.", tag="approvals",
                description="The first answer wins: a second one, or one at or after the"
                " gate's deadline, is refused (409) and changes nothing. The answer records"
                " who gave it (the API key's name; with ORCH_API_AUTH=off, the X-Approver"
                " header or `anonymous`). A rejection cancels the run.",
                parameters=[run_id, step], body=body("AnswerApproval", required=True),
                responses={"200": _json(ref("Approval"), "Answered; the run goes on"),
                           **errors(*BODY_ERRORS, "403", "404", "409", "503",
                                    notes=_ANSWER_ERRORS)},
            ),
            "get": op("getApproval", "One approval gate: its prompt, deadline and answer.",
                      tag="approvals", parameters=[run_id, step],
                      responses={"200": _json(ref("Approval"), "The gate"),
                                 **errors("404", "503", notes={"404": "No such gate"})}),
        },
        "/approvals": {
            "get": op(
                "listApprovals", "The inbox: open approval gates across runs, oldest first.",
                tag="approvals",
                parameters=[
                    {"name": "approver", "in": "query", "required": False,
                     "description": "Only gates this API key name may answer (naming it, or"
                     " open to anyone).",
                     "schema": {"type": "string", "minLength": 1, "maxLength": 128}},
                    {"name": "limit", "in": "query", "required": False,
                     "schema": {"type": "integer", "minimum": 1, "maximum": 500}}],
                responses={"200": _json(ref("ApprovalList"), "The open gates"),
                           **errors("400", "503", notes={"400": "A bad approver or limit"})},
            ),
        },
        "/approvals/links/{token}": {
            "post": op(
                "answerApprovalLink", "Answer a gate through its single-use link.",
                tag="approvals", open_=True,
                description="No bearer key: the token is the credential (a gate opened with"
                " `link: true`; its URL is in the inbox). The answer is recorded as by"
                " `link`; the same rules as an answer by key apply.",
                parameters=[path_param("token", "The link's secret token.")],
                body=body("AnswerApproval", required=True),
                responses={"200": _json(ref("Approval"), "Answered"),
                           **errors(*BODY_ERRORS, "404", "409", "503", notes={
                               **_ANSWER_ERRORS, "404": "No such link (or it expired)"})},
            ),
        },
    }
