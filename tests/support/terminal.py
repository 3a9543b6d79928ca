"""A real terminal for the CLI's tests: one tmux session on a server of its own (`-L`),
of a given size, running a command as a user would. The tests read the screen
(capture-pane) and type (send-keys), polling under deadlines."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["ORCHESTRATOR", "Terminal"]

ORCHESTRATOR = str(Path(sys.executable).parent / "orchestrator")


class Terminal:
    """`command` in a tmux session of `width` x `height`; `EXIT=<code>` is printed when
    it ends, and the session stays for the screen to be read."""

    def __init__(self, command: list[str], width: int = 120, height: int = 40) -> None:
        self.socket = "term-" + secrets.token_hex(4)
        # The terminal's own size, as a user's shell has it: no COLUMNS or LINES
        # inherited from whatever ran the tests.
        env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
        env.update(LANG="C.UTF-8", LC_ALL="C.UTF-8", TERM="xterm-256color")
        shell = " ".join(command) + "; echo EXIT=$?; sleep 120"
        subprocess.run(["tmux", "-u", "-L", self.socket, "new-session", "-d", "-s", "w",
                        "-x", str(width), "-y", str(height), shell], check=True, env=env)

    def screen(self, joined: bool = False) -> str:
        """The screen's text; `joined`: each line the terminal wrapped joined again, as
        the program wrote it (tmux's -J)."""
        return subprocess.run(["tmux", "-L", self.socket, "capture-pane", "-p", "-t", "w",
                               *(["-J"] if joined else [])],
                              check=True, capture_output=True, text=True).stdout

    def keys(self, *keys: str) -> None:
        subprocess.run(["tmux", "-L", self.socket, "send-keys", "-t", "w", *keys], check=True)

    def until(self, seen: Callable[[str], bool], what: str, timeout: float = 20.0) -> str:
        deadline = time.monotonic() + timeout
        while True:
            text = self.screen()
            if seen(text):
                return text
            if time.monotonic() > deadline:
                raise AssertionError(f"the screen never showed {what}:\n{text}")
            time.sleep(0.1)

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], check=False,
                       capture_output=True)
