"""Live updates over server-sent events (sse-starlette): the open page's live part is
rendered again every so often and sent only when it changed; htmx swaps it in. A run
page's other parts that follow the run (parts.py: its status, times, cost and actions)
are drawn with it and sent, each as an event of its own, only when they changed.

A run page reads the run through the run-following path (GET /runs/{id}'s: the step
rows that can have moved, services/reads/step_follow.py), and reads its history only when
that view changed (and its lineage once, if it ended while the page was open); it
stops when the run has ended. The runs list reads the listing's
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
from orchestrator.api.ui import parts, reads
from orchestrator.api.ui.pages import run_live_html, runs_rows_html
from orchestrator.api.ui.reads import ENDED
from orchestrator.errors import NotFound

__all__ = ["run_stream", "runs_stream"]

RUN_EVERY = 0.5  # a look at the run
REDRAW_EVERY = 1.0  # at most one drawing of a running run's live part
CLOCK_EVERY = 5.0  # a quiet run's live part drawn again (its elapsed time)
LIST_EVERY = 2.0
PING = 15


async def _changes(render: Callable[[], tuple[dict[str, str], bool]], every: float,
                   shown: dict[str, str] | None = None) -> AsyncIterator[ServerSentEvent]:
    """Each drawing's parts, an event each (named by the part), those that changed since
    they were last sent, or since the page drew them (`shown`: their digests); then
    `done` once the drawing says so."""
    last = dict(shown or {})
    while True:
        try:
            drawn, done = await run_in_threadpool(render)
        except NotFound:
            yield ServerSentEvent(data="gone", event="done")
            return
        for name, html in drawn.items():
            mark = parts.digest(html)
            if last.get(name) != mark:
                last[name] = mark
                yield ServerSentEvent(data=html, event=name)
        if done:
            yield ServerSentEvent(data="done", event="done")
            return
        await asyncio.sleep(every)


async def run_stream(request: Request) -> Response:
    rt = api_state(request).rt
    run_id = request.path_params["run_id"]
    query = dict(request.query_params)
    shown = parts.read_shown(query.get("shown"))
    seen: dict[str, Any] = {}

    def render() -> tuple[dict[str, str], bool]:
        # The run's view first (its row and the steps in flight, as a long poll reads
        # it). The live part, whose history read and drawing cost more, is drawn again
        # when that changed, at most every REDRAW_EVERY while the run goes on, at once
        # when it ended, and every CLOCK_EVERY to move a quiet run's clock. The page's
        # other parts are drawn with it, from the same view.
        body = rt.runs.view_body(run_id, steps=True)
        now = time.monotonic()
        if "drawn" in seen and (
                (body == seen["body"] and now - seen["at"] < CLOCK_EVERY)
                or (now - seen["at"] < REDRAW_EVERY and not _ended(body))):
            return seen["drawn"], False
        html, view = run_live_html(rt, run_id, query, body)
        done = view["status"] in ENDED or bool(view.get("paused"))
        drawn = {"live": html, **parts.draw(view)}
        if done and shown.get("glyph") not in (None, parts.digest(drawn["glyph"])):
            # It ended (or paused) while the page was open: the lineage shows its status.
            drawn.update(parts.draw(view, reads.lineage(rt, view)))
        seen.update(body=body, drawn=drawn, at=now)
        return drawn, done

    return EventSourceResponse(_changes(render, RUN_EVERY, shown), ping=PING)


def _ended(body: bytes) -> bool:
    """Whether a run's view (JSON, as GET /runs/{id} sends it) says it ended or paused."""
    view = json.loads(body)
    return view["status"] in ENDED or bool(view.get("paused"))


async def runs_stream(request: Request) -> Response:
    rt = api_state(request).rt
    query = dict(request.query_params)
    return EventSourceResponse(
        _changes(lambda: ({"rows": runs_rows_html(rt, query)}, False), LIST_EVERY), ping=PING)
