"""Reference 002's recipes as durable shell scripts, run as written (with `orchestrator`
for `spool` and ORCHESTRATOR_* for SPOOL_*) on a live stack through the CLI and the
API, each printing what the recipe says it prints."""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.harness import BuildHarness
from tests.support.scripts import ScriptStack, log_of, script_stack


@pytest.fixture
def stack(build_harness: BuildHarness, tmp_path: Path) -> Iterator[ScriptStack]:
    with script_stack(build_harness, tmp_path) as s:
        yield s


def test_saga_cancels_what_it_booked_newest_first(stack: ScriptStack) -> None:
    res = stack.cli("run", stack.recipe("saga.sh"))
    assert res.exit_code == 1, res.output
    lines = res.output.splitlines()
    run_id = lines[0].removeprefix("  run: ")
    assert lines[0].startswith("  run: ") and run_id
    assert lines[1:] == ["no cars left", "cancelled HT-2207", "cancelled FL-881",
                         f"  {run_id} failed: script exited 1"]
    assert stack.steps(run_id) == ["book-flight", "book-hotel", "book-car", "cancel", "cancel"]


def _live(stack: ScriptStack, workflow: str) -> list[dict[str, Any]]:
    """Every run of `workflow` now, ended or not, as views."""
    rt = stack.h.rt
    listed, _ = rt.store.runs.list_runs(workflow, rt.clock(), limit=100)
    return [rt.runs.view(r.run_id) for r in listed]


def _poll(what: str, probe: Callable[[], Any], timeout: float = 30.0) -> Any:
    """probe()'s first truthy answer, polled under a deadline."""
    deadline = time.monotonic() + timeout
    while True:
        got = probe()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_lock_serialises_the_locked_sections(stack: ScriptStack) -> None:
    path = stack.recipe("lock.sh")
    for _ in range(3):
        res = stack.cli("submit", path)
        assert res.exit_code == 0, res.output
    runs = stack.runs_of("lock", 3, timeout=90)
    assert all(v["status"] == "success" for v in runs), runs
    spans = []
    for v in runs:
        log = log_of(v)
        start = re.search(r"start (\d\d:\d\d:\d\d)", log)
        end = re.search(r"end (\d\d:\d\d:\d\d)", log)
        assert start and end, log
        assert "fetched for acme" in log
        spans.append((start.group(1), end.group(1)))
    spans.sort()
    for (_, prev_end), (start, _) in itertools.pairwise(spans):
        assert start >= prev_end, spans


def test_poll_advances_its_cursor_each_tick(stack: ScriptStack) -> None:
    res = stack.cli("schedule", "create", "--every", "5m", "--name", "ticket-poll",
                    stack.recipe("poll.sh"))
    assert res.exit_code == 0, res.output
    for n in (1, 2, 3):
        res = stack.cli("schedules", "trigger", "ticket-poll")
        assert res.exit_code == 0, res.output
        runs = stack.runs_of("ticket-poll", n)
    assert all(v["status"] == "success" for v in runs), runs
    logs = [log_of(v) for v in runs]
    assert [re.search(r"processed tickets \S+", s).group(0) for s in logs] == [  # type: ignore[union-attr]
        "processed tickets 0..10", "processed tickets 10..20", "processed tickets 20..30"], logs


def test_approve_refunds_on_the_signal(stack: ScriptStack) -> None:
    res = stack.cli("submit", stack.recipe("approve.sh"))
    assert res.exit_code == 0, res.output
    run_id = _poll("the approve run", lambda: _live(stack, "approve"))[0]["run_id"]
    res = stack.cli("signal", run_id, "approve")
    assert res.exit_code == 0, res.output
    (view,) = stack.runs_of("approve", 1)
    assert view["status"] == "success", view
    assert "refunded order 1042" in log_of(view)
    assert stack.steps(run_id) == ["refund"]
