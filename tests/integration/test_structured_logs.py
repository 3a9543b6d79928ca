"""Structured logs (issue 23, section 3): a real worker run's lines in JSON, with the run,
step, attempt, worker and duration of each attempt; and no trace attributes on the
queue's messages while tracing is off."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from functions.examples.monthly_report import create_app
from functions.sdk.serving import BackgroundServer
from orchestrator import logs, telemetry
from orchestrator.adapters.messages import Dispatch
from tests.support.harness import Harness

ROOT = Path(__file__).resolve().parents[2]
SECRET = "logs-secret"
STEPS = ["extract-orders", "extract-users", "transform", "notify", "archive"]


@pytest.fixture
def demo(build_harness: Any, tmp_path: Path) -> Iterator[Harness]:
    with BackgroundServer(create_app(work_dir=tmp_path / "work", secret=SECRET)) as fns:
        h = build_harness((ROOT / "orchestrator.yml").read_text(), ROOT,
                          {"FUNCTIONS_URL": fns.url, "FUNCTIONS_SECRET": SECRET})
        try:
            yield h
        finally:
            h.close()


@pytest.fixture
def lines() -> Iterator[io.StringIO]:
    """The process's logs as JSON lines, INFO and up from the worker."""
    out = io.StringIO()
    handler = logs.configure("json", logging.StreamHandler(out))
    worker = logging.getLogger("orchestrator.worker")
    level = worker.level
    worker.setLevel(logging.INFO)
    try:
        yield out
    finally:
        worker.setLevel(level)
        logs.unconfigure(handler)


def test_a_worker_logs_each_attempt_as_json(demo: Harness, lines: io.StringIO) -> None:
    [worker] = demo.start_workers(threads=4)
    run_id = demo.start("monthly-report", {"month": "2026-10"})
    assert demo.wait(run_id, timeout=60)["status"] == "success"
    demo.close()  # the last attempt's line is written before its thread ends
    docs = [json.loads(line) for line in lines.getvalue().splitlines()]
    ended = [d for d in docs if d.get("message") == "attempt ended"
             and d.get("run_id") == run_id]
    assert sorted(d["step"] for d in ended) == sorted(STEPS)
    for d in ended:
        assert d["level"] == "INFO" and d["logger"] == "orchestrator.worker"
        assert d["attempt"] == 1 and d["worker_id"] == worker.id
        assert isinstance(d["duration_ms"], float) and d["duration_ms"] >= 0
        assert d["time"].endswith("Z")


def test_text_lines_carry_the_bound_fields() -> None:
    out = io.StringIO()
    handler = logs.configure("text", logging.StreamHandler(out))
    try:
        with logs.bound(run_id="r-1", step="s", attempt=2):
            logging.getLogger("orchestrator.test").warning("slow")
        logging.getLogger("orchestrator.test").warning("unbound")
    finally:
        logs.unconfigure(handler)
    first, second = out.getvalue().splitlines()
    assert first.endswith("WARNING slow [run_id=r-1 step=s attempt=2]")
    assert second.endswith("WARNING unbound")


def test_no_trace_attributes_while_tracing_is_off(demo: Harness) -> None:
    assert not telemetry.active()
    queues = demo.rt.queues
    queues.dispatch([Dispatch(run_id="r-off", step="a", attempt=1)])
    got = queues.sqs.receive_message(QueueUrl=queues.dispatch_url, WaitTimeSeconds=1,
                                     MessageAttributeNames=["All"])
    [message] = got["Messages"]
    assert "MessageAttributes" not in message
