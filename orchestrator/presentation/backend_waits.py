"""How a step held back by its backend's limits is shown (the view's `waiting_for`,
services/reads/views.py), in the terminal and on the dashboard alike."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["backend_wait_text"]


def backend_wait_text(waiting_for: Mapping[str, Any]) -> str:
    """`waiting for backend api (limit 4 in flight)`, `(rate 10/1s)`, or `(asked to retry
    later)` while a 429's Retry-After holds the backend off."""
    backend = waiting_for.get("backend", "?")
    limits = waiting_for.get("limits") or {}
    if waiting_for.get("limit") == "concurrency":
        what = f"limit {limits.get('concurrency', '?')} in flight"
    elif waiting_for.get("limit") == "rate" and limits.get("rate"):
        what = f"rate {limits['rate']}"
    else:
        what = "asked to retry later"
    return f"waiting for backend {backend} ({what})"
