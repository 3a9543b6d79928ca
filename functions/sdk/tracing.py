"""Tracing in the SDK: a call's handler span continues the W3C `traceparent` the
orchestrator sends, so a function's work joins its run's trace.

OpenTelemetry is optional. Without `opentelemetry-api` installed, or without a
`traceparent` on the call, every helper here is a no-op costing one dict lookup. With it,
spans go to the process's tracer provider (set one up, e.g. with the SDK and an OTLP
exporter, or `orchestrator.telemetry`); with none set, the API's own no-op tracer takes
them.

The ids of a run's trace are derived, not stored (the orchestrator and the SDK compute
the same): the trace id from the run id, and a durable operation's span id from the run
and the operation's id, so one operation keeps its span however often the workflow
replays (`trace_id_of`, `run_span_id`, `op_span_id`). This module imports nothing of the
orchestrator; the orchestrator imports these derivations from here."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from typing import Any

try:  # the capability check: the API package, or nothing
    from opentelemetry import trace as _trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # pragma: no cover - exercised by installs without the extra
    _trace = None  # type: ignore[assignment]
    TraceContextTextMapPropagator = None  # type: ignore[assignment,misc]

__all__ = ["AVAILABLE", "TRACEPARENT", "handler_span", "op_span_id", "run_span_id",
           "step_body_span", "trace_id_of", "traceparent"]

AVAILABLE = _trace is not None
TRACEPARENT = "traceparent"
TRACER_NAME = "functions.sdk"


def _digest(*parts: str) -> bytes:
    return hashlib.sha256("\x1f".join(parts).encode()).digest()


def _nonzero(value: int) -> int:
    return value or 1  # an all-zero id is invalid in W3C trace context


def trace_id_of(run_id: str) -> int:
    """The 128-bit trace id of run `run_id`'s trace."""
    return _nonzero(int.from_bytes(_digest("trace", run_id)[:16], "big"))


def run_span_id(run_id: str) -> int:
    """The span id of the span that starts run `run_id` (its trace's root)."""
    return _nonzero(int.from_bytes(_digest("run", run_id)[:8], "big"))


def op_span_id(run_id: str, op_id: str) -> int:
    """The span id of durable operation `op_id` of run `run_id`: the same on every
    replay, so an operation never gets two spans."""
    return _nonzero(int.from_bytes(_digest("op", run_id, op_id)[:8], "big"))


def traceparent(trace_id: int, span_id: int, sampled: bool = True) -> str:
    """A W3C `traceparent` header value."""
    return f"00-{trace_id:032x}-{span_id:016x}-{'01' if sampled else '00'}"


def _parent(headers: Mapping[str, str]) -> Any:
    """The context to start a call's span in: the current one if a server middleware
    (the ASGI instrumentation) already continued the call's trace, else the one its
    `traceparent` header names."""
    assert _trace is not None and TraceContextTextMapPropagator is not None
    current = _trace.get_current_span().get_span_context()
    header = headers.get(TRACEPARENT)
    if current.is_valid and header and f"{current.trace_id:032x}" in header:
        return None  # the current context is already in the call's trace
    return TraceContextTextMapPropagator().extract({TRACEPARENT: header or ""})


@contextmanager
def handler_span(headers: Mapping[str, str], name: str,
                 attributes: Mapping[str, Any]) -> Iterator[None]:
    """The server span of one call, continuing its `traceparent` (nothing without one,
    or without OpenTelemetry)."""
    if _trace is None or not headers.get(TRACEPARENT):
        yield
        return
    tracer = _trace.get_tracer(TRACER_NAME)
    with tracer.start_as_current_span(name, context=_parent(headers),
                                      kind=_trace.SpanKind.SERVER,
                                      attributes=dict(attributes)):
        yield


def step_body_span(run_id: str, op_id: str, name: str, attempt: int) -> Any:
    """A span around one attempt of a durable step's body, linked to the operation's own
    span (derived from the run and the operation: the orchestrator emits it when it
    commits the operation). Only inside a traced call: a replay runs no body, so it
    emits nothing."""
    if _trace is None or not _trace.get_current_span().get_span_context().is_valid:
        return nullcontext()
    op = _trace.SpanContext(trace_id_of(run_id), op_span_id(run_id, op_id), is_remote=True,
                            trace_flags=_trace.TraceFlags(_trace.TraceFlags.SAMPLED))
    return _trace.get_tracer(TRACER_NAME).start_as_current_span(
        f"durable.body {name}", links=[_trace.Link(op)],
        attributes={"orchestrator.run_id": run_id, "orchestrator.operation": op_id,
                    "orchestrator.operation_name": name, "orchestrator.attempt": attempt})
