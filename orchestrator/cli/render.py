"""Plain-text views for the terminal: a run, a list of runs, a run's history, the
schedules. Times are local; `ascii_only` (default: when stdout is not a terminal)
swaps the status symbols for words."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from orchestrator.presentation.backend_waits import backend_wait_text

__all__ = [
    "relative_time", "render_history", "render_run", "render_runs", "render_schedules",
    "status_icon", "trigger_label",
]

ICONS = {
    "success": ("✔", "ok"),
    "failed": ("✖", "FAIL"),
    "running": ("◐", "..."),
    "queued": ("◌", "wait"),
    "dispatched": ("◐", "..."),
    "ready": ("◐", "..."),
    "blocked": ("○", "-"),
    "skipped": ("⊘", "skip"),
    "killed": ("✖", "KILL"),
    # A durable run's operations, and the run itself when paused.
    "waiting": ("◔", "wait"),
    "retrying": ("↻", "retr"),
    "timed_out": ("⌛", "tout"),
    "paused": ("⏸", "PAUS"),
}


def status_icon(status: str, ascii_only: bool) -> str:
    """The status symbol; as a word (ASCII), padded so that columns line up."""
    pair = ICONS.get(status, ("?", "?"))
    return f"{pair[1]:<4}" if ascii_only else pair[0]


def _ascii(ascii_only: bool | None) -> bool:
    return not sys.stdout.isatty() if ascii_only is None else ascii_only


def _short(value: Any, width: int = 60) -> str:
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return text if len(text) <= width else text[: width - 1] + "…"


def _elapsed(start: float | None, end: float | None) -> str:
    if not start:
        return ""
    secs = max(0.0, (end or time.time()) - start)
    return f"{int(secs // 60)}:{secs % 60:04.1f}"


def _when(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t else "-"


def trigger_label(trigger: dict[str, Any] | None) -> str:
    """What started a run, in a word or two: `api`, `event order.paid`, `webhook github`,
    `schedule`, `manual`, `rerun`."""
    if not trigger:
        return "-"
    source = str(trigger.get("source", "?"))
    detail = trigger.get("event") or trigger.get("webhook")
    return f"{source} {detail}" if detail else source


def render_run(view: dict[str, Any], *, ascii_only: bool | None = None) -> str:
    ascii_only = _ascii(ascii_only)
    lines = [
        f"{view['workflow']}  {status_icon(view['status'], ascii_only).rstrip()} {view['status']}  "
        f"{view['run_id']}",
        f"elapsed {_elapsed(view.get('created_at'), view.get('finished_at'))}",
    ]
    if view.get("trigger"):
        lines.append(f"trigger {trigger_label(view['trigger'])}")
    if view.get("rerun_of"):
        lines.append(f"rerun of {view['rerun_of']}")
    if view.get("imported"):
        lines.append(f"imported from {view['imported']} (read-only here)")
    lines.append("")
    if view.get("kind") == "durable":
        return "\n".join(lines + _durable_lines(view, ascii_only))
    width = max((len(s["step"]) for s in view["steps"]), default=4)
    for s in view["steps"]:
        detail = ""
        if s["status"] == "success":
            detail = _short(s.get("output"))
        elif s.get("waiting_for"):
            detail = _waiting_for(s["waiting_for"])
        elif s.get("error"):
            detail = _short(s["error"])
        attempts = s.get("attempts") or 0
        lines.append(
            f"  {status_icon(s['status'], ascii_only)} {s['step']:<{width}}  {s['status']:<10} "
            f"{attempts} attempt{'s' if attempts != 1 else ''}  {detail}".rstrip()
        )
    if view.get("error"):
        lines += ["", f"error: {_short(view['error'], 200)}"]
    return "\n".join(lines)


def _waiting_for(w: dict[str, Any]) -> str:
    """`waiting for backend api (limit 4 in flight)`: a step held back by its backend's
    limits (engine/backend_limits.py)."""
    return backend_wait_text(w)


def _durable_lines(view: dict[str, Any], ascii_only: bool) -> list[str]:
    """A durable run's operations in order (a parallel branch's indented under its
    scope), then what it waits for, its result or why it paused."""
    ops = [s for s in view.get("steps", []) if s.get("kind") != "result"]
    width = max((len(str(s["step"])) + 2 * str(s.get("scope", "")).count(":")
                 for s in ops), default=4)
    lines = []
    for s in ops:
        depth = str(s.get("scope", "")).count(":")
        name = "  " * depth + str(s["step"])
        detail = ""
        if s["status"] == "success" and s.get("kind") == "step":
            detail = _short(s.get("output"))
        elif s.get("error"):
            detail = _short(s["error"])
        elif s.get("until"):
            detail = f"until {_when(s['until'])}"
        attempts = s.get("attempts") or 0
        tries = f"{attempts} attempt{'s' if attempts != 1 else ''}" if attempts else ""
        lines.append(f"  {status_icon(s['status'], ascii_only)} {name:<{width}}  "
                     f"{s.get('kind', '')!s:<8} {s['status']:<10} {tries:<10} "
                     f"{detail}".rstrip())
    waiting = view.get("waiting") or {}
    if view.get("waiting_for"):
        lines += ["", _waiting_for(view["waiting_for"])]
    elif waiting and waiting.get("kind") not in (None, "next"):
        until = f" until {_when(waiting['until'])}" if waiting.get("until") else ""
        lines += ["", f"waiting for {waiting['kind']} {waiting.get('name', '')}{until}"]
    if view.get("paused"):
        lines += ["", f"paused: {view['paused'].get('message', '')}",
                  "  resume after a fix: orchestrator runs resume "
                  f"{view['run_id']}, or reset it: orchestrator runs reset {view['run_id']}"
                  " --to N"]
    if view.get("output") is not None:
        lines += ["", f"output: {_short(view['output'], 200)}"]
    if view.get("error"):
        lines += ["", f"error: {_short(view['error'], 200)}"]
    return lines


def render_runs(runs: list[dict[str, Any]], *, ascii_only: bool | None = None) -> str:
    ascii_only = _ascii(ascii_only)
    if not runs:
        return "no runs"
    width = max(len(r["workflow"]) for r in runs)
    id_width = max(len(r["run_id"]) for r in runs)
    out = []
    for r in runs:
        out.append(
            f"{status_icon(r['status'], ascii_only)} {r['status']:<8} {_when(r['created_at'])}  "
            f"{r['workflow']:<{width}}  {r['run_id']:<{id_width}}  "
            f"{trigger_label(r.get('trigger'))}".rstrip()
        )
    return "\n".join(out)


def _history_detail(entry: dict[str, Any]) -> str:
    parts = []
    if entry.get("attempt") is not None:
        parts.append(f"attempt {entry['attempt']}")
    for key, value in entry.items():
        if key in ("at", "type", "step", "attempt") or value is None:
            continue
        if key == "trigger":
            parts.append(f"by {trigger_label(value)}")
        elif key.endswith("_at") and isinstance(value, int | float):
            parts.append(f"{key} {time.strftime('%H:%M:%S', time.localtime(value))}")
        else:
            text = value if isinstance(value, str) else _short(value, 120)
            parts.append(f"{key} {text[:120]}")
    return "  ".join(parts)


def render_history(events: list[dict[str, Any]]) -> str:
    """One line per transition: `12:01:02.345  step.started  extract  attempt 1`, with a
    date line whenever the day changes."""
    if not events:
        return "no history"
    type_width = max(len(str(e.get("type", ""))) for e in events)
    step_width = max((len(str(e.get("step") or "")) for e in events), default=0)
    out = []
    day = ""
    for e in events:
        at = float(e.get("at") or 0.0)
        local = time.localtime(at)
        if time.strftime("%Y-%m-%d", local) != day:
            day = time.strftime("%Y-%m-%d", local)
            out.append(f"-- {day} --")
        stamp = f"{time.strftime('%H:%M:%S', local)}.{int(at * 1000) % 1000:03d}"
        line = f"{stamp}  {e.get('type', '?'):<{type_width}}  {e.get('step') or '':<{step_width}}"
        out.append(f"{line}  {_history_detail(e)}".rstrip())
    return "\n".join(out)


def relative_time(t: float | None, now: float) -> str:
    if t is None:
        return "-"
    delta = t - now
    size = abs(delta)
    amount = (f"{size:.0f}s" if size < 90 else f"{size / 60:.0f}m" if size < 5400
              else f"{size / 3600:.1f}h" if size < 172800 else f"{size / 86400:.1f}d")
    return f"{_when(t)} ({'in ' + amount if delta >= 0 else amount + ' ago'})"


def render_schedules(schedules: list[dict[str, Any]], *, now: float | None = None) -> str:
    if not schedules:
        return "no scheduled workflows"
    now = time.time() if now is None else now
    out = []
    for s in schedules:
        state = "paused" if s["paused"] else "active"
        extras = [f"concurrency {s['concurrency']}"]
        if s.get("for_each"):
            extras.append("forEach")
        out.append(f"{s['workflow']}  {s['schedule']}  {state}  ({', '.join(extras)})")
        out.append(f"  next  {relative_time(s.get('next_fire'), now)}")
        last = relative_time(s.get("last_fire"), now)
        runs = s.get("last_runs") or []
        if runs:
            count = max(len(runs), int(s.get("last_run_count") or 0))
            shown = ", ".join(runs[:3]) + (f" and {count - 3} more" if count > 3 else "")
            last += f"  runs {shown}"
        out.append(f"  last  {last}")
        if s.get("missed"):
            out.append(f"  missed {s['missed']} tick(s)")
        if s.get("last_error"):
            out.append(f"  error {_short(s['last_error'], 200)}")
    return "\n".join(out)
