"""A workflow's recent runs as a sparkline on the workflows page: one bar a run, oldest
on the left, as tall as the run took (the longest of them the full height), coloured by
its status (the template gives each bar its status's class: ui.css's colours). A run
still going is drawn as long as it has been going.

Pure: the runs as listings show them (api/runs.py summary), newest first, as the one
listing query a workflow that the page makes returns them; bars out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Spark", "SparkBar", "sparkline"]

BAR_W, GAP, HEIGHT, FLOOR = 4, 1, 24, 2  # px; FLOOR: the least a bar is drawn, so it shows


@dataclass(frozen=True)
class SparkBar:
    x: int
    y: float
    h: float
    status: str
    took: float  # seconds
    run_id: str


@dataclass(frozen=True)
class Spark:
    bars: list[SparkBar]
    width: int
    height: int
    longest: float  # seconds: a full-height bar's run
    counts: dict[str, int]  # runs by status, for the drawing's label


def _took(run: dict[str, Any], now: float) -> float:
    start = run.get("started_at") or run.get("created_at") or now
    end = run.get("finished_at") or now
    return max(0.0, float(end) - float(start))


def sparkline(runs: Sequence[dict[str, Any]], now: float) -> Spark:
    """`runs` newest first (as listed) drawn oldest first, left to right."""
    ordered = list(reversed(runs))
    took = [_took(r, now) for r in ordered]
    longest = max(took, default=0.0)
    bars = []
    counts: dict[str, int] = {}
    for i, (run, t) in enumerate(zip(ordered, took, strict=True)):
        h = FLOOR + (HEIGHT - FLOOR) * (t / longest if longest > 0 else 0.0)
        status = str(run.get("status", ""))
        counts[status] = counts.get(status, 0) + 1
        bars.append(SparkBar(i * (BAR_W + GAP), round(HEIGHT - h, 1), round(h, 1), status, t,
                             str(run.get("run_id", ""))))
    width = max(BAR_W, len(bars) * (BAR_W + GAP) - GAP)
    return Spark(bars, width, HEIGHT, longest, counts)
