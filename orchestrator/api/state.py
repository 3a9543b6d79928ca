"""What a handler reaches through its request: the state create_app (app.py) sets once on
the app, and the run a path names. Handlers are module-level functions (runs.py,
durable.py, workflows.py, triggers.py); nothing they need is closed over."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from orchestrator.engine.records import RunRecord
from orchestrator.runtime import Runtime

__all__ = ["ApiState", "api_state", "run_or_404"]


@dataclass(frozen=True)
class ApiState:
    """Built once per app, kept at `app.state.api`."""

    rt: Runtime
    # Raises Unauthorized unless the Authorization header carries a valid bearer key.
    check_key: Callable[[str | None], None]
    # The OpenAPI document /openapi.json serves.
    spec: dict[str, Any]


def api_state(request: Request) -> ApiState:
    state: ApiState = request.app.state.api
    return state


def run_or_404(rt: Runtime, run_id: str) -> RunRecord:
    """The run `run_id` names, or NotFound (answered 404) when the id is unknown, expired
    or malformed. Blocking: call it from a thread."""
    return rt.runs.get(run_id)
