"""The script host a stack serves beside a manifest (`orchestrator dev`, and its
Lambda form): a manifest none of whose backends has the `shell` capability gets
backend `scripts`, at SCRIPTS_URL signed with SCRIPTS_SECRET, so scripts and `run:`
steps work with any manifest."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from orchestrator.manifest.models import Backend

__all__ = ["SCRIPTS_BACKEND", "with_script_host"]

SCRIPTS_BACKEND = "scripts"


def with_script_host(manifest: Any, env: Mapping[str, str]) -> Any:
    """`manifest`, with backend `scripts` when SCRIPTS_URL is set and no backend has
    the `shell` capability (a manifest's own shell backend, or `scripts`, wins)."""
    url = env.get("SCRIPTS_URL")
    if (not url or manifest.capable("shell") is not None
            or SCRIPTS_BACKEND in manifest.backends):
        return manifest
    manifest.backends[SCRIPTS_BACKEND] = Backend(
        url=url, secret=env.get("SCRIPTS_SECRET") or None, capabilities=["shell"])
    return manifest
