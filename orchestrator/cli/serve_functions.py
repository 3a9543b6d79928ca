"""One version of a functions app in a process of its own, for `orchestrator dev
--reload`: `python -m orchestrator.cli.serve_functions MODULE:FACTORY --host H` imports
the code as it is now, serves it on a free port, prints `serving <url>` on one line,
and serves until stdin closes or SIGTERM (its parent, the local stack, went away or
retired the version). FUNCTIONS_SECRET, if set, is the secret the app is built with."""

from __future__ import annotations

import inspect
import os
import signal
import sys
import threading
from typing import Any

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    from functions.sdk.serving import BackgroundServer
    from orchestrator.cli.dev import load_factory

    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 3 or args[1] != "--host":
        print("usage: python -m orchestrator.cli.serve_functions MODULE:FACTORY --host H",
              file=sys.stderr)
        return 2
    factory = load_factory(args[0])
    kwargs: dict[str, Any] = {}
    secret = os.environ.get("FUNCTIONS_SECRET")
    if secret and "secret" in inspect.signature(factory).parameters:
        kwargs["secret"] = secret
    server = BackgroundServer(factory(**kwargs), args[2], 0).start()
    print(f"serving {server.url}", flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())

    def parent_gone() -> None:
        sys.stdin.read()  # until the stack closes it (or dies)
        done.set()

    threading.Thread(target=parent_gone, daemon=True).start()
    done.wait()
    server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
