"""The script host a stack serves beside a manifest (`orchestrator dev`, its Lambda
form, a deployed stack): a manifest none of whose backends has the `shell` capability
gets backend `scripts`, at SCRIPTS_URL signed with SCRIPTS_SECRET, so scripts and
`run:` steps work with any manifest. A manifest's own shell backend wins."""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator.manifest.models import Backend
from orchestrator.manifest.shell import SHELL

__all__ = ["SCRIPTS_BACKEND", "script_host"]

SCRIPTS_BACKEND = "scripts"


def script_host(backends: Mapping[str, Backend], env: Mapping[str, str]) -> Backend | None:
    """Backend `scripts` to add to `backends`, or None: SCRIPTS_URL unset, a backend
    that has `shell` already, or one named `scripts`."""
    url = env.get("SCRIPTS_URL")
    if (not url or SCRIPTS_BACKEND in backends
            or any(SHELL in b.capabilities for b in backends.values())):
        return None
    return Backend(url=url, secret=env.get("SCRIPTS_SECRET") or None, capabilities=[SHELL])
