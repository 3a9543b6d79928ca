"""A DAG run drawn as boxes and arrows (README, "Watching a run"): one box per step with
its status glyph and a one-line detail, columns by longest path from the roots, and
each gap between two columns joined by buses (a fan-in's sources and a fan-out's
targets share one). A step whose dependency is more than one column back is reached by
a line through the columns between. Columns that do not fit the width wrap into rows
of columns; a width too narrow for two columns gets an indented dependency list. The
text around the drawing (the header, the legend, a failed run's errors, the list's
lines) is wrapped to the width, never cut (wrapping.py).

Pure: a run's view (the API's JSON) in, lines out."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.cli.render import trigger_label
from orchestrator.cli.wrapping import flow, wrap
from orchestrator.presentation.glyphs import GLYPHS
from orchestrator.presentation.layers import columns_by_longest_path

__all__ = [
    "LEGEND", "compact", "dependency_list", "elapsed", "header", "render_diagram",
]

# Glyphs, Unicode and ASCII; the ASCII ones are words, padded alike.
LEGEND = (("success", "success"), ("failed", "failed"), ("running", "running"),
          ("blocked", "blocked"), ("skipped", "skipped"))
# Box drawing: Unicode, ASCII.
_LINES = {
    "h": ("─", "-"), "v": ("│", "|"), "tl": ("┌", "+"), "tr": ("┐", "+"),
    "bl": ("└", "+"), "br": ("┘", "+"), "arrow": ("▸", ">"),
}
# A bus's glyph by the directions it joins: (up, down, left, right).
_JOINS = {
    (True, True, False, False): ("│", "|"), (False, True, True, False): ("┐", "+"),
    (True, False, True, False): ("┘", "+"), (True, True, True, False): ("┤", "+"),
    (False, True, False, True): ("┌", "+"), (True, False, False, True): ("└", "+"),
    (True, True, False, True): ("├", "+"), (False, False, True, True): ("─", "-"),
    (False, True, True, True): ("┬", "+"), (True, False, True, True): ("┴", "+"),
    (True, True, True, True): ("┼", "+"), (False, False, True, False): ("─", "-"),
    (False, False, False, True): ("─", "-"),
}
MIN_INNER = 20  # a box's width inside its borders, at the least
BOX_LINES = 4  # top border, name, detail, bottom border
STUB = 2  # the line out of a box into a gap, and from a gap into a box


@dataclass
class _Node:
    name: str
    status: str = ""
    detail: str = ""
    deps: tuple[str, ...] = ()
    through: bool = False  # a line through this column, to a step further on
    column: int = 0
    slot: int = 0
    targets: list[str] = field(default_factory=list)


def _glyph(status: str, ascii_only: bool) -> str:
    pair = GLYPHS.get(status, ("?", "?"))
    return pair[1] if ascii_only else pair[0]


def _line(kind: str, ascii_only: bool) -> str:
    return _LINES[kind][1 if ascii_only else 0]


def _reason(error: Any) -> str:
    """An error's short reason: its `reason` or `message` (a nested error's, for a
    step that failed on another's), else its code."""
    if not isinstance(error, dict):
        return "" if error is None else str(error)
    for key in ("reason", "message"):
        value = error.get(key)
        if isinstance(value, str) and value:
            return value
        if isinstance(value, dict):
            inner = _reason(value)
            if inner:
                return inner
    return str(error.get("code") or "")


def _detail(step: dict[str, Any], ascii_only: bool = False) -> str:
    text = _details(step)
    return text.replace("…", "...") if ascii_only else text


def _details(step: dict[str, Any]) -> str:
    status, attempts = step.get("status", ""), int(step.get("attempts") or 0)
    if status == "success":
        # A rerun's step carried over from the run it reruns (output copied, not called).
        return "reused" if step.get("reused_from") else "done"
    if status == "failed":
        return _reason(step.get("error"))
    if status in ("dispatched", "running"):
        return "running…" if attempts <= 1 else f"running… attempt {attempts}"
    if status == "ready":
        return "ready" if attempts <= 1 else f"retry, attempt {attempts}"
    if status == "waiting":
        return "waiting"
    return ""


def _columns(steps: Sequence[dict[str, Any]], ascii_only: bool) -> list[list[_Node]]:
    """The steps in columns by longest path from a root, each column ordered to keep
    lines short (each step near the mean place of its dependencies), with a `through`
    node in each column a dependency skips."""
    nodes = {s["step"]: _Node(s["step"], s.get("status", ""), _detail(s, ascii_only),
                              tuple(d for d in s.get("depends_on") or () if d))
             for s in steps}
    for n in nodes.values():
        n.deps = tuple(d for d in n.deps if d in nodes)
    column = columns_by_longest_path({name: n.deps for name, n in nodes.items()})
    columns: list[list[_Node]] = [[] for _ in range(max(column.values(), default=-1) + 1)]
    for name, n in nodes.items():
        n.column = column[name]
        columns[n.column].append(n)
    # Lines through the columns a dependency skips: one node each, named after the edge.
    for n in list(nodes.values()):
        for d in n.deps:
            prev = d
            for c in range(column[d] + 1, n.column):
                key = f"{d}\x00{n.name}\x00{c}"
                columns[c].append(_Node(key, deps=(prev,), through=True, column=c))
                prev = key
            if prev != d:
                n.deps = tuple(prev if x == d else x for x in n.deps)
    # Order: the first column as declared; each next by its dependencies' mean place.
    for c in range(1, len(columns)):
        where = {x.name: i for i, x in enumerate(columns[c - 1])}
        columns[c].sort(key=lambda x: (sum(where.get(d, 0) for d in x.deps)
                                       / max(1, len(x.deps))))
    for col in columns:
        for i, x in enumerate(col):
            x.slot = i
    by_name = {x.name: x for col in columns for x in col}
    for col in columns:
        for x in col:
            for d in x.deps:
                by_name[d].targets.append(x.name)
    return columns


@dataclass
class _Bus:
    sources: set[int]  # rows a line comes in from the left
    targets: set[int]  # rows a line leaves to the right
    through: set[int]  # of those, rows whose target is a line, not a box

    @property
    def span(self) -> tuple[int, int]:
        rows = self.sources | self.targets
        return min(rows), max(rows)


def _buses(left: list[_Node], right: list[_Node]) -> list[_Bus]:
    """The edges between two columns, grouped: sources and targets joined through one
    another share a bus (a fan-in, a fan-out)."""
    row = {x.name: x.slot * BOX_LINES + 1 for x in left + right}
    parent = {x.name: x.name for x in left + right}

    def find(a: str) -> str:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    edges = [(d, x.name) for x in right for d in x.deps if d in row]
    for a, b in edges:
        parent[find(a)] = find(b)
    groups: dict[str, _Bus] = {}
    through = {x.name for x in right if x.through}
    for a, b in edges:
        bus = groups.setdefault(find(a), _Bus(set(), set(), set()))
        bus.sources.add(row[a])
        bus.targets.add(row[b])
        if b in through:
            bus.through.add(row[b])
    return sorted(groups.values(), key=lambda b: b.span)


def _lanes(buses: list[_Bus]) -> list[list[_Bus]]:
    """Buses sharing a column where their rows do not overlap."""
    lanes: list[list[_Bus]] = []
    for bus in buses:
        lo, _ = bus.span
        for lane in lanes:
            if lane[-1].span[1] < lo:
                lane.append(bus)
                break
        else:
            lanes.append([bus])
    return lanes


class _Canvas:
    def __init__(self, height: int, width: int) -> None:
        self.cells = [[" "] * width for _ in range(height)]

    def put(self, row: int, col: int, text: str) -> None:
        for i, ch in enumerate(text):
            self.cells[row][col + i] = ch

    def lines(self) -> list[str]:
        out = ["".join(r).rstrip() for r in self.cells]
        while out and not out[-1]:
            out.pop()
        return out


# The selected step's box (`watch`), drawn in heavy lines: seen without colour too.
HEAVY = {"h": ("━", "="), "v": ("┃", "#"), "tl": ("┏", "#"), "tr": ("┓", "#"),
         "bl": ("┗", "#"), "br": ("┛", "#")}


def _draw_box(canvas: _Canvas, x: _Node, top: int, left: int, inner: int,
              ascii_only: bool, selected: bool = False) -> None:
    def line(kind: str) -> str:
        return HEAVY[kind][1 if ascii_only else 0] if selected else _line(kind, ascii_only)

    h, v = line("h"), line("v")
    if x.through:
        canvas.put(top + 1, left, h * (inner + 2))
        return
    glyph = _glyph(x.status, ascii_only)
    head = f" {glyph:<4} " if ascii_only else f" {glyph} "  # words padded: names line up
    name = f"{head}{x.name}"
    detail = " " * len(head) + x.detail
    if len(detail) > inner:
        detail = detail[: inner - 3] + "..." if ascii_only else detail[: inner - 1] + "…"
    canvas.put(top, left, line("tl") + h * inner + line("tr"))
    canvas.put(top + 1, left, v + name.ljust(inner) + v)
    canvas.put(top + 2, left, v + detail.ljust(inner) + v)
    canvas.put(top + 3, left, line("bl") + h * inner + line("br"))


def _draw_gap(canvas: _Canvas, lanes: list[list[_Bus]], left: int, ascii_only: bool) -> None:
    """One gap: out-stubs, a column per lane, in-stubs and arrowheads. A target on a row
    where a source comes in gets its arrowhead alone, as reference 000 draws it."""
    h = _line("h", ascii_only)
    first_lane = left + STUB
    in_stub = first_lane + len(lanes)
    for j, lane in enumerate(lanes):
        col = first_lane + j
        for bus in lane:
            lo, hi = bus.span
            for r in range(lo, hi + 1):
                joins = (r > lo, r < hi, r in bus.sources,
                         r in bus.targets and r not in bus.sources)
                if not any(joins):
                    continue
                canvas.put(r, col, _JOINS.get(joins, ("│", "|"))[1 if ascii_only else 0])
            for r in bus.sources:
                canvas.put(r, left, h * STUB)
                for k in range(j):  # across the lanes before this one
                    cell = canvas.cells[r][first_lane + k]
                    canvas.put(r, first_lane + k, h if cell == " " else cell)
            straight = lo == hi  # one row: a plain line, nothing to join
            for r in bus.targets:
                if straight:
                    canvas.put(r, col + 1, h * (in_stub + STUB - col - 1))
                elif r not in bus.sources or len(lanes) > 1:
                    for k in range(j + 1, len(lanes)):
                        cell = canvas.cells[r][first_lane + k]
                        canvas.put(r, first_lane + k, h if cell == " " else cell)
                    if r not in bus.sources:
                        canvas.put(r, in_stub, h * STUB)
                canvas.put(r, in_stub + STUB,
                           h if r in bus.through else _line("arrow", ascii_only))


def _band(columns: list[list[_Node]], ascii_only: bool, inner: int,
          selected: str | None = None) -> list[str]:
    gaps = [_lanes(_buses(columns[c], columns[c + 1])) for c in range(len(columns) - 1)]
    box = inner + 2
    widths = [box] + [STUB + len(g) + STUB + 1 + box for g in gaps]
    height = max((len(c) for c in columns), default=0) * BOX_LINES
    canvas = _Canvas(height, sum(widths))
    left = 0
    for c, col in enumerate(columns):
        if c:
            _draw_gap(canvas, gaps[c - 1], left, ascii_only)
            left += STUB + len(gaps[c - 1]) + STUB + 1
        for x in col:
            _draw_box(canvas, x, x.slot * BOX_LINES, left, inner, ascii_only,
                      selected=x.name == selected and not x.through)
        left += box
    return canvas.lines()


def elapsed(view: dict[str, Any], now: float | None) -> str:
    """How long the run has taken, m:ss: from its start to its finish, or to `now`."""
    start = view.get("started_at")
    if start is None:
        start = view.get("created_at")
    if start is None:
        return "-"
    end = view.get("finished_at")
    if end is None:
        end = time.time() if now is None else now
    secs = int(max(0.0, end - start))
    return f"{secs // 60}:{secs % 60:02d}"


def compact(value: Any, limit: int = 400) -> str:
    """A value as compact JSON, its first `limit` characters (a run's output or error
    under a diagram: `show --json` has it whole)."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def header(view: dict[str, Any], ascii_only: bool, now: float | None,
           width: int | None = None) -> list[str]:
    """The run's workflow, status and id, how long it took, what started it (a run of
    the API shows `trigger api`) and what it reruns, then a blank line; wrapped to
    `width`."""
    lines = flow([view["workflow"], f"{_glyph(view['status'], ascii_only)} {view['status']}",
                  view["run_id"]], width)
    lines.append(f"elapsed {elapsed(view, now)}")
    if view.get("trigger"):
        lines += wrap(f"trigger {trigger_label(view['trigger'])}", width)
    if view.get("rerun_of"):
        lines += wrap(f"rerun of {view['rerun_of']}", width)
    if view.get("imported"):
        lines += wrap(f"imported from {view['imported']} (read-only here)", width)
    return [*lines, ""]


def _footer(view: dict[str, Any], ascii_only: bool, width: int | None) -> list[str]:
    """The legend; or, once something failed, the run's error and each failed step's
    in its place (reference 000 draws a failed run so). Wrapped to `width`."""
    failed = [s for s in view.get("steps") or () if s.get("status") == "failed"]
    if not (view.get("error") or failed):
        return ["", *flow([f"{_glyph(s, ascii_only)} {word}" for s, word in LEGEND], width,
                          "   ")]
    out = [""]
    if view.get("error"):
        out += wrap(f"error: {compact(view['error'])}", width)
    for s in failed:
        out += wrap(f"  {s['step']}: {compact(s.get('error'))}", width)
    return out


def inner_width(steps: Sequence[dict[str, Any]], ascii_only: bool) -> int:
    head = 6 if ascii_only else 3
    longest = max((len(s["step"]) for s in steps), default=0)
    return max(MIN_INNER, head + longest + 1)


def render_diagram(view: dict[str, Any], *, ascii_only: bool = False, width: int = 100,
                   now: float | None = None, selected: str | None = None) -> str:
    """A DAG run's view as a diagram no wider than `width` (its columns wrapped into
    rows of columns); the dependency list where two columns do not fit. The box of
    step `selected` (watch's selection) is drawn in heavy lines."""
    steps = view.get("steps") or []
    inner = inner_width(steps, ascii_only)
    columns = _columns(steps, ascii_only)
    box = inner + 2
    gaps = [STUB + len(_lanes(_buses(columns[c], columns[c + 1]))) + STUB + 1
            for c in range(len(columns) - 1)]
    bands: list[tuple[int, int]] = []  # [start, end) of each row of columns
    start, used = 0, box
    for c, gap in enumerate(gaps):
        if used + gap + box > width:
            bands.append((start, c + 1))
            start, used = c + 1, box
        else:
            used += gap + box
    bands.append((start, len(columns)))
    if box > width or (len(columns) > 1 and any(b - a < 2 for a, b in bands[:-1])):
        return dependency_list(view, ascii_only=ascii_only, now=now, width=width)
    lines = header(view, ascii_only, now, width)
    for a, b in bands:
        if a:
            lines += ["", *wrap(f"{_line('arrow', ascii_only)} continued: columns {a + 1} "
                                f"to {b}", width)]
        lines += _band(_cut(columns[a:b]), ascii_only, inner, selected)
    return "\n".join(lines + _footer(view, ascii_only, width))


def _cut(band: list[list[_Node]]) -> list[list[_Node]]:
    """A band's columns with their first column's dependencies left behind (they were
    drawn in the band before): its nodes start the band, with no incoming lines."""
    first = [_Node(x.name, x.status, x.detail, (), x.through, x.column, x.slot)
             for x in band[0]]
    return [first, *band[1:]]


def dependency_list(view: dict[str, Any], *, ascii_only: bool = False,
                    now: float | None = None, width: int | None = None) -> str:
    """The run as an indented list: each step under the step it depends on (its first
    dependency; `after` names the others), never cut whatever the width: a line too
    wide wraps, its next lines indented past the steps under it. A step deeper than a
    sixth of the width can indent stays at that indent and names every dependency."""
    steps = view.get("steps") or []
    by_name = {s["step"]: s for s in steps}
    children: dict[str, list[str]] = {}
    roots = []
    for s in steps:
        deps = [d for d in s.get("depends_on") or () if d in by_name]
        if deps:
            children.setdefault(deps[0], []).append(s["step"])
        else:
            roots.append(s["step"])
    lines = header(view, ascii_only, now, width)
    deepest = None if width is None else width // 6  # in steps of two spaces

    def walk(name: str, depth: int) -> None:
        s = by_name[name]
        deps = [d for d in s.get("depends_on") or () if d in by_name]
        shown = depth if deepest is None else min(depth, deepest)
        others = deps[1:] if shown == depth else deps  # the tree no longer says the first
        indent = "  " * shown
        detail = _detail(s, ascii_only)
        parts = [f"{indent}{_glyph(s.get('status', ''), ascii_only)} {name}",
                 *([detail] if detail else []),
                 *([f"(after {', '.join(others)})"] if others else [])]
        lines.extend(flow(parts, width, indent=indent + "    "))
        for child in children.get(name, ()):
            walk(child, depth + 1)

    for root in roots:
        walk(root, 0)
    return "\n".join(lines + _footer(view, ascii_only, width))
