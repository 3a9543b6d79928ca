"""Waiting in tests for what can be observed: a check polled under a deadline, never a
fixed sleep."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

__all__ = ["until"]


def until(what: str, check: Callable[[], Any], timeout: float = 30.0,
          every: float = 0.02) -> Any:
    """check()'s first truthy answer; AssertionError naming `what` once `timeout`
    seconds have passed without one."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"still not {what} after {timeout}s")
        time.sleep(every)
