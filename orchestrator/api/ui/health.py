"""The dashboard's queues and workers page (`/ui/health`): what `GET /health` reads
(services/health/overview.py), drawn and refreshed every few seconds."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from orchestrator.api.state import api_state
from orchestrator.api.ui.render import page

__all__ = ["health"]


async def health(request: Request) -> Response:
    reads = api_state(request).rt.health()
    found = await run_in_threadpool(reads.read)
    return page(request, "health.html", health=found)
