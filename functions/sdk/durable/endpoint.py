"""The HTTP endpoint of a durable workflow, past the transport checks (size, signature):
one call's body in, its operations out (`protocol`'s `DurableRequestBody`, then a version 2
stream of operations or a version 1 answer)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import httpx
from pydantic import TypeAdapter, ValidationError
from starlette.responses import Response

from functions.sdk import tracing
from functions.sdk.durable.stream import OpStream
from functions.sdk.durable.workflow import Workflow, advance, play, start
from functions.sdk.protocol import PROTOCOL_HEADER, DurableOp, DurableRequestBody, JournalEntry
from functions.sdk.responses import dumps, error

__all__ = ["answer"]

_ENTRIES: TypeAdapter[list[JournalEntry]] = TypeAdapter(list[JournalEntry])


async def answer(wf: Workflow, raw: bytes, protocols: Sequence[int],
                 headers: Mapping[str, str] | None = None) -> Response:
    """The answer to one call of `wf` with body `raw`, in the newest of `protocols` the
    orchestrator also speaks. `headers`: the call's, whose `traceparent` (if any) the
    call's span continues."""
    try:
        data = json.loads(raw)
    except ValueError as exc:
        return error(400, "invalid_json", f"request body is not valid JSON: {exc}", False)
    try:
        body = DurableRequestBody.model_validate(data)
    except ValidationError as exc:
        problems = json.loads(exc.json(include_url=False, include_input=False))
        return error(400, "invalid_request", f"invalid workflow call: {exc}", False, problems)
    if body.journal_ref is not None:
        try:
            fetched = await _fetch_journal(str(body.journal_ref.get("url", "")))
            body = body.model_copy(update={"journal": _ENTRIES.validate_python(fetched)})
        except (httpx.HTTPError, ValueError) as exc:
            return error(503, "journal_unavailable",
                         f"could not fetch the journal by reference: {exc}", True)
    version = min(body.protocol, max(protocols))
    heads = headers or {}
    attributes = {"orchestrator.run_id": body.run.run_id, "orchestrator.workflow": wf.name,
                  "orchestrator.attempt": body.run.attempt, "orchestrator.mode": body.mode}
    if version >= 2 and body.mode == "run":
        async def run(sink: Callable[[DurableOp], None],
                      present: Callable[[], bool]) -> float | None:
            # The span is the stream's: the workflow runs while the answer is sent.
            with tracing.handler_span(heads, f"workflow {wf.name}", attributes):
                call, deadline = start(wf, body, version, sink, present)
                await play(wf, call, body.input, deadline)
                return deadline

        return OpStream(run, {PROTOCOL_HEADER: str(version)})  # type: ignore[return-value]
    with tracing.handler_span(heads, f"workflow {wf.name}", attributes):
        ops = await advance(wf, body, protocol=1)
    return Response(dumps(ops), status_code=200, media_type="application/json",
                    headers={PROTOCOL_HEADER: "1"})


async def _fetch_journal(url: str) -> list[Any]:
    """A journal sent by reference (a presigned URL of the orchestrator's blob store)."""
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"journal_ref.url {url[:80]!r} is not an http(s) URL")
    async with httpx.AsyncClient(timeout=30.0) as client:
        resp = await client.get(url)
        resp.raise_for_status()
    journal = resp.json()
    if not isinstance(journal, list):
        raise ValueError("the journal by reference is not a list")
    return journal
