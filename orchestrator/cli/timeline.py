"""A run as a waterfall of its steps' attempts (`orchestrator show --timeline`): one row a
step, on one time scale from the run's start to its end (or now), as wide as the
terminal. Each attempt shows its wait in the queue (ready to started), its call (started
to its outcome) and, before a retry, its backoff; the row ends with the step's status,
its calls' total time and its attempts (a rerun's step carried over from the run it
reruns: `reused`, and no bar). A terminal too narrow for a 10-column bar beside
the names draws each step's name above its bar.

Pure: the run's view and its history (GET /runs/{id}/events) in, lines out."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from orchestrator.cli.wrapping import cells, flow
from orchestrator.presentation.attempt_segments import segments
from orchestrator.presentation.glyphs import GLYPHS

__all__ = ["render_timeline", "seconds_text"]

# What a column of a bar shows, by kind: Unicode, ASCII. Later kinds draw over earlier.
MARKS = {"wait": ("╌", "-"), "queue": ("░", "."), "call": ("█", "#")}
ORDER = ("wait", "queue", "call")
NAME_MAX = 24
TIMES = ("\u00d7", "x")  # before a step's count of calls, when over one


def seconds_text(s: float) -> str:
    """A duration as a bar's tail, the axis or the scale print it: milliseconds under a
    second (a short run's column is a few ms, never "0.00s"), then seconds, then minutes."""
    if s < 1:
        ms = s * 1000
        # Two significant digits under 10 ms (4.5ms, 0.45ms), whole ms above.
        return f"{ms:.0f}ms" if ms >= 10 or ms == 0 else f"{ms:.2g}ms"
    if s < 10:
        return f"{s:.2f}s"
    if s < 600:
        return f"{s:.1f}s"
    return f"{int(s // 60)}m{int(s % 60):02d}s"


def render_timeline(view: dict[str, Any], history: Sequence[dict[str, Any]], *,
                    width: int = 100, ascii_only: bool = False,
                    now: float | None = None) -> str:
    """The waterfall, no wider than `width` (at least a 10-column bar: where one does
    not fit beside the names, each name is above its bar)."""
    now = time.time() if now is None else now
    t0 = view.get("started_at")
    if t0 is None:
        t0 = view.get("created_at") or now
    t1 = view.get("finished_at")
    if t1 is None:
        t1 = now
    span = max(t1 - t0, 1e-3)
    steps = [s["step"] for s in view.get("steps") or ()]
    view_steps = {s["step"]: s for s in view.get("steps") or ()}
    status = {name: s.get("status", "") for name, s in view_steps.items()}
    by_step: dict[str, list[dict[str, Any]]] = {name: [] for name in steps}
    for e in history:
        if e.get("step") in by_step:
            by_step[e["step"]].append(e)
    rows = {name: segments(by_step[name], t1) for name in steps}
    names = {name: name if len(name) <= NAME_MAX else name[: NAME_MAX - 1] + "…"
             for name in steps}
    name_w = max((len(n) for n in names.values()), default=4)
    tails = {}
    for name in steps:
        calls = [s for s in rows[name] if s.kind == "call"]
        glyph = GLYPHS.get(status[name], ("?", "?"))[1 if ascii_only else 0]
        took = sum(s.end - s.start for s in calls)
        tail = f" {glyph} {seconds_text(took)}" if calls else f" {glyph}"
        if view_steps[name].get("reused_from"):  # a rerun's, carried over: never called
            tail += " reused"
        if len(calls) > 1:
            tail += f" {TIMES[1 if ascii_only else 0]}{len(calls)}"
        tails[name] = tail
    tail_w = max((cells(t) for t in tails.values()), default=0)
    bar_w = width - name_w - 2 - tail_w
    above = bar_w < 10  # each name on a line of its own, above its bar
    if above:
        name_w, bar_w = 0, max(10, width - 2)
    per = span / bar_w
    lines = [*flow([view["workflow"], view["status"], view["run_id"]], width),
             f"{'':<{name_w}}  0s{seconds_text(span):>{bar_w - 2}}", ""]
    for name in steps:
        bar = [" "] * bar_w
        for kind in ORDER:
            mark = MARKS[kind][1 if ascii_only else 0]
            for seg in rows[name]:
                if seg.kind != kind:
                    continue
                a = min(bar_w - 1, max(0, int((seg.start - t0) / per)))
                b = min(bar_w, max(a + 1, round((seg.end - t0) / per)))
                for i in range(a, b):
                    bar[i] = mark
        if above:
            lines += flow([name, tails[name].strip()], width, " ")  # the whole name
            lines.append(f"  {''.join(bar)}".rstrip())
        else:
            lines.append(f"{names[name]:<{name_w}}  {''.join(bar)}{tails[name]}".rstrip())
    legend = flow([f"{MARKS[k][1 if ascii_only else 0]} {word}" for k, word in
                   (("queue", "in the queue"), ("call", "calling"),
                    ("wait", "waiting to retry"))], width, "   ")
    scale = f"({seconds_text(per)} a column)"
    if cells(f"{legend[-1]}  {scale}") <= width:
        legend[-1] += f"  {scale}"
    else:
        legend.append(scale)
    return "\n".join([*lines, "", *legend])
