"""7 · The command line: `orchestrator …` (commands.py and the run / trigger groups it
mounts), the HTTP client it drives the API with, and the terminal renderers (the run's
box diagram and the live watch view will be renderers here too).

`main` is imported lazily so that `orchestrator.cli.render` (used by the local stack) does
not pull in every command."""

from __future__ import annotations

__all__ = ["main"]


def main() -> None:
    """The `orchestrator` console script."""
    from orchestrator.cli.commands import main as commands

    commands()
