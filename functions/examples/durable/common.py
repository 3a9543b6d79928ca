"""Two helpers every example uses: reading the run's input, and handing a step body the
step's idempotency key."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from functions.durable import Context
from functions.sdk.failures import TerminalError

__all__ = ["keyed", "required"]

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def required(payload: Any, name: str) -> str:
    """`payload[name]`, an id made of letters, digits and `._-` (it may name a file);
    TerminalError otherwise: a run with bad input fails at once, never retried."""
    value = payload.get(name) if isinstance(payload, dict) else None
    if not isinstance(value, str) or not _ID.fullmatch(value):
        raise TerminalError(
            f"input.{name} must be an id (letters, digits, ._-; at most 64), got {value!r}",
            code="invalid_input",
        )
    return value


def keyed(ctx: Context, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Callable[[], Any]:
    """A step body that calls `fn(*args, **kwargs, key=<the step's idempotency key>)`.

    The key is read when the body runs (it exists only inside a step) and is the same on
    every attempt of that step in this run, so `fn` can make its effect once per key."""
    return lambda: fn(*args, **kwargs, key=ctx.idempotency_key)
