"""A step's attempts as segments of time, from its history entries: its waits in the
queue (ready to started), its calls (started to its outcome) and, before a retry, its
backoff. Pure; drawn by `show --timeline` (cli/timeline.py) and the dashboard's waterfall."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Segment", "segments"]


@dataclass(frozen=True)
class Segment:
    kind: str  # wait (a retry's backoff), queue (ready, not started), call
    start: float
    end: float


def segments(entries: Sequence[dict[str, Any]], now: float) -> list[Segment]:
    """One step's attempts, from its history entries (oldest first)."""
    out: list[Segment] = []
    queued: float | None = None
    calling: float | None = None
    for e in entries:
        kind, at = e.get("type", ""), float(e.get("at") or 0.0)
        if kind == "step.ready":
            queued = at
        elif kind == "step.started":
            if queued is not None and at > queued:
                out.append(Segment("queue", queued, at))
            queued, calling = None, at
        elif kind == "step.retrying":
            if calling is not None:
                out.append(Segment("call", calling, at))
            calling = None
            due = e.get("due_at")
            if isinstance(due, (int, float)) and due > at:
                out.append(Segment("wait", at, float(due)))
                queued = float(due)
            else:
                queued = at
        elif kind in ("step.succeeded", "step.failed", "step.skipped"):
            if calling is not None:
                out.append(Segment("call", calling, at))
            calling = queued = None
    if calling is not None and now > calling:
        out.append(Segment("call", calling, now))
    elif queued is not None and now > queued:
        out.append(Segment("queue", queued, now))
    return out
