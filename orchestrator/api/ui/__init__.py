"""The web dashboard at /ui: runs (filtered, live), a run (its graph or operations, a
zoomable waterfall, each step's input and output, lineage, cost and actions), workflows
as a table with their triggers, schedules and a sparkline of their recent runs
(sparks.py), a workflow's health over a day or week (workflow.py), events, the
dead-letter queue, the queues and workers (health.py), and bulk actions over runs
(bulk.py).

Server-rendered (Jinja2 templates in templates/), made live by htmx and its SSE
extension (static/, committed: no Node build at install time), and signed in with the
API's own keys (session.py). Every action goes through the service the API's route
calls (actions.py). Mounted by create_app (api/app.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from orchestrator.adapters.dead_letters import DeadLetters
from orchestrator.api.ui import actions, bulk, health, live, pages, workflow
from orchestrator.api.ui.session import guarded
from orchestrator.runtime import Runtime
from orchestrator.services.access.dashboard_logins import DashboardLogins

__all__ = ["UiState", "favicon", "routes", "ui_state"]


@dataclass(frozen=True)
class UiState:
    badge: str | None  # "DEV" on the embedded emulator
    auth_on: bool
    logins: DashboardLogins
    dead_letters: DeadLetters


def ui_state(rt: Runtime, badge: str | None) -> UiState:
    return UiState(badge, rt.settings.api_auth, DashboardLogins(rt.control),
                   DeadLetters(rt.clients.sqs, rt.settings.names))


class _Cached(StaticFiles):
    """The dashboard's static files, kept by the browser for a day: their URLs carry the
    package's version (base.html), so a new release is fetched anew. A page open on a
    run then costs the API no request for them."""

    def file_response(self, *args: Any, **kwargs: Any) -> Response:
        response = super().file_response(*args, **kwargs)
        response.headers["Cache-Control"] = "public, max-age=86400, immutable"
        return response


STATIC = Path(__file__).parent / "static"


async def favicon(request: Request) -> Response:
    """The icon a browser asks /favicon.ico for, whatever the page (the dashboard's pages
    link static/favicon.svg): open to anyone, as a missing one is a console error on
    every page. Its URL carries no version, so it is kept a day, not forever."""
    return FileResponse(STATIC / "favicon.ico", media_type="image/vnd.microsoft.icon",
                        headers={"Cache-Control": "public, max-age=86400"})


def routes() -> list[BaseRoute]:
    """The dashboard under /ui, and the browser's /favicon.ico."""
    g = guarded
    inside = [
        Route("/", pages.index, methods=["GET"]),
        Route("/login", pages.login, methods=["GET"]),
        Route("/login", pages.login_post, methods=["POST"]),
        Route("/logout", pages.logout, methods=["POST"]),
        Route("/runs", g(pages.runs), methods=["GET"]),
        Route("/runs/live", g(live.runs_stream), methods=["GET"]),
        Route("/runs/{run_id}", g(pages.run), methods=["GET"]),
        Route("/runs/{run_id}/live", g(live.run_stream), methods=["GET"]),
        Route("/runs/{run_id}/history", g(pages.history), methods=["GET"]),
        Route("/runs/{run_id}/cancel", g(actions.cancel), methods=["POST"]),
        Route("/runs/{run_id}/rerun", g(actions.rerun), methods=["POST"]),
        Route("/runs/{run_id}/signal", g(actions.signal), methods=["POST"]),
        Route("/runs/{run_id}/hooks/{op}", g(actions.execute_hook), methods=["POST"]),
        Route("/runs/{run_id}/resume", g(actions.resume), methods=["POST"]),
        Route("/runs/{run_id}/reset", g(actions.reset), methods=["POST"]),
        Route("/bulk", g(bulk.start), methods=["POST"]),
        Route("/bulk/confirm", g(bulk.confirm), methods=["POST"]),
        Route("/bulk/{job_id}", g(bulk.job), methods=["GET"]),
        Route("/workflows", g(pages.workflows), methods=["GET"]),
        Route("/workflows/{workflow}", g(workflow.workflow), methods=["GET"]),
        Route("/workflows/{workflow}/start", g(actions.start), methods=["POST"]),
        Route("/workflows/{workflow}/schedule/{action}", g(actions.schedule),
              methods=["POST"]),
        Route("/events", g(pages.events), methods=["GET"]),
        Route("/events", g(actions.emit), methods=["POST"]),
        Route("/approvals", g(pages.approvals), methods=["GET"]),
        Route("/approvals/{run_id}/{step}", g(actions.answer), methods=["POST"]),
        Route("/dlq", g(pages.dlq), methods=["GET"]),
        Route("/dlq/redrive", g(actions.redrive), methods=["POST"]),
        Route("/health", g(health.health), methods=["GET"]),
        Mount("/static", _Cached(directory=STATIC), name="ui-static"),
    ]
    return [Mount("/ui", routes=inside), Route("/favicon.ico", favicon, methods=["GET"])]
