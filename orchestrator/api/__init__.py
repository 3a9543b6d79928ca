"""6 · The HTTP entry point: the Starlette app (app.py: routes, auth, errors), its handlers
by resource, each with its OpenAPI paths (runs.py, durable.py, workflows.py, triggers.py),
its request models and body parsing, and the OpenAPI document (openapi.py). A web
dashboard will be a sub-app mounted here."""

from __future__ import annotations

from orchestrator.api.app import create_app

__all__ = ["create_app"]
