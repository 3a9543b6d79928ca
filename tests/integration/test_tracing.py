"""Traces (issue 23, section 3): the demo run and a durable run each form one connected
trace, collected by OpenTelemetry's in-memory exporter in this process. The API and the
functions are real uvicorn servers over HTTP, the queue and tables the shared emulator;
the functions run in this process, so the exporter sees their spans too."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import SpanKind

from functions.examples.durable import Services
from functions.examples.monthly_report import create_app as functions_app
from functions.sdk.serving import BackgroundServer
from functions.sdk.tracing import op_span_id, run_span_id, trace_id_of
from orchestrator import telemetry
from orchestrator.api.app import create_app
from tests.support.harness import Harness
from tests.support.polling import until

ROOT = Path(__file__).resolve().parents[2]
SECRET = "tracing-secret"


@pytest.fixture(scope="module")
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    telemetry.enable(SimpleSpanProcessor(exporter))
    try:
        yield exporter
    finally:
        telemetry.disable()


@pytest.fixture
def stack(spans: InMemorySpanExporter, build_harness: Any, tmp_path: Path
          ) -> Iterator[tuple[Harness, str, Path]]:
    """Functions, orchestrator and API, made while tracing is on (the API app gets its
    server spans when it is made)."""
    work = tmp_path / "work"
    with BackgroundServer(functions_app(work_dir=work, secret=SECRET)) as fns:
        h = build_harness((ROOT / "orchestrator.yml").read_text(), ROOT,
                          {"FUNCTIONS_URL": fns.url, "FUNCTIONS_SECRET": SECRET})
        try:
            with BackgroundServer(create_app(h.rt)) as api:
                h.start_workers(threads=4)
                yield h, api.url, work
        finally:
            h.close()


def start(api: str, workflow: str, input: Any) -> str:
    resp = httpx.post(f"{api}/runs", json={"workflow": workflow, "input": input}, timeout=10)
    assert resp.status_code in (200, 201), resp.text
    return str(resp.json()["run_id"])


def trace_of(exporter: InMemorySpanExporter, h: Harness, run_id: str) -> list[ReadableSpan]:
    """The run's trace, once every span of it has ended: the workers are stopped (their
    threads joined), and a function's span ends before its answer is sent."""
    h.close()
    tid = trace_id_of(run_id)
    return [s for s in exporter.get_finished_spans() if s.context.trace_id == tid]


def assert_connected(spans: list[ReadableSpan], run_id: str) -> ReadableSpan:
    """One trace, one root (the run's, its ids derived), every other span's parent in
    it; returns the root."""
    assert {s.context.trace_id for s in spans} == {trace_id_of(run_id)}
    ids = {s.context.span_id for s in spans}
    roots = [s for s in spans if s.parent is None]
    assert [r.name for r in roots] == [roots[0].name] and len(roots) == 1, roots
    root = roots[0]
    assert root.context.span_id == run_span_id(run_id)
    orphans = [(s.name, s.parent.span_id) for s in spans
               if s.parent is not None and s.parent.span_id not in ids]
    assert not orphans, orphans
    return root


def names(spans: list[ReadableSpan]) -> list[str]:
    return [s.name for s in spans]


def test_the_demo_run_is_one_connected_trace(
        stack: tuple[Harness, str, Path], spans: InMemorySpanExporter) -> None:
    h, api, _ = stack
    run_id = start(api, "monthly-report", {"month": "2026-10"})
    assert h.wait(run_id, timeout=60)["status"] == "success"
    trace = trace_of(spans, h, run_id)
    root = assert_connected(trace, run_id)
    assert root.name == "run monthly-report"
    # The root is linked to the API request that started the run (its own trace: one
    # request, an event say, may start several runs).
    [link] = root.links
    request = [s for s in spans.get_finished_spans()
               if s.context.span_id == link.context.span_id]
    assert request and request[0].kind is SpanKind.SERVER and "/runs" in request[0].name
    assert request[0].attributes is not None
    # The queue: the roots' dispatch went through SQS with the trace in its attributes,
    # and the worker's consumer span continued it (not the run's root by default).
    steps = ["extract-orders", "extract-users", "transform", "notify", "archive"]
    sends = [s for s in trace if s.name.startswith("SQS.SendMessage")]
    receives = [s for s in trace if s.kind is SpanKind.CONSUMER]
    assert sends and receives
    by_id = {s.context.span_id: s for s in trace}
    # transform's dependants: one runs inline, the other goes through the queue, whose
    # message carried the sending attempt's span.
    assert any(by_id[r.parent.span_id].name.startswith("attempt ")  # type: ignore[union-attr]
               for r in receives)
    # An attempt per step, each calling its function, whose SDK continued the trace.
    attempts = {s.attributes["orchestrator.step"]: s for s in trace  # type: ignore[index]
                if s.name.startswith("attempt ")}
    assert sorted(attempts) == sorted(steps)
    served = [s for s in trace if s.kind is SpanKind.SERVER and s.name.startswith("step /")]
    assert len(served) == len(steps)
    for s in served:
        # function span <- httpx client span <- the step's attempt
        client = by_id[s.parent.span_id]  # type: ignore[union-attr]
        assert client.kind is SpanKind.CLIENT
        attempt = by_id[client.parent.span_id]  # type: ignore[union-attr]
        assert attempt.name.startswith("attempt ")
        assert attempt.attributes["orchestrator.step"] == s.attributes["orchestrator.step"]  # type: ignore[index]
    # botocore is instrumented: the tables' writes are in the trace.
    assert any(n.startswith("DynamoDB.") for n in names(trace))


def test_a_durable_run_is_one_connected_trace_and_replays_add_no_spans(
        stack: tuple[Harness, str, Path], spans: InMemorySpanExporter) -> None:
    h, api, work = stack
    run_id = start(api, "document-approval", {"documentId": "doc-1"})
    services = Services.at(work / "durable")

    def mailed() -> str | None:
        found = [m for m in services.outbox.messages("grace@example.com")
                 if m["subject"].startswith("Please")]
        return str(found[0]["headers"]["X-Hook"]) if found else None

    hook = until("approval mail", mailed)
    token = hook.rstrip("/").rsplit("/", 1)[-1]
    resp = httpx.post(f"{api}/hooks/{token}", json={"approved": True, "by": "Grace"},
                      timeout=10)
    assert resp.status_code == 202, resp.text
    assert h.wait(run_id, timeout=60)["status"] == "success"
    trace = trace_of(spans, h, run_id)
    root = assert_connected(trace, run_id)
    assert root.name == "run document-approval"
    journal = h.rt.store.journal.read_journal(run_id, time.time())
    ops = [s for s in trace if s.name.startswith("durable.")
           and not s.name.startswith("durable.body ")]
    # One span per journal entry, its id derived from the run and the operation.
    assert sorted(s.context.span_id for s in ops) == sorted(
        op_span_id(run_id, str(e["id"])) for e in journal)
    kinds = {str((s.attributes or {})["orchestrator.operation_kind"]) for s in ops}
    assert {"step", "hook", "signal"} <= kinds
    # The workflow was called again after the hook (a replay of what was recorded), yet
    # each step body ran, and has a span, once; linked to its operation's span.
    calls = [s for s in trace if s.name == "workflow document-approval"]
    assert len(calls) >= 2
    bodies = [s for s in trace if s.name.startswith("durable.body ")]
    steps = [e for e in journal if e["kind"] == "step"]
    assert sorted(s.name for s in bodies) == sorted(f"durable.body {e['name']}" for e in steps)
    for body in bodies:
        [link] = body.links
        assert link.context.span_id == op_span_id(
            run_id, str((body.attributes or {})["orchestrator.operation"]))
