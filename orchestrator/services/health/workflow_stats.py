"""A workflow's health over the last day or week (`GET /workflows/{name}/stats` and its
dashboard page): from its hourly counters (adapters/store/hourly_counts.py), runs
started, runs finished by status, the success rate and the step latency p50 and p95 of
each bucket of the window and of the whole window; and its newest failed runs grouped
by error code.

- **Buckets.** `day`: the 24 hours up to now, one bucket an hour (the last is the hour
  under way). `week`: 28 buckets of 6 hours, aligned on 00, 06, 12 and 18 UTC (the last
  is the one under way), so 163 to 168 hours. Times are UTC epoch seconds.
- **Success rate.** Runs that ended `success` over all that ended (failed, killed and
  skipped count against it) in the bucket; None when none ended.
- **Latency.** Estimated from the histogram's buckets (latency.py: linear
  interpolation inside the bucket where the cumulative count reaches 50% or 95%).
- **Failures.** The newest `FAILURES_SCANNED` failed runs of the workflow (whatever
  their age), grouped by their error's `code` (`unknown` without one), except that a
  run failed by a step (`step_failed`: every DAG run that fails) is grouped by the
  step's own error code, which tells the failures apart: each group's count, the
  failing step, its newest run, when that run ended and its message.

What it costs: one query of the hourly items, the run listing of the failed runs (a
query of the workflow's index and a read of those rows) and one batch read of their
errors."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.adapters.store import Store
from orchestrator.adapters.store.hourly_counts import HOUR, hour_at
from orchestrator.engine.records import RunRecord
from orchestrator.engine.states import RunStatus
from orchestrator.errors import Code
from orchestrator.services.health.latency import bucket_counts, quantile

__all__ = ["ENDED", "FAILURES_SCANNED", "WINDOWS", "Window", "WorkflowStats", "error_code",
           "failure_groups", "summary"]

ENDED = tuple(s.value for s in RunStatus if s.terminal)
STEP_FAILED = Code.STEP_FAILED.value
FAILURES_SCANNED = 50
MESSAGE_CHARS = 300


@dataclass(frozen=True)
class Window:
    name: str
    buckets: int
    bucket_hours: int

    def first_hour(self, now: float) -> int:
        """The hour the window's first bucket starts at."""
        return (hour_at(now) // self.bucket_hours - (self.buckets - 1)) * self.bucket_hours


WINDOWS = {"day": Window("day", 24, 1), "week": Window("week", 28, 6)}


def summary(counts: Mapping[str, float]) -> dict[str, Any]:
    """What one bucket's (or the window's) counters say: runs started and finished by
    status, the success rate, the step attempts and their p50 and p95 (seconds)."""
    finished = {s: int(counts.get(f"finished_{s}", 0)) for s in ENDED}
    ended = sum(finished.values())
    hist = bucket_counts(counts)
    return {
        "started": int(counts.get("started", 0)),
        "finished": finished,
        "success_rate": None if not ended else finished[RunStatus.SUCCESS.value] / ended,
        "steps": int(sum(hist)),
        "p50": quantile(0.5, hist),
        "p95": quantile(0.95, hist),
    }


def _add(into: dict[str, float], counts: Mapping[str, float]) -> None:
    for attr, n in counts.items():
        into[attr] = into.get(attr, 0.0) + n


def _message(error: Mapping[str, Any]) -> str:
    raw = error.get("message") or error.get("reason") or ""
    # A function's error body is JSON: keep it JSON, never Python's printout of it.
    text = raw if isinstance(raw, str) else json.dumps(raw, default=str)
    return text[:MESSAGE_CHARS]


def error_code(error: Mapping[str, Any]) -> str:
    """What a failed run's error is grouped by: its code, but for a run failed by a
    step (`step_failed`, every DAG run's) the step's own error code (its `reason`)."""
    code = error.get("code")
    reason = error.get("reason")
    if code == STEP_FAILED and isinstance(reason, Mapping) and reason.get("code"):
        code = reason["code"]
    return str(code or "unknown")


def failure_groups(runs: list[RunRecord]) -> list[dict[str, Any]]:
    """Failed runs (newest first) grouped by their error's code: the biggest group
    first, ties by their newest run."""
    groups: dict[str, dict[str, Any]] = {}
    for r in runs:
        error = r.error or {}
        code = error_code(error)
        group = groups.get(code)
        if group is None:
            step = error.get("step") if error.get("code") == STEP_FAILED else None
            groups[code] = {"code": code, "count": 1, "step": step, "newest_run_id": r.run_id,
                            "newest_at": r.finished_at or r.created_at,
                            "message": _message(error)}
        else:
            group["count"] += 1
    return sorted(groups.values(), key=lambda g: (-g["count"], -g["newest_at"]))


class WorkflowStats:
    def __init__(self, store: Store, clock: Callable[[], float]) -> None:
        self.store = store
        self.clock = clock

    def read(self, workflow: str, window: Window) -> dict[str, Any]:
        """The workflow's buckets, totals and failure groups over `window` (as JSON)."""
        now = self.clock()
        first = window.first_hour(now)
        hourly = self.store.hourly.read(workflow, first, now)
        buckets: list[dict[str, Any]] = []
        total: dict[str, float] = {}
        for b in range(window.buckets):
            start = first + b * window.bucket_hours
            counts: dict[str, float] = {}
            for hour in range(start, start + window.bucket_hours):
                _add(counts, hourly.get(hour, {}))
            _add(total, counts)
            buckets.append({"start": start * HOUR, "end": (start + window.bucket_hours) * HOUR,
                            **summary(counts)})
        return {
            "workflow": workflow, "window": window.name, "at": now,
            "bucket_seconds": window.bucket_hours * HOUR,
            "buckets": buckets, "totals": summary(total),
            "failures": self.failures(workflow, now),
        }

    def failures(self, workflow: str, now: float) -> dict[str, Any]:
        listed, _ = self.store.runs.list_runs(workflow, now, status=RunStatus.FAILED.value,
                                              limit=FAILURES_SCANNED)
        ids = [r.run_id for r in listed]
        rows = self.store.runs.get_runs(ids, now) if ids else {}
        runs = [rows[i] for i in ids if i in rows]
        return {"scanned": len(runs), "groups": failure_groups(runs)}
