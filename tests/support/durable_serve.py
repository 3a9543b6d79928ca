"""tests/support/durable_fns.py's workflows served by a process of its own, as a user
runs a functions app in a terminal: `python -m tests.support.durable_serve` prints
`SERVING <url>` once it listens, then serves until killed. Its debugger (a replay's
breakpoint(), PYTHONBREAKPOINT) reads the terminal."""

from __future__ import annotations

import threading

from functions.sdk.serving import BackgroundServer
from tests.support.durable_fns import create_app

if __name__ == "__main__":
    with BackgroundServer(create_app()) as server:
        print(f"SERVING {server.url}", flush=True)
        threading.Event().wait()
