"""The workflow page's charts, drawn on the server as inline SVG (templates/_charts.html
draws what these compute): no JavaScript, and a table of the same numbers beside them.

Each chart is a frozen `Chart` in its own coordinates (`WIDTH` x `HEIGHT`, scaled to the
page's width by its viewBox): a slot per bucket of the window, left to right, oldest
first.

- `runs_chart`: a bar per bucket, stacked by how its runs ended (`STACK`), its height
  proportional to the count (the tallest bucket fills the plot);
- `rate_chart`: the success rate, 0-100 %, a line through the buckets where runs ended
  (a gap where none did);
- `latency_chart`: the step latency p50 and p95, 0 to the highest p95, as two lines
  (a gap where no step was timed).

Pure functions of the stats' buckets (services/health/workflow_stats.py)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

__all__ = ["HEIGHT", "STACK", "WIDTH", "Bar", "Chart", "Series", "bucket_label",
           "latency_chart", "rate_chart", "runs_chart", "seconds"]

WIDTH, HEIGHT = 720, 180
LEFT, RIGHT, TOP, BOTTOM = 52, 8, 10, 24
PLOT_W, PLOT_H = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
# How runs ended, bottom of a stack first.
STACK = ("success", "failed", "killed", "skipped")
LABELS_SHOWN = 6  # x-axis labels across a chart


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    w: float
    h: float
    status: str
    n: int
    title: str  # its tooltip: the bucket and the count


@dataclass(frozen=True)
class Series:
    name: str  # the CSS class's suffix and the legend's text
    segments: tuple[str, ...]  # polylines' `points`, one a stretch without a gap
    dots: tuple[tuple[float, float, str], ...]  # x, y, tooltip: a point per bucket


@dataclass(frozen=True)
class Chart:
    title: str
    bars: tuple[Bar, ...] = ()
    series: tuple[Series, ...] = ()
    y_ticks: tuple[tuple[float, str], ...] = ()
    x_ticks: tuple[tuple[float, str], ...] = ()
    width: int = WIDTH
    height: int = HEIGHT
    plot_left: int = LEFT
    plot_right: int = WIDTH - RIGHT
    empty: bool = True  # nothing to draw (the page says so instead)


def bucket_label(start: float, bucket_seconds: int) -> str:
    """A bucket's start as its axis label (UTC): `14:00` an hour, `12-06 18h` for 6 h."""
    t = time.gmtime(start)
    return time.strftime("%H:00" if bucket_seconds <= 3600 else "%m-%d %Hh", t)


def _slot(i: int, n: int) -> tuple[float, float]:
    """Bucket i's slot: its left edge and width."""
    w = PLOT_W / max(n, 1)
    return LEFT + i * w, w


def _x_ticks(buckets: Sequence[dict[str, Any]], every: int) -> tuple[tuple[float, str], ...]:
    n = len(buckets)
    out = []
    step = max(1, n // LABELS_SHOWN)
    for i in range(0, n, step):
        x, w = _slot(i, n)
        out.append((round(x + w / 2, 1), bucket_label(buckets[i]["start"], every)))
    return tuple(out)


def _y(value: float, top: float) -> float:
    """A value's height on the plot, 0 at its bottom, `top` at its top."""
    return round(TOP + PLOT_H - (value / top) * PLOT_H if top > 0 else TOP + PLOT_H, 1)


def _nice(top: float) -> float:
    """The axis's top: `top` rounded up to 1, 2 or 5 times a power of ten."""
    if top <= 0:
        return 1.0
    power = 10.0 ** int(f"{top:e}".split("e")[1])
    for m in (1, 2, 5, 10):
        if m * power >= top:
            return m * power
    return 10 * power  # pragma: no cover - 10 covers every mantissa


def runs_chart(buckets: Sequence[dict[str, Any]], every: int) -> Chart:
    """Runs that ended in each bucket, stacked by status (`every`: seconds a bucket)."""
    n = len(buckets)
    totals = [sum(b["finished"].get(s, 0) for s in STACK) for b in buckets]
    top = _nice(max(totals, default=0))
    bars = []
    for i, b in enumerate(buckets):
        x, w = _slot(i, n)
        base = 0
        for status in STACK:
            count = int(b["finished"].get(status, 0))
            if not count:
                continue
            y0, y1 = _y(base, top), _y(base + count, top)
            bars.append(Bar(round(x + w * 0.15, 1), y1, round(w * 0.7, 1), round(y0 - y1, 1),
                            status, count,
                            f"{bucket_label(b['start'], every)}: {count} {status}"))
            base += count
    ticks = tuple((_y(v, top), f"{v:g}") for v in (0, top / 2, top))
    return Chart("Runs ended, by status", bars=tuple(bars), y_ticks=ticks,
                 x_ticks=_x_ticks(buckets, every), empty=not bars)


def _series(name: str, buckets: Sequence[dict[str, Any]], value: Callable[[Any], Any],
            top: float, fmt: Callable[[float], str], every: int) -> Series:
    n = len(buckets)
    segments: list[str] = []
    run: list[str] = []
    dots = []
    for i, b in enumerate(buckets):
        v = value(b)
        if v is None:
            if run:
                segments.append(" ".join(run))
            run = []
            continue
        x, w = _slot(i, n)
        cx, cy = round(x + w / 2, 1), _y(v, top)
        run.append(f"{cx},{cy}")
        dots.append((cx, cy, f"{bucket_label(b['start'], every)}: {name} {fmt(v)}"))
    if run:
        segments.append(" ".join(run))
    return Series(name, tuple(segments), tuple(dots))


def _percent(v: float) -> str:
    return f"{v * 100:.0f}%"


def seconds(v: float) -> str:
    """A latency as the page writes it."""
    return f"{v * 1000:.0f} ms" if v < 1 else f"{v:.2f} s"


def rate_chart(buckets: Sequence[dict[str, Any]], every: int) -> Chart:
    """The success rate of each bucket where runs ended."""
    line = _series("success", buckets, itemgetter("success_rate"), 1.0, _percent, every)
    ticks = tuple((_y(v, 1.0), _percent(v)) for v in (0, 0.5, 1.0))
    return Chart("Success rate", series=(line,), y_ticks=ticks,
                 x_ticks=_x_ticks(buckets, every), empty=not line.dots)


def latency_chart(buckets: Sequence[dict[str, Any]], every: int) -> Chart:
    """Step latency p50 and p95 of each bucket where steps were timed."""
    top = _nice(max((b["p95"] or 0.0 for b in buckets), default=0.0))
    lines = tuple(_series(q, buckets, itemgetter(q), top, seconds, every)
                  for q in ("p50", "p95"))
    ticks = tuple((_y(v, top), seconds(v)) for v in (0, top / 2, top))
    return Chart("Step latency p50 and p95", series=lines, y_ticks=ticks,
                 x_ticks=_x_ticks(buckets, every), empty=not lines[0].dots)
