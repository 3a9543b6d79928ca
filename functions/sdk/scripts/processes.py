"""Waiting for a script's or a step command's process to end, and killing what it left.

asyncio's `Process.wait()` and `communicate()` return only once the process's pipes are
closed, and a background job it started (`tail -f log &`) keeps them open: the call
would hang. `exited` resolves once the process itself has ended (its return code is set
when it is reaped, whatever its pipes do); the caller then kills its process group,
which closes the pipes."""

from __future__ import annotations

import asyncio
import os
import signal

__all__ = ["environment", "exited", "kill_group"]

# How often the return code is looked at: most commands end with their pipes, and
# `communicate()` or `wait()` wins the race long before.
POLL = 0.02


async def exited(proc: asyncio.subprocess.Process) -> int:
    """`proc`'s return code, as soon as it has ended."""
    while proc.returncode is None:
        await asyncio.sleep(POLL)
    return proc.returncode


def kill_group(pgid: int) -> None:
    """SIGKILL every process of group `pgid` (gone already: nothing to do)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def environment(drop: tuple[str, ...] = ()) -> dict[str, str]:
    """The host's environment as a script or a command gets it: without its secrets (a
    name holding SECRET, as FUNCTIONS_SECRET, SCRIPTS_SECRET, WEBHOOK_SECRET: with them
    a script could sign calls to the host or the functions, or forge webhooks) and
    without the names in `drop`. AWS credentials stay: a script runs with the host's
    rights (the README says so)."""
    return {k: v for k, v in os.environ.items()
            if k not in drop and ("SECRET" not in k.upper() or k.startswith("AWS_"))}
