"""Plain-text views of runs for the terminal (the diagram renderer comes later)."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

__all__ = ["render_run", "render_runs"]

ICONS = {
    "success": ("✔", "ok"),
    "failed": ("✖", "FAIL"),
    "running": ("◐", "..."),
    "dispatched": ("◐", "..."),
    "ready": ("◐", "..."),
    "blocked": ("○", "-"),
    "skipped": ("⊘", "skip"),
    "killed": ("✖", "KILL"),
}


def _icon(status: str, ascii_only: bool) -> str:
    pair = ICONS.get(status, ("?", "?"))
    return pair[1] if ascii_only else pair[0]


def _short(value: Any, width: int = 60) -> str:
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return text if len(text) <= width else text[: width - 1] + "…"


def _elapsed(start: float | None, end: float | None) -> str:
    if not start:
        return ""
    secs = max(0.0, (end or time.time()) - start)
    return f"{int(secs // 60)}:{secs % 60:04.1f}"


def render_run(view: dict[str, Any], *, ascii_only: bool | None = None) -> str:
    if ascii_only is None:
        ascii_only = not sys.stdout.isatty()
    lines = [
        f"{view['workflow']}  {_icon(view['status'], ascii_only)} {view['status']}  "
        f"{view['run_id']}",
        f"elapsed {_elapsed(view.get('created_at'), view.get('finished_at'))}",
        "",
    ]
    width = max((len(s["step"]) for s in view["steps"]), default=4)
    for s in view["steps"]:
        detail = ""
        if s["status"] == "success":
            detail = _short(s.get("output"))
        elif s.get("error"):
            detail = _short(s["error"])
        attempts = s.get("attempts") or 0
        lines.append(
            f"  {_icon(s['status'], ascii_only)} {s['step']:<{width}}  {s['status']:<10} "
            f"{attempts} attempt{'s' if attempts != 1 else ''}  {detail}".rstrip()
        )
    if view.get("error"):
        lines += ["", f"error: {_short(view['error'], 200)}"]
    return "\n".join(lines)


def render_runs(runs: list[dict[str, Any]], *, ascii_only: bool | None = None) -> str:
    if ascii_only is None:
        ascii_only = not sys.stdout.isatty()
    if not runs:
        return "no runs"
    out = []
    for r in runs:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["created_at"]))
        out.append(f"{_icon(r['status'], ascii_only)} {r['status']:<8} {when}  {r['run_id']}")
    return "\n".join(out)
