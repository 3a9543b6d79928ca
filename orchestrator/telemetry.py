"""Traces (OpenTelemetry), an optional extra: `pip install 'orchestrator[otel]'`.

Every import of OpenTelemetry in the orchestrator is here (the functions SDK has its own
few lines, functions/sdk/tracing.py, whose id derivations this module shares). Without
the packages, or with tracing off (`Settings.tracing`: ORCH_OTEL, on by default when an
OTLP endpoint or OTEL_TRACES_EXPORTER is set), every helper is a no-op behind one
module-level flag: the hot path pays that check and nothing else, and no message gets
an attribute.

One trace per run. Its trace id is derived from the run id (`trace_id_of`), so every
process that touches a run joins the same trace without reading or storing anything:

    run <workflow>               root, span id derived from the run id; opened where the
      │                          run is created (API request, webhook, event, schedule,
      │                          a parent workflow) and linked to that request's own span
      ├─ SQS SendMessage         botocore; the message carries `traceparent` in its
      │                          MessageAttributes (only while tracing is on)
      └─ receive <step>          the worker's consumer span, child of the sender's span
           └─ attempt <step>     one attempt (an inline successor is a sibling)
                ├─ POST          httpx; `traceparent` goes to the function, whose SDK
                │   └─ step /route | workflow <name>      continues it
                │        └─ durable.body <name>           a step body's attempt
                └─ durable.<kind> <name>   one per journal entry, emitted when the
                                           worker commits it; span id derived from the run
                                           and the operation, so a replay never adds one

A message without the attribute (a sweeper's re-dispatch, one sent before tracing was on)
is continued from the run's root: the trace stays connected. Spans are exported by OTLP
over HTTP as the standard OTEL_EXPORTER_OTLP_* variables say (OTEL_TRACES_EXPORTER=console
prints them; OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES name the process)."""

from __future__ import annotations

import contextvars
import logging
import time
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from functions.sdk.tracing import (
    TRACEPARENT,
    op_span_id,
    run_span_id,
    trace_id_of,
    traceparent,
)
from orchestrator.settings import environment

if TYPE_CHECKING:
    from orchestrator.settings import Settings

try:  # the capability check: all of the extra, or none of it
    from opentelemetry import context as _context
    from opentelemetry import trace as _trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # pragma: no cover - exercised by installs without the extra
    _trace = None  # type: ignore[assignment]

__all__ = ["AVAILABLE", "TRACEPARENT", "active", "attempt_span", "disable", "enable", "flush",
           "inject",
           "instrument_app", "message_attributes", "message_span", "operation_span",
           "run_span", "setup", "trace_id_of"]

log = logging.getLogger("orchestrator.telemetry")

AVAILABLE = _trace is not None
TRACER = "orchestrator"

# Ids the next span must take (trace id, span id): the run's root and its operations.
_FORCED: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar(
    "orchestrator_span_ids", default=None)


class _State:
    on = False
    provider: Any = None
    tracer: Any = None


_STATE = _State()


def active() -> bool:
    """Whether this process traces (the one check the hot path makes)."""
    return _STATE.on


if _trace is not None:

    class DerivedIds(RandomIdGenerator):
        """Random ids, except for the spans whose ids are derived (the run's root, its
        durable operations): those are set in `_FORCED` while the span starts."""

        def generate_span_id(self) -> int:
            forced = _FORCED.get()
            return forced[1] if forced is not None else super().generate_span_id()

        def generate_trace_id(self) -> int:
            forced = _FORCED.get()
            return forced[0] if forced is not None else super().generate_trace_id()


# ---- turning it on -----------------------------------------------------------------------


def setup(settings: Settings) -> bool:
    """Trace this process if `settings.tracing` says so: spans exported as the OTEL_*
    variables say. Whether it traces now. Called once by each entry point."""
    if not settings.tracing or _STATE.on:
        return _STATE.on
    if _trace is None:
        log.warning("tracing is on (ORCH_OTEL or an OTEL_* exporter variable) but"
                    " OpenTelemetry is not installed: pip install 'orchestrator[otel]'")
        return False
    env = environment()
    kind = (env.get("OTEL_TRACES_EXPORTER") or "otlp").split(",")[0].strip().lower()
    exporter: Any
    if kind == "none":
        return False
    if kind == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        exporter = ConsoleSpanExporter()
    else:
        # Reads OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT, _HEADERS, _TIMEOUT... itself.
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()
    enable(BatchSpanProcessor(exporter))
    return True


def enable(processor: Any) -> Any:
    """Trace this process into `processor` (an SDK SpanProcessor: a batch exporter, or a
    test's in-memory one): a tracer provider with derived ids, made the global one if no
    other is, and botocore and httpx instrumented. Returns the provider."""
    if _trace is None:
        raise RuntimeError("OpenTelemetry is not installed: pip install 'orchestrator[otel]'")
    assert isinstance(processor, SpanProcessor)
    resource = Resource.create({"service.name": environment().get("OTEL_SERVICE_NAME")
                                or "orchestrator"})
    provider = TracerProvider(id_generator=DerivedIds(), resource=resource)
    provider.add_span_processor(processor)
    if not isinstance(_trace.get_tracer_provider(), TracerProvider):
        # The SDK's spans (functions served in this process) go to the global provider.
        _trace.set_tracer_provider(provider)
    from opentelemetry.instrumentation.botocore import BotocoreInstrumentor
    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor

    BotocoreInstrumentor().instrument(  # type: ignore[no-untyped-call]
        tracer_provider=provider)
    HTTPXClientInstrumentor().instrument(tracer_provider=provider)
    _STATE.provider = provider
    _STATE.tracer = provider.get_tracer(TRACER)
    _STATE.on = True
    return provider


def disable() -> None:
    """Stop tracing (a test's end): flush, and undo the instrumentation."""
    if not _STATE.on:
        return
    from opentelemetry.instrumentation.botocore import BotocoreInstrumentor
    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor

    _STATE.on = False
    BotocoreInstrumentor().uninstrument()  # type: ignore[no-untyped-call]
    HTTPXClientInstrumentor().uninstrument()
    _STATE.provider.force_flush()
    _STATE.provider = _STATE.tracer = None


def flush() -> None:
    """Export the spans ended so far (a Lambda invocation's end)."""
    if _STATE.on:
        _STATE.provider.force_flush()


def instrument_app(app: Any) -> Any:
    """The Starlette `app` with a server span per request, when tracing is on."""
    if _STATE.on:
        from opentelemetry.instrumentation.starlette import StarletteInstrumentor

        StarletteInstrumentor.instrument_app(app, tracer_provider=_STATE.provider)
    return app


# ---- the spans of a run ------------------------------------------------------------------


def _root(run_id: str) -> Any:
    """A context whose parent is the run's root span (its ids derived)."""
    root = _trace.SpanContext(trace_id_of(run_id), run_span_id(run_id), is_remote=True,
                              trace_flags=_trace.TraceFlags(_trace.TraceFlags.SAMPLED))
    return _trace.set_span_in_context(_trace.NonRecordingSpan(root))


def _in_run(run_id: str) -> Any:
    """The current context if it is in the run's trace, else the run's root."""
    current = _trace.get_current_span().get_span_context()
    if current.is_valid and current.trace_id == trace_id_of(run_id):
        return None  # the current context
    return _root(run_id)


def _derived(ids: tuple[int, int], start: Any) -> Any:
    token = _FORCED.set(ids)
    try:
        return start()
    finally:
        _FORCED.reset(token)


@contextmanager
def run_span(run_id: str, workflow: str, source: str, started: float) -> Iterator[None]:
    """The root of run `run_id`'s trace (its ids derived from the run id), from
    `started` (wall clock) to the end of its launch; linked to the span it was started
    in (the API request, a webhook's, a schedule's, a parent run's attempt). Open it
    only once the run is created: a second one would repeat the root."""
    if not _STATE.on:
        yield
        return
    current = _trace.get_current_span().get_span_context()
    links = [_trace.Link(current)] if current.is_valid else []
    span = _derived((trace_id_of(run_id), run_span_id(run_id)), lambda: _STATE.tracer.start_span(
        f"run {workflow}", context=_context.Context(), kind=_trace.SpanKind.PRODUCER,
        links=links, start_time=int(started * 1e9),
        attributes={"orchestrator.run_id": run_id, "orchestrator.workflow": workflow,
                    "orchestrator.trigger": source}))
    with _trace.use_span(span, end_on_exit=True):
        yield


def message_attributes(run_id: str) -> dict[str, Any] | None:
    """The SQS MessageAttributes of a message about run `run_id`: the current span as a
    `traceparent`, if tracing is on and it is in that run's trace (else none at all)."""
    if not _STATE.on:
        return None
    current = _trace.get_current_span().get_span_context()
    if not current.is_valid or current.trace_id != trace_id_of(run_id):
        return None
    return {TRACEPARENT: {"DataType": "String",
                          "StringValue": traceparent(current.trace_id, current.span_id)}}


@contextmanager
def message_span(run_id: str, op: str, step: str, parent: str | None) -> Iterator[None]:
    """The consumer span of a received message about run `run_id`: a child of the span
    that sent it (its `traceparent` attribute, if it is of that run), else of the run's
    root."""
    if not _STATE.on:
        yield
        return
    ctx = None
    if parent and f"-{trace_id_of(run_id):032x}-" in parent:
        ctx = TraceContextTextMapPropagator().extract({TRACEPARENT: parent})
    with _STATE.tracer.start_as_current_span(
            f"receive {op} {step}".rstrip(), context=ctx or _root(run_id),
            kind=_trace.SpanKind.CONSUMER,
            attributes={"orchestrator.run_id": run_id, "orchestrator.step": step,
                        "messaging.system": "aws_sqs"}):
        yield


@contextmanager
def attempt_span(run_id: str, step: str, attempt: int, worker_id: str) -> Iterator[None]:
    """One attempt of a step (or one stretch of a durable run's driver)."""
    if not _STATE.on:
        yield
        return
    with _STATE.tracer.start_as_current_span(
            f"attempt {step}", context=_in_run(run_id),
            attributes={"orchestrator.run_id": run_id, "orchestrator.step": step,
                        "orchestrator.attempt": attempt, "orchestrator.worker_id": worker_id}):
        yield


def inject(headers: MutableMapping[str, str]) -> None:
    """Add the current span's `traceparent` to a call's headers (when tracing is on)."""
    if _STATE.on:
        TraceContextTextMapPropagator().inject(headers)


def operation_span(run_id: str, entry: Mapping[str, Any]) -> None:
    """Emit the span of a journal entry just committed: its span id derived from the run
    and the operation, its times the entry's. A replay commits nothing new, so it emits
    nothing; a commit repeated after a crash repeats the same span id."""
    if not _STATE.on:
        return
    op = str(entry.get("id", ""))
    now = time.time()
    started = float(entry.get("started") or entry.get("ended") or now)
    ended = max(started, float(entry.get("ended") or started))
    attributes = {"orchestrator.run_id": run_id, "orchestrator.operation": op,
                  "orchestrator.operation_kind": str(entry.get("kind", "")),
                  "orchestrator.operation_name": str(entry.get("name", "")),
                  "orchestrator.scope": str(entry.get("scope", "")),
                  "orchestrator.position": int(entry.get("pos") or 0),
                  "orchestrator.status": str(entry.get("status", ""))}
    if entry.get("attempts"):
        attributes["orchestrator.attempts"] = int(entry["attempts"])
    span = _derived((trace_id_of(run_id), op_span_id(run_id, op)), lambda: _STATE.tracer.start_span(
        f"durable.{entry.get('kind')} {entry.get('name')}", context=_in_run(run_id),
        start_time=int(started * 1e9), attributes=attributes))
    if entry.get("status") == "error":
        error = entry.get("error") or {}
        span.set_status(_trace.Status(_trace.StatusCode.ERROR,
                                      str(error.get("code") or "error")))
    span.end(end_time=int(ended * 1e9))
