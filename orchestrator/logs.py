"""How the processes log: human-readable text (the default, and `orchestrator dev`'s), or
one JSON object a line for a log pipeline (`ORCH_LOG_FORMAT=json`, the default in
Lambda).

A line carries `time`, `level`, `logger` and `message`, plus what is bound where it was
logged: the worker binds `run_id`, `step`, `attempt` and `worker_id` around each
attempt, and logs each attempt's end with its `duration_ms`; durable workflow code
(functions/sdk/durable, `ctx.logger`) adds `workflow`, `operation`, `operation_name`
and `attempt`, so its lines group per operation and attempt (a replay logs nothing).

    {"time": "2026-10-12T09:30:01.512Z", "level": "INFO", "logger": "orchestrator.worker",
     "message": "attempt ended", "run_id": "report-...", "step": "exportOrders",
     "attempt": 1, "worker_id": "host:4242:1a2b3c4d", "duration_ms": 12.3}

Binding costs nothing unless a format was configured (`configure`): the hot path checks
one flag."""

from __future__ import annotations

import contextvars
import json
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["FIELDS", "JsonFormatter", "TextFormatter", "active", "bound", "configure",
           "unconfigure"]

# The fields a line may carry beside its message, in the order they are written.
FIELDS = ("run_id", "workflow", "step", "attempt", "worker_id", "duration_ms", "operation",
          "operation_name", "outcome")

_BOUND: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "orchestrator_log_fields", default=None)


class _State:
    on = False


_STATE = _State()


def active() -> bool:
    """Whether log fields are bound (a format was configured)."""
    return _STATE.on


@contextmanager
def bound(**fields: Any) -> Iterator[None]:
    """Add `fields` to every line logged inside (by this thread or task)."""
    if not _STATE.on:
        yield
        return
    token = _BOUND.set({**(_BOUND.get() or {}), **fields})
    try:
        yield
    finally:
        _BOUND.reset(token)


class _Bound(logging.Filter):
    """Puts the bound fields on each record (a field given as `extra` wins)."""

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in (_BOUND.get() or {}).items():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    return {k: getattr(record, k) for k in FIELDS if getattr(record, k, None) is not None}


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time (UTC, ISO 8601), level, logger, message, the bound
    fields, and the exception's traceback if any."""

    def format(self, record: logging.LogRecord) -> str:
        at = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        doc: dict[str, Any] = {"time": f"{at}.{int(record.msecs):03d}Z",
                               "level": record.levelname, "logger": record.name,
                               "message": record.getMessage(), **_fields(record)}
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """The usual line, followed by the bound fields as key=value."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(name)s %(levelname)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extra = " ".join(f"{k}={v}" for k, v in _fields(record).items())
        if not extra:
            return line
        head, sep, rest = line.partition("\n")  # after the message, before a traceback
        return f"{head} [{extra}]{sep}{rest}"


def configure(fmt: str, handler: logging.Handler | None = None) -> logging.Handler:
    """Log in `fmt` (text or json) through `handler` (default: the root logger's first
    handler, or a new one on stderr) and bind fields from now on. Returns the handler."""
    root = logging.getLogger()
    if handler is None:
        handler = root.handlers[0] if root.handlers else logging.StreamHandler()
    if handler not in root.handlers:
        root.addHandler(handler)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    if not any(isinstance(f, _Bound) for f in handler.filters):
        handler.addFilter(_Bound())
    _STATE.on = True
    return handler


def unconfigure(handler: logging.Handler) -> None:
    """Undo `configure` (a test's end): the handler leaves the root logger, and fields
    are no longer bound."""
    logging.getLogger().removeHandler(handler)
    _STATE.on = False
