"""Step stubs for tests: a stubbed step's body is not run; the stub answers in its place
(a value, a function called with the step's arguments, or an exception raised). The
result is recorded like any step's, so replay sees it.

Process-wide: meant for the in-process test environment, which serves the workflows in
the test's own process (orchestrator.testing.WorkflowEnv)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["clear", "lookup", "stub"]

_lock = threading.Lock()
_stubs: dict[str, Callable[..., Any]] = {}


def stub(name: str, value: Any = None, *, fn: Callable[..., Any] | None = None,
         error: BaseException | None = None) -> None:
    """Answer step `name` with `value`, or `fn(*args, **kwargs)`, or by raising `error`."""
    if fn is None:
        def fn(*args: Any, **kwargs: Any) -> Any:
            if error is not None:
                raise error
            return value
    with _lock:
        _stubs[name] = fn


def lookup(name: str) -> Callable[..., Any] | None:
    with _lock:
        return _stubs.get(name)


def clear() -> None:
    with _lock:
        _stubs.clear()
