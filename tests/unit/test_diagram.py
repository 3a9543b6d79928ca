"""The run diagram (orchestrator/cli/diagram.py) against golden files: reference 000's two
examples, drawn exactly as it draws them, and the cases it does not show (a long
dependency, a wide fan-out, ASCII, wrapping, a narrow width). Set GOLDEN_UPDATE=1 to
write the files of the cases this project defines (never the reference's)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from orchestrator.cli.diagram import dependency_list, render_diagram

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "diagrams"
REFERENCE = {"reference-running.txt", "reference-failed.txt"}


def step(name: str, status: str, deps: tuple[str, ...] = (), **extra: Any) -> dict[str, Any]:
    return {"step": name, "status": status, "depends_on": list(deps),
            "attempts": 1 if status not in ("blocked", "skipped") else 0, **extra}


def monthly_report(status: str) -> dict[str, Any]:
    failed = status == "failed"
    return {
        "run_id": "_00_workflow_run:⟨monthly-report_1769…⟩",
        "workflow": "monthly-report",
        "status": status,
        "started_at": 1000.0,
        "finished_at": 1018.0 if failed else None,
        "error": {"code": "step_failed", "step": "extract-orders"} if failed else None,
        "steps": [
            step("extract-orders", "failed" if failed else "success",
                 error={"code": 503, "reason": "upstream 503"} if failed else None),
            step("extract-users", "success"),
            step("transform", "skipped" if failed else "dispatched",
                 ("extract-orders", "extract-users")),
            step("notify", "skipped" if failed else "blocked", ("transform",)),
            step("archive", "skipped" if failed else "blocked", ("transform",)),
        ],
    }


def check(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("GOLDEN_UPDATE") and name not in REFERENCE:
        path.write_text(text + "\n", encoding="utf-8")
    assert text + "\n" == path.read_text(encoding="utf-8"), f"differs from {path}:\n{text}"


def test_the_references_running_example_is_drawn_as_the_reference_draws_it() -> None:
    check("reference-running.txt",
          render_diagram(monthly_report("running"), width=100, now=1161.0))


def test_the_references_failed_example_is_drawn_as_the_reference_draws_it() -> None:
    check("reference-failed.txt", render_diagram(monthly_report("failed"), width=100))


def test_ascii_draws_the_same_shape_in_plain_characters() -> None:
    view = {**monthly_report("running"), "run_id": "monthly-report-1769-a1b2c3"}
    text = render_diagram(view, ascii_only=True, width=100, now=1161.0)
    assert text.isascii()
    check("ascii-running.txt", text)


def long_edge() -> dict[str, Any]:
    return {"run_id": "r-1", "workflow": "skip", "status": "success", "started_at": 0.0,
            "finished_at": 65.0, "steps": [
                step("a", "success"), step("b", "success", ("a",)),
                step("c", "success", ("b",)), step("d", "success", ("a", "c"))]}


def test_a_dependency_that_skips_columns_is_a_line_through_them() -> None:
    text = render_diagram(long_edge(), width=200)
    check("long-edge.txt", text)
    assert "elapsed 1:05" in text


def fan_out(n: int) -> dict[str, Any]:
    steps = [step("start", "success")]
    steps += [step(f"work-{i:03d}", "success" if i % 3 else "dispatched", ("start",))
              for i in range(n)]
    steps.append(step("join", "blocked", tuple(f"work-{i:03d}" for i in range(n))))
    return {"run_id": "fan-1", "workflow": "fan", "status": "running", "started_at": 0.0,
            "steps": steps}


def test_a_200_step_fan_out_is_one_tall_column_between_its_root_and_its_join() -> None:
    text = render_diagram(fan_out(200), width=120, now=30.0)
    check("fan-out-200.txt", text)
    lines = text.splitlines()
    assert sum("work-" in line for line in lines) == 200
    assert max(len(line) for line in lines) <= 120


def chain(n: int) -> dict[str, Any]:
    steps = [step("s00", "success")]
    steps += [step(f"s{i:02d}", "success", (f"s{i - 1:02d}",)) for i in range(1, n)]
    return {"run_id": "chain-1", "workflow": "chain", "status": "success", "started_at": 0.0,
            "finished_at": 3.0, "steps": steps}


def test_columns_that_do_not_fit_wrap_into_rows() -> None:
    text = render_diagram(chain(7), width=90)
    check("wrapped-chain.txt", text)
    assert max(len(line) for line in text.splitlines()) <= 90
    assert text.count("continued") == 2  # 3 columns a row: 3 + 3 + 1


def test_a_width_too_narrow_for_two_columns_gets_the_dependency_list() -> None:
    view = monthly_report("running")
    text = render_diagram(view, width=40, now=1161.0)
    assert text == dependency_list(view, now=1161.0, width=40)
    check("narrow-running.txt", text)
    # Wrapped, never cut: the step's other dependency on the line under it.
    assert "  ◐ transform  running…\n      (after extract-users)" in text
    assert "  ◐ transform  running…  (after extract-users)" in dependency_list(view, now=1161.0)


@pytest.mark.parametrize("width", [30, 40, 60, 80, 100, 140])
def test_no_line_is_wider_than_asked(width: int) -> None:
    for view in (monthly_report("running"), long_edge(), fan_out(12), chain(9)):
        text = render_diagram(view, width=width, now=1161.0)
        assert max(len(line) for line in text.splitlines()) <= width


def waterfall() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A fan-in whose first step was retried once, its join still running at t=10."""
    view = monthly_report("running")
    view.update(run_id="report-2026-09", started_at=0.0)
    history = [
        {"at": 0.0, "type": "step.ready", "step": "extract-orders"},
        {"at": 0.2, "type": "step.started", "step": "extract-orders", "attempt": 1},
        {"at": 1.2, "type": "step.retrying", "step": "extract-orders", "attempt": 1,
         "due_at": 3.2},
        {"at": 3.4, "type": "step.started", "step": "extract-orders", "attempt": 2},
        {"at": 5.0, "type": "step.succeeded", "step": "extract-orders", "attempt": 2},
        {"at": 0.0, "type": "step.ready", "step": "extract-users"},
        {"at": 0.1, "type": "step.started", "step": "extract-users", "attempt": 1},
        {"at": 2.0, "type": "step.succeeded", "step": "extract-users", "attempt": 1},
        {"at": 5.0, "type": "step.ready", "step": "transform"},
        {"at": 6.0, "type": "step.started", "step": "transform", "attempt": 1},
    ]
    return view, history


def test_the_timeline_draws_each_attempt_on_one_scale() -> None:
    from orchestrator.cli.timeline import render_timeline
    from orchestrator.presentation.attempt_segments import segments

    view, history = waterfall()
    text = render_timeline(view, history, width=80, now=10.0)
    check("timeline.txt", text)
    assert max(len(line) for line in text.splitlines()) <= 80
    orders = segments([e for e in history if e["step"] == "extract-orders"], 10.0)
    assert [(s.kind, s.start, s.end) for s in orders] == [
        ("queue", 0.0, 0.2), ("call", 0.2, 1.2), ("wait", 1.2, 3.2), ("queue", 3.2, 3.4),
        ("call", 3.4, 5.0)]
    ascii_text = render_timeline(view, history, width=80, ascii_only=True, now=10.0)
    assert ascii_text.replace("report-2026-09", "").isascii()
    check("timeline-ascii.txt", ascii_text)


def test_durations_under_a_second_are_in_ms_never_zero_seconds() -> None:
    from orchestrator.cli.timeline import seconds_text

    assert [seconds_text(s) for s in (0.0, 0.00004, 0.0045, 0.19, 0.9994, 2.6, 10.0)] == [
        "0ms", "0.04ms", "4.5ms", "190ms", "999ms", "2.60s", "10.0s"]
