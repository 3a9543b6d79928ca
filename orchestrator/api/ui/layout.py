"""Where the dashboard draws things: a DAG run's steps as boxes in columns (by longest
path, ordered to cross fewer edges) with curved edges, and a run's attempts as a
waterfall on a time axis that zooms and collapses the idle gaps. Pure: views in,
coordinates out; the templates draw them as SVG."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.presentation.attempt_segments import Segment, segments
from orchestrator.presentation.layers import columns_by_longest_path

__all__ = ["REUSED", "Bar", "Box", "Graph", "Waterfall", "graph", "seconds", "waterfall"]

BOX_W, BOX_H = 188, 46
GAP_X, GAP_Y, PAD = 56, 14, 8


REUSED = "↺"  # a rerun's step carried over from the run it reruns, in its box and rows


@dataclass(frozen=True)
class Box:
    name: str
    status: str
    detail: str
    x: int
    y: int
    reused: bool = False  # carried over from the run it reruns, not run again


@dataclass(frozen=True)
class Graph:
    width: int
    height: int
    boxes: list[Box]
    edges: list[str]  # SVG path data, one an edge
    box_w: int = BOX_W
    box_h: int = BOX_H


def detail(step: dict[str, Any]) -> str:
    """The one line under a step's name: what it is doing or why it stopped."""
    status = str(step.get("status", ""))
    attempts = int(step.get("attempts") or 0)
    error = step.get("error")
    if status == "failed" and isinstance(error, dict):
        reason = str(error.get("message") or error.get("code") or "failed")
        return reason if len(reason) <= 28 else reason[:27] + "…"
    if status == "running":
        return f"running… attempt {attempts}" if attempts > 1 else "running…"
    if status == "success" and step.get("reused_from"):
        return f"{REUSED} reused, not run again"
    if status == "success":
        return "done" if attempts <= 1 else f"done after {attempts} attempts"
    return status.replace("_", " ")


def graph(steps: Sequence[dict[str, Any]]) -> Graph:
    """Columns left to right by longest path; each column ordered by the mean row of
    its dependencies (one barycentre pass), which uncrosses most fan-ins and fan-outs."""
    layer = columns_by_longest_path(
        {s["step"]: [d for d in s.get("depends_on") or () if d != s["step"]] for s in steps})
    columns: list[list[dict[str, Any]]] = [[] for _ in range(max(layer.values(), default=-1) + 1)]
    for s in steps:
        columns[layer.get(s["step"], 0)].append(s)
    row: dict[str, float] = {}
    for col in columns:
        def centre(s: dict[str, Any]) -> float:
            ups = [row[d] for d in s.get("depends_on") or () if d in row]
            return sum(ups) / len(ups) if ups else float("inf")
        col.sort(key=centre)  # stable: declaration order among equals
        for i, s in enumerate(col):
            row[s["step"]] = i
    boxes: dict[str, Box] = {}
    for c, col in enumerate(columns):
        for i, s in enumerate(col):
            boxes[s["step"]] = Box(s["step"], str(s.get("status", "")), detail(s),
                                   PAD + c * (BOX_W + GAP_X), PAD + i * (BOX_H + GAP_Y),
                                   bool(s.get("reused_from")))
    edges = []
    for s in steps:
        to = boxes[s["step"]]
        for d in s.get("depends_on") or ():
            fro = boxes.get(d)
            if fro is None:
                continue
            x1, y1 = fro.x + BOX_W, fro.y + BOX_H // 2
            x2, y2 = to.x, to.y + BOX_H // 2
            mid = (x1 + x2) // 2
            edges.append(f"M{x1},{y1} C{mid},{y1} {mid},{y2} {x2 - 6},{y2}")
    tallest = max((len(c) for c in columns), default=0)
    return Graph(PAD * 2 + max(1, len(columns)) * (BOX_W + GAP_X) - GAP_X,
                 PAD * 2 + max(1, tallest) * (BOX_H + GAP_Y) - GAP_Y,
                 list(boxes.values()), edges)


# ---- the waterfall -----------------------------------------------------------------------

ROW_H, LABEL_W, AXIS_W = 24, 170, 640
IDLE_MIN = 1.0  # seconds of nobody busy worth collapsing
GAP_PX = 24  # the width a collapsed gap keeps


@dataclass(frozen=True)
class Bar:
    row: int
    kind: str  # queue, call, wait
    x: float
    w: float
    title: str


@dataclass(frozen=True)
class Waterfall:
    names: list[tuple[str, str]]  # (step, status)
    bars: list[Bar]
    gaps: list[tuple[float, float]]  # collapsed idle gaps: (x, seconds hidden)
    ticks: list[tuple[float, str]]
    t0: float
    t1: float  # the window shown, seconds from the run's start
    span: float  # the run's whole length
    height: int
    reused: frozenset[int] = frozenset()  # the rows of steps a rerun carried over
    label_w: int = LABEL_W
    axis_w: int = AXIS_W
    row_h: int = ROW_H


def seconds(s: float) -> str:
    """A time on the waterfall's axis: ms under a second (a short run reads 0ms → 44ms)."""
    if s < 1:
        return f"{s * 1000:.0f}ms"
    if s < 600:
        return f"{s:.1f}s" if s < 60 else f"{s:.0f}s"
    return f"{int(s // 60)}m{int(s % 60):02d}s"


def _idle(rows: list[list[Segment]], a: float, b: float) -> list[tuple[float, float]]:
    """Stretches in [a, b] where no segment of any row is under way."""
    spans = sorted((s.start, s.end) for r in rows for s in r if s.end > a and s.start < b)
    out, at = [], a
    for s, e in spans:
        if s - at >= IDLE_MIN:
            out.append((at, s))
        at = max(at, e)
    if b - at >= IDLE_MIN:
        out.append((at, b))
    return out


def waterfall(view: dict[str, Any], history: Sequence[dict[str, Any]], now: float, *,
              window: tuple[float, float] | None = None, collapse: bool = True) -> Waterfall:
    """The run's steps' attempts, between `window` (seconds from the run's start; the
    whole run if None), with idle gaps of IDLE_MIN or more squeezed when `collapse`."""
    start = view.get("started_at") or view.get("created_at") or now
    end = view.get("finished_at") or now
    span = max(end - start, 1e-3)
    steps = [(s["step"], str(s.get("status", ""))) for s in view.get("steps") or ()]
    by_step: dict[str, list[dict[str, Any]]] = {n: [] for n, _ in steps}
    for e in history:
        if e.get("step") in by_step:
            by_step[e["step"]].append(e)
    rows = [[Segment(g.kind, g.start - start, g.end - start)
             for g in segments(by_step[n], end)] for n, _ in steps]
    t0, t1 = window or (0.0, span)
    t0, t1 = max(0.0, t0), min(span, t1)
    if t1 - t0 < 1e-3:
        t0, t1 = 0.0, span
    gaps = _idle(rows, t0, t1) if collapse else []
    kept = (t1 - t0) - sum(b - a for a, b in gaps)
    scale = (AXIS_W - GAP_PX * len(gaps)) / max(kept, 1e-6)
    squeezed = GAP_PX / scale  # the seconds of axis a collapsed gap is drawn as

    def x(t: float) -> float:
        t = min(max(t, t0), t1)
        out = 0.0
        at = t0
        for a, b in gaps:
            if t <= a:
                break
            out += (a - at) * scale
            if t < b:
                return out + (t - a) / (b - a) * squeezed * scale
            out += squeezed * scale
            at = b
        return out + (t - at) * scale

    bars = []
    for i, row in enumerate(rows):
        for g in row:
            if g.end < t0 or g.start > t1:
                continue
            a, b = x(g.start), x(g.end)
            bars.append(Bar(i, g.kind, round(a, 1), round(max(b - a, 1.5), 1),
                            f"{g.kind} {seconds(g.end - g.start)} "
                            f"(+{seconds(g.start)} → +{seconds(g.end)})"))
    ticks = [(round(x(t0 + (t1 - t0) * k / 4), 1), seconds(t0 + (t1 - t0) * k / 4))
             for k in range(5)] if not gaps else [
        (0.0, seconds(t0)), (float(AXIS_W), seconds(t1))]
    return Waterfall(steps, bars, [(round(x(a) + squeezed * scale / 2, 1), b - a)
                                   for a, b in gaps],
                     ticks, t0, t1, span, ROW_H * max(1, len(steps)) + 28,
                     frozenset(i for i, s in enumerate(view.get("steps") or ())
                               if s.get("reused_from")))
