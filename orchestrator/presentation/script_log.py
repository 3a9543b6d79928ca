"""A shell script run's log, as `show` and the dashboard print it: what the script
printed, kept in its result (`{exit_code, log}`) or in its error's details."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["script_log"]


def script_log(view: Mapping[str, Any]) -> str | None:
    """The log of a shell script's run view; None for any other run."""
    output, error = view.get("output"), view.get("error")
    if isinstance(output, dict) and isinstance(output.get("log"), str) \
            and set(output) <= {"log", "exit_code"}:
        return str(output["log"])
    details = error.get("details") if isinstance(error, dict) else None
    if isinstance(details, dict) and isinstance(details.get("log"), str):
        return str(details["log"])
    return None
