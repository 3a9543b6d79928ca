"""Live updates over server-sent events (sse-starlette): the open page's live part is
rendered again every so often and sent only when it changed; htmx swaps it in.

A run page reads the run through the run-following path (GET /runs/{id}'s: the step
rows that can have moved, services/step_follow.py), and reads its history only when
that view changed; it stops when the run has ended. The runs list reads the listing's
first page. Neither writes anything, and each costs one open page a read every
RUN_EVERY or LIST_EVERY seconds, whatever the run's size."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from orchestrator.api.state import api_state
from orchestrator.api.ui.pages import run_live_html, runs_rows_html
from orchestrator.api.ui.render import ENDED
from orchestrator.errors import NotFound

__all__ = ["run_stream", "runs_stream"]

RUN_EVERY = 0.5
LIST_EVERY = 2.0
PING = 15


async def _changes(render: Callable[[], tuple[str, bool]], every: float, event: str
                   ) -> AsyncIterator[ServerSentEvent]:
    last = None
    while True:
        try:
            html, done = await run_in_threadpool(render)
        except NotFound:
            yield ServerSentEvent(data="gone", event="done")
            return
        if html != last:
            last = html
            yield ServerSentEvent(data=html, event=event)
        if done:
            yield ServerSentEvent(data="done", event="done")
            return
        await asyncio.sleep(every)


async def run_stream(request: Request) -> Response:
    rt = api_state(request).rt
    run_id = request.path_params["run_id"]
    query = dict(request.query_params)
    seen: dict[str, Any] = {}

    def render() -> tuple[str, bool]:
        # The run alone first (its row and the steps in flight): the whole live part is
        # drawn again only when that changed, or to move the clock of a running run.
        body = rt.runs.view_body(run_id, steps=True)
        if body == seen.get("body") and "html" in seen and seen.get("ticks", 0) < 4:
            seen["ticks"] = seen.get("ticks", 0) + 1
            return seen["html"], seen["done"]
        html, view = run_live_html(rt, run_id, query)
        done = view["status"] in ENDED or bool(view.get("paused"))
        seen.update(body=body, html=html, done=done, ticks=0)
        return html, done

    return EventSourceResponse(_changes(render, RUN_EVERY, "live"), ping=PING)


async def runs_stream(request: Request) -> Response:
    rt = api_state(request).rt
    query = dict(request.query_params)
    return EventSourceResponse(
        _changes(lambda: (runs_rows_html(rt, query), False), LIST_EVERY, "rows"), ping=PING)
