"""A run's history merged from its rows (services/reads/history.py): entries are kept to
the millisecond, so a run's end and its last step's success can tie."""

from __future__ import annotations

from typing import Any

from orchestrator.services.reads.history import merged_history


def _types(merged: list[dict[str, Any]]) -> list[str]:
    return [f'{e.get("step", "run")}:{e["type"]}' for e in merged]


def test_a_run_ended_in_its_sinks_millisecond_ends_its_history() -> None:
    run = [{"at": 1.0, "type": "run.queued"}, {"at": 1.0, "type": "run.started"},
           {"at": 2.5, "type": "run.success"}]
    sink = [{"at": 1.0, "type": "step.ready"}, {"at": 1.0, "type": "step.started"},
            {"at": 2.5, "type": "step.succeeded"}]
    assert _types(merged_history(run, [("three", sink)])) == [
        "run:run.queued", "run:run.started", "three:step.ready", "three:step.started",
        "three:step.succeeded", "run:run.success"]


def test_every_end_of_a_run_goes_after_its_steps_entries_of_that_millisecond() -> None:
    for end in ("run.failed", "run.killed", "run.skipped"):
        run = [{"at": 1.0, "type": "run.started"}, {"at": 3.0, "type": "run.halted"},
               {"at": 3.0, "type": end}]
        step = [{"at": 1.0, "type": "step.started"}, {"at": 3.0, "type": "step.failed"}]
        assert _types(merged_history(run, [("s", step)]))[-2:] == ["s:step.failed", f"run:{end}"]


def test_a_rows_entries_keep_their_written_order_and_others_merge_by_time() -> None:
    run = [{"at": 1.0, "type": "run.started"}, {"at": 9.0, "type": "run.success"}]
    late = [{"at": 2.0, "type": "step.started"}, {"at": 1.5, "type": "step.succeeded"}]
    other = [{"at": 3.0, "type": "step.started"}, {"at": 4.0, "type": "step.succeeded"}]
    assert _types(merged_history(run, [("a", late), ("b", other)])) == [
        "run:run.started", "a:step.started", "a:step.succeeded", "b:step.started",
        "b:step.succeeded", "run:run.success"]
