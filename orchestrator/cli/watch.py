"""`orchestrator watch RUN_OR_WORKFLOW`: the run's diagram, live (rich's `Live`), the
selected step's box in heavy lines, and underneath what it was sent (the run's input and
its dependencies' outputs), its output and its error. Keys: ↑↓ or j/k select a step, K
kills the run (after a y/n confirmation), r refreshes now, q quits. It ends by itself
when the run finishes, with `trigger --wait`'s exit code (0 on success, 1 otherwise).

The run is read through the API every `--interval` (the run-following path the API
keeps cheap); keys are read from the terminal in cbreak mode on a thread of their own."""

from __future__ import annotations

import json
import os
import queue
import select
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click
from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from orchestrator.cli.client import ApiClient
from orchestrator.cli.common import (
    EXIT_OK,
    EXIT_RUN_FAILED,
    api_options,
    client,
    reported,
)
from orchestrator.cli.diagram import render_diagram
from orchestrator.cli.durable_diagram import render_durable
from orchestrator.errors import NotFound
from orchestrator.presentation.step_inputs import sent_to

__all__ = ["COMMANDS", "WatchState", "watch"]

TERMINAL = ("success", "failed", "killed", "skipped")
KEYS = "↑↓/jk select   K kill   r refresh   q quit"
HEAVY_MARKS = frozenset("┏━┓┃┗┛")  # the selected box's lines (cli/diagram.py HEAVY)
SELECTED_STYLE = "bold bright_yellow"
_ARROWS = {"\x1b[A": "up", "\x1b[B": "down", "\x1bOA": "up", "\x1bOB": "down"}


class WatchState:
    """What the screen shows, apart from the terminal: the run's last view, the
    selected step, a kill being confirmed, the last action's message."""

    def __init__(self, view: dict[str, Any]) -> None:
        self.view = view
        self.selected = 0
        self.confirming = False
        self.message = ""

    @property
    def steps(self) -> list[dict[str, Any]]:
        return list(self.view.get("steps") or ())

    @property
    def finished(self) -> bool:
        return self.view.get("status") in TERMINAL

    def key(self, key: str) -> str | None:
        """Apply one key; the action it asks of the caller (`kill`, `refresh`, `quit`)."""
        if self.confirming:
            self.confirming = False
            if key in ("y", "Y"):
                return "kill"
            self.message = "not killed"
            return None
        n = len(self.steps)
        if key in ("down", "j") and n:
            self.selected = min(n - 1, self.selected + 1)
        elif key in ("up", "k") and n:
            self.selected = max(0, self.selected - 1)
        elif key == "K":
            if self.finished:
                self.message = f"the run is {self.view['status']} already"
            else:
                self.confirming = True
        elif key == "r":
            return "refresh"
        elif key in ("q", "\x03"):
            return "quit"
        return None

    def details(self) -> list[str]:
        steps = self.steps
        if not steps:
            return []
        s = steps[min(self.selected, len(steps) - 1)]
        out = [f"▶ {s['step']}  {s.get('status')}  attempts {s.get('attempts') or 0}"]
        if s.get("reused_from"):
            out.append(f"  reused from {s['reused_from']} (its output copied, not run again)")
        # What it was sent: a DAG step's input and its dependencies' outputs (a durable
        # run's operations are its code's, sent nothing of their own).
        sent = sent_to(self.view, s) if self.view.get("kind") != "durable" else None
        for key, value in (("sent", sent), *((k, s.get(k)) for k in ("output", "error"))):
            if value not in (None, {}, ""):
                text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
                out.append(f"  {key}: {text if len(text) <= 400 else text[:399] + '…'}")
        return out


def _frame(state: WatchState, width: int, plain: bool) -> Group:
    view = state.view
    if view.get("kind") == "durable":
        body = Text(render_durable(view, ascii_only=plain, width=width))
    else:
        steps = state.steps
        name = steps[min(state.selected, len(steps) - 1)]["step"] if steps else None
        # The selected step's box in heavy lines (seen without colour, and in ASCII as
        # `#` and `=`), in bold colour, and its name line in reverse.
        body = Text(render_diagram(view, ascii_only=plain, width=width, selected=name))
        for at, ch in enumerate(body.plain):
            if ch in HEAVY_MARKS:
                body.stylize(SELECTED_STYLE, at, at + 1)
        if name is not None:
            for line_start, line in _lines(body.plain):
                at = line.find(f" {name} ")
                while at >= 0:
                    end = at + len(name) + 2
                    if line[end:].lstrip(" ").startswith(("│", "|", "┃", "#")):
                        body.stylize("reverse", line_start + at + 1, line_start + end - 1)
                        break
                    at = line.find(f" {name} ", at + 1)
    parts: list[Any] = [body, Text("")]
    parts += [Text(line) for line in state.details()]
    prompt = (f"Kill run {view['run_id']}? y/n" if state.confirming else state.message)
    parts += [Text(""), Text(prompt, style="bold") if prompt else Text(""), Text(KEYS, style="dim")]
    return Group(*parts)


def _lines(text: str) -> Iterator[tuple[int, str]]:
    start = 0
    for line in text.split("\n"):
        yield start, line
        start += len(line) + 1


@contextmanager
def _keys() -> Iterator[queue.Queue[str]]:
    """Keys typed while inside, on a queue (arrows as `up`/`down`); nothing when stdin is
    not a terminal."""
    keys: queue.Queue[str] = queue.Queue()
    if not sys.stdin.isatty():
        yield keys
        return
    import termios
    import tty

    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            ready, _, _ = select.select([fd], [], [], 0.1)
            if not ready:
                continue
            ch = os.read(fd, 1).decode(errors="replace")
            if ch == "\x1b":  # an arrow: ESC [ A, read whole if it is there
                more, _, _ = select.select([fd], [], [], 0.05)
                if more:
                    ch += os.read(fd, 2).decode(errors="replace")
                ch = _ARROWS.get(ch, ch)
            keys.put(ch)

    tty.setcbreak(fd)
    reader = threading.Thread(target=read, name="watch-keys", daemon=True)
    reader.start()
    try:
        yield keys
    finally:
        stop.set()
        reader.join(timeout=1)
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _newest(api: ApiClient, target: str) -> dict[str, Any]:
    try:
        return dict(api.run(target))
    except NotFound:
        newest = api.runs(target, 1)["runs"]
        if not newest:
            raise NotFound(f"no run or workflow with runs named {target!r}") from None
        return dict(api.run(newest[0]["run_id"]))


def _width() -> int:
    return shutil.get_terminal_size((100, 24)).columns


def watch_run(api: ApiClient, target: str, *, interval: float, plain: bool,
              console: Console) -> int:
    """Show the run live until it finishes or `q`; the exit code."""
    state = WatchState(_newest(api, target))
    run_id = state.view["run_id"]
    with _keys() as keys, Live(_frame(state, _width(), plain), console=console,
                               auto_refresh=False, screen=False) as live:
        next_read = time.monotonic() + interval
        while True:
            timeout = max(0.0, next_read - time.monotonic())
            action = None
            try:
                action = state.key(keys.get(timeout=timeout))
            except queue.Empty:
                pass
            if action == "quit":
                break
            if action == "kill":
                api.cancel(run_id, "killed from orchestrator watch")
                state.message = "kill requested"
                action = "refresh"
            if action == "refresh" or time.monotonic() >= next_read:
                state.view = dict(api.run(run_id))
                next_read = time.monotonic() + interval
            live.update(_frame(state, _width(), plain), refresh=True)
            if state.finished:
                break
    return EXIT_OK if state.view.get("status") == "success" else EXIT_RUN_FAILED


@click.command()
@click.argument("target")
@click.option("--interval", default=1.0, show_default=True, type=click.FloatRange(0.1, 60),
              help="Seconds between reads of the run.")
@click.option("--ascii", "ascii_only", is_flag=True, default=None, help="Plain ASCII output.")
@api_options
def watch(target: str, interval: float, ascii_only: bool | None, url: str,
          api_key: str | None) -> None:
    """Watch a run (by id), or a workflow's newest run, live: its diagram, the selected
    step's box in heavy lines, and what that step was sent, its output and error. Keys:
    up/down or j/k select, K kills the run (y to confirm), r refreshes, q quits. Exits
    when the run finishes: 0 if it succeeded."""
    plain = bool(ascii_only) or not sys.stdout.isatty()
    with reported():
        code = watch_run(client(url, api_key), target, interval=interval, plain=plain,
                         console=Console(highlight=False))
    sys.exit(code)


COMMANDS = [watch]
