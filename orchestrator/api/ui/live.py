"""Live updates over server-sent events (sse-starlette): the open page's live part is
rendered again every so often and sent only when it changed; htmx swaps it in.

A run page reads the run through the run-following path (GET /runs/{id}'s: the step
rows that can have moved, services/step_follow.py), and reads its history only when
that view changed; it stops when the run has ended. The runs list reads the listing's
first page. Neither writes anything, and each costs one open page a read every
RUN_EVERY or LIST_EVERY seconds, whatever the run's size."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from orchestrator.api.state import api_state
from orchestrator.api.ui.pages import run_live_html, runs_rows_html
from orchestrator.api.ui.reads import ENDED
from orchestrator.errors import NotFound

__all__ = ["run_stream", "runs_stream"]

RUN_EVERY = 0.5  # a look at the run
REDRAW_EVERY = 1.0  # at most one drawing of a running run's live part
CLOCK_EVERY = 5.0  # a quiet run's live part drawn again (its elapsed time)
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
        # The run's view first (its row and the steps in flight, as a long poll reads
        # it). The live part, whose history read and drawing cost more, is drawn again
        # when that changed, at most every REDRAW_EVERY while the run goes on, at once
        # when it ended, and every CLOCK_EVERY to move a quiet run's clock.
        body = rt.runs.view_body(run_id, steps=True)
        now = time.monotonic()
        if "html" in seen and (
                (body == seen["body"] and now - seen["at"] < CLOCK_EVERY)
                or (now - seen["at"] < REDRAW_EVERY and not _ended(body))):
            return seen["html"], False
        html, view = run_live_html(rt, run_id, query, body)
        done = view["status"] in ENDED or bool(view.get("paused"))
        seen.update(body=body, html=html, at=now)
        return html, done

    return EventSourceResponse(_changes(render, RUN_EVERY, "live"), ping=PING)


def _ended(body: bytes) -> bool:
    """Whether a run's view (JSON, as GET /runs/{id} sends it) says it ended or paused."""
    view = json.loads(body)
    return view["status"] in ENDED or bool(view.get("paused"))


async def runs_stream(request: Request) -> Response:
    rt = api_state(request).rt
    query = dict(request.query_params)
    return EventSourceResponse(
        _changes(lambda: (runs_rows_html(rt, query), False), LIST_EVERY, "rows"), ping=PING)
