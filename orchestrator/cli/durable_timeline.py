"""A durable run (a Python workflow's, a shell script's) as a waterfall of its operations
(`orchestrator show --timeline`): one row an operation, in the order the run met them,
on one time scale from the run's start to its end (or now), as wide as the terminal. A
step's bar is its body running; a wait's (sleep, signal, event, lock, child, approval)
is the time it waited. The row ends with its status and how long it took.

Pure: the run's view (GET /runs/{id}) in, lines out."""

from __future__ import annotations

import time
from typing import Any

from orchestrator.cli.timeline import MARKS, seconds_text
from orchestrator.cli.wrapping import cells, flow
from orchestrator.presentation.glyphs import DURABLE_GLYPHS, GLYPHS

__all__ = ["render_durable_timeline"]

_STATUS = {**GLYPHS, **DURABLE_GLYPHS}
NAME_MAX = 28
# Operations whose time is spent waiting, not running a body.
WAITS = {"sleep", "signal", "event", "hook", "call", "spawn", "approval", "lock",
         "parallel", "retry"}


def _name(op: dict[str, Any]) -> str:
    kind, name = str(op.get("kind") or ""), str(op.get("step") or "")
    found = op.get("output")
    out: dict[str, Any] = found if isinstance(found, dict) else {}
    if kind == "script":
        name = str(out.get("script") or name[:12])
    elif out.get("label"):
        name = f"{name} ({out['label']})"
    if op.get("scope"):
        name = f"{op['scope']} {name}"
    text = f"{kind} {name}".strip()
    return text if len(text) <= NAME_MAX else text[: NAME_MAX - 1] + "…"


def render_durable_timeline(view: dict[str, Any], *, width: int = 100,
                            ascii_only: bool = False, now: float | None = None) -> str:
    now = time.time() if now is None else now
    t0 = view.get("started_at") or view.get("created_at") or now
    t1 = view.get("finished_at") or now
    span = max(t1 - t0, 1e-3)
    ops = [op for op in view.get("steps") or () if op.get("kind") != "result"]
    ops.sort(key=lambda o: (str(o.get("scope") or ""), int(o.get("position") or 0)))
    names = [_name(op) for op in ops]
    tails = []
    for op in ops:
        glyph = _STATUS.get(str(op.get("status")), ("?", "?"))[1 if ascii_only else 0]
        start, end = op.get("started_at"), op.get("finished_at")
        took = (end if end is not None else t1) - start if start is not None else None
        tails.append(f" {glyph}" + (f" {seconds_text(max(0.0, took))}" if took else ""))
    name_w = max((cells(n) for n in names), default=4)
    tail_w = max((cells(t) for t in tails), default=0)
    bar_w = width - name_w - 2 - tail_w
    above = bar_w < 10
    if above:
        name_w, bar_w = 0, max(10, width - 2)
    per = span / bar_w
    lines = [*flow([str(view.get("workflow")), str(view.get("status")),
                    str(view.get("run_id"))], width),
             f"{'':<{name_w}}  0s{seconds_text(span):>{bar_w - 2}}", ""]
    for op, name, tail in zip(ops, names, tails, strict=True):
        bar = [" "] * bar_w
        start = op.get("started_at")
        if start is not None:
            end = op.get("finished_at") or t1
            kind = "wait" if op.get("kind") in WAITS else "call"
            mark = MARKS[kind][1 if ascii_only else 0]
            a = min(bar_w - 1, max(0, int((start - t0) / per)))
            b = min(bar_w, max(a + 1, round((end - t0) / per)))
            for i in range(a, b):
                bar[i] = mark
        if above:
            lines += flow([name, tail.strip()], width, " ")
            lines.append(f"  {''.join(bar)}".rstrip())
        else:
            lines.append(f"{name:<{name_w}}  {''.join(bar)}{tail}".rstrip())
    legend = flow([f"{MARKS[k][1 if ascii_only else 0]} {word}" for k, word in
                   (("call", "running"), ("wait", "waiting"))], width, "   ")
    scale = f"({seconds_text(per)} a column)"
    if cells(f"{legend[-1]}  {scale}") <= width:
        legend[-1] += f"  {scale}"
    else:
        legend.append(scale)
    return "\n".join([*lines, "", *legend])
