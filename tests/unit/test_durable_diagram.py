"""A durable run's diagram (orchestrator/cli/durable_diagram.py) against golden files:
operations in order, a parallel's branches side by side, waits with what and until when,
the branches one under another where they do not fit, and a 2,000-operation run.
GOLDEN_UPDATE=1 writes the files."""

from __future__ import annotations

from typing import Any

from orchestrator.cli.durable_diagram import render_durable
from tests.unit.test_diagram import check


def op(scope: str, pos: int, kind: str, name: str, status: str = "success",
       **extra: Any) -> dict[str, Any]:
    return {"step": name, "kind": kind, "status": status, "scope": scope, "position": pos,
            "attempts": 1 if kind == "step" else 0, **extra}


def approval() -> dict[str, Any]:
    steps = [
        op("", 0, "step", "fetch-order"),
        op("", 1, "sleep", "cool-off"),
        op("", 2, "parallel", "charge-and-ship", "waiting"),
        op("2:0", 0, "step", "reserve-stock"),
        op("2:0", 1, "step", "pick"),
        op("2:1", 0, "step", "charge-card", "success", attempts=3),
        op("2:2", 0, "step", "notify", "failed", error={"code": "http_error",
                                                         "message": "mailer 503"}),
        op("2:2", 1, "signal", "manager-ok", "waiting", until=1_800_000_600.0),
    ]
    return {"run_id": "approve-1796000000000-abcdef", "workflow": "approve", "kind": "durable",
            "status": "running", "started_at": 1_800_000_000.0, "steps": steps,
            "waiting": {"kind": "signal", "name": "manager-ok", "until": 1_800_000_600.0}}


def test_a_parallels_branches_are_drawn_side_by_side_with_their_waits() -> None:
    check("durable-parallel.txt", render_durable(approval(), width=100, now=1_800_000_075.0))


def test_branches_that_do_not_fit_are_drawn_one_under_another() -> None:
    text = render_durable(approval(), width=50, now=1_800_000_075.0)
    check("durable-parallel-narrow.txt", text)
    # Never cut: a line too wide wraps, the branch's line beside it.
    assert "branch 2" in text
    assert "│   ◔ signal manager-ok  until\n│     2027-01-15 08:10:00Z" in text
    assert max(len(line) for line in text.splitlines()) <= 50


def test_ascii() -> None:
    text = render_durable(approval(), width=100, ascii_only=True, now=1_800_000_075.0)
    assert text.isascii()
    check("durable-parallel-ascii.txt", text)


def test_a_2000_operation_run_is_every_operation_in_order() -> None:
    steps = [op("", i, "step", f"noop-{i:04d}") for i in range(2000)]
    steps.append(op("", 2000, "result", "result"))
    view = {"run_id": "dchain-1", "workflow": "dchain", "kind": "durable", "status": "success",
            "started_at": 0.0, "finished_at": 9.0, "steps": steps, "output": {"n": 2000}}
    text = render_durable(view, width=100)
    check("durable-2000.txt", text)
    lines = text.splitlines()
    assert [line for line in lines if "noop-" in line] == [
        f"✔ step noop-{i:04d}" for i in range(2000)]
    assert lines[-1] == 'output: {"n":2000}'
