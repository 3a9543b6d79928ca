"""A durable run drawn as its operations in order, one line each, with a parallel
operation's branches side by side beneath it (joined by a fork and a join line), and a
wait showing what it waits for and until when. Branches too wide for the terminal are
drawn one under another instead, each under its own heading. Never cut: a line too wide
for the terminal wraps (wrapping.py).

Pure: a durable run's view (the API's JSON) in, lines out."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from orchestrator.cli.diagram import compact, header
from orchestrator.cli.timeline import TIMES
from orchestrator.cli.wrapping import cells, wrap
from orchestrator.presentation.glyphs import DURABLE_GLYPHS, GLYPHS
from orchestrator.presentation.script_log import script_log

__all__ = ["render_durable"]

_STATUS = {**GLYPHS, **DURABLE_GLYPHS}
_MARKS = {  # Unicode, ASCII
    "parallel": ("◆", "<>"), "fork": ("┬", "+"), "corner": ("┐", "+"), "tee": ("├", "+"),
    "join": ("┴", "+"), "end": ("┘", "+"), "last": ("└", "+"), "h": ("─", "-"),
    "v": ("│", "|"),
}
GAP = 3


def _mark(name: str, ascii_only: bool) -> str:
    return _MARKS[name][1 if ascii_only else 0]


def _when(t: Any) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(float(t)))


def _reason(error: Any) -> str:
    if isinstance(error, dict):
        for key in ("reason", "message", "code"):
            if isinstance(error.get(key), str) and error[key]:
                return str(error[key])[:60]
    return "" if error is None else str(error)[:60]


def _line(op: dict[str, Any], ascii_only: bool) -> str:
    glyph = _STATUS.get(str(op.get("status")), ("?", "?"))[1 if ascii_only else 0]
    kind, name = str(op.get("kind") or ""), str(op.get("step") or "")
    found = op.get("output")
    out: dict[str, Any] = found if isinstance(found, dict) else {}
    if kind == "script":  # a shell script's first entry: its name and text's hash
        name = f"{out.get('script', '')}  sha256 {name[:12]}".strip()
    elif out.get("label"):  # a script step's label tells its repeats apart
        name = f"{name} ({out['label']})"
    text = f"{glyph} {kind} {name}".rstrip()
    if op.get("until"):
        text += f"  until {_when(op['until'])}"
    elif op.get("status") in ("waiting", "ready") and kind in ("signal", "event", "hook"):
        text += "  waiting"
    if op.get("status") in ("failed", "timed_out") and op.get("error"):
        text += f"  {_reason(op['error'])}"
    elif isinstance(out.get("stdout"), str) and out["stdout"].strip():
        # A shell step's output: its first line (the whole is in `show --json`).
        first = out["stdout"].strip().splitlines()[0]
        text += f"  {first[:57] + '…' if len(first) > 58 else first}"
    attempts = int(op.get("attempts") or 0)
    if attempts > 1:
        text += f"  {TIMES[1 if ascii_only else 0]}{attempts}"
    return text


def _branches(scopes: Sequence[str], scope: str, pos: Any) -> list[str]:
    """The branch scopes of the parallel operation at `pos` of `scope`, in order."""
    prefix = f"{scope}/{pos}:" if scope else f"{pos}:"
    found = [s for s in scopes if s.startswith(prefix) and "/" not in s[len(prefix):]]
    return sorted(found, key=lambda s: int(s[len(prefix):]))


def _block(scope: str, by_scope: dict[str, list[dict[str, Any]]], ascii_only: bool,
           width: int) -> list[str]:
    """The lines of one scope's operations (its parallels' branches under each)."""
    lines: list[str] = []
    for op in by_scope.get(scope, []):
        if op.get("kind") == "result":
            continue
        if op.get("kind") != "parallel":
            lines += wrap(_line(op, ascii_only), width)
            continue
        branches = _branches(list(by_scope), scope, op.get("position"))
        head = f"{_mark('parallel', ascii_only)} parallel {op.get('step') or ''}".rstrip()
        glyph = _STATUS.get(str(op.get("status")), ("?", "?"))[1 if ascii_only else 0]
        lines += wrap(f"{head}  {glyph} {len(branches)} branches", width)
        lines += _side_by_side(branches, by_scope, ascii_only, width)
    return lines


def _side_by_side(branches: list[str], by_scope: dict[str, list[dict[str, Any]]],
                  ascii_only: bool, width: int) -> list[str]:
    if not branches:
        return []
    blocks = [_block(b, by_scope, ascii_only, width) for b in branches]
    cols = [max((cells(line) for line in b), default=1) + GAP for b in blocks]
    h, v = _mark("h", ascii_only), _mark("v", ascii_only)
    if sum(cols) + 2 > width:  # one under another, each under its heading
        out = []
        for i, b in enumerate(branches):
            out.append(f"{_mark('tee', ascii_only)}{h} branch {i}")
            # Drawn again to fit beside the branch's line.
            out += [f"{v}   {line}" for line in _block(b, by_scope, ascii_only,
                                                        max(1, width - 4))]
        out.append(_mark("last", ascii_only))
        return out
    fork, join = [], []
    for i, w in enumerate(cols):
        last = i == len(cols) - 1
        first = _mark("tee", ascii_only) if i == 0 else (
            _mark("corner", ascii_only) if last else _mark("fork", ascii_only))
        end = _mark("tee", ascii_only) if i == 0 else (
            _mark("end", ascii_only) if last else _mark("join", ascii_only))
        fork.append(first + ("" if last else h * (w - 1)))
        join.append(end + ("" if last else h * (w - 1)))
    rows = max(len(b) for b in blocks)
    body = []
    for r in range(rows):
        row = (b[r] if r < len(b) else v for b in blocks)
        body.append("".join(line + " " * (w - cells(line))
                            for line, w in zip(row, cols, strict=True)).rstrip())
    return ["".join(fork), *body, "".join(join)]


def render_durable(view: dict[str, Any], *, ascii_only: bool = False, width: int = 100,
                   now: float | None = None) -> str:
    lines = header(view, ascii_only, now, width)
    by_scope: dict[str, list[dict[str, Any]]] = {}
    for op in view.get("steps") or ():
        by_scope.setdefault(str(op.get("scope") or ""), []).append(op)
    for ops in by_scope.values():
        ops.sort(key=lambda o: int(o.get("position") or 0))
    lines += _block("", by_scope, ascii_only, width) or ["(no operation yet)"]
    waiting = view.get("waiting") or {}
    if waiting and waiting.get("kind") not in (None, "next"):
        until = f" until {_when(waiting['until'])}" if waiting.get("until") else ""
        lines += ["", *wrap(f"waiting for {waiting['kind']} {waiting.get('name', '')}"
                            .rstrip() + until, width)]
    if view.get("paused"):
        lines += ["", *wrap(f"paused: {view['paused'].get('message', '')}", width)]
    if view.get("version"):  # the version of its backend's code it is called on
        lines += ["", f"version: {view['version']}"]
    output, error = view.get("output"), view.get("error")
    log = script_log(view)
    if log is not None:  # a shell script's run: what it printed, then how it ended
        lines += ["", "log:", *(f"  {line}" for line in log.splitlines()
                                for line in wrap(line, max(1, width - 2)))]
        if isinstance(error, dict):
            error = {k: v for k, v in error.items() if k != "details"}
        output = None
    if output is not None:
        lines += ["", *wrap(f"output: {compact(output)}", width)]
    if error:
        lines += ["", *wrap(f"error: {compact(error)}", width)]
    return "\n".join(lines)

