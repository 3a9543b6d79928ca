"""The JSON views of a run and its steps, as the API and the CLI show them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from orchestrator.engine.records import RunRecord, StepRecord
from orchestrator.engine.states import StepStatus

__all__ = ["run_view", "step_view"]


def step_view(s: StepRecord | None, name: str, load: Callable[[StepRecord], Any]) -> dict[str, Any]:
    if s is None:
        return {
            "step": name,
            "status": StepStatus.BLOCKED.value,
            "attempts": 0,
            "output": None,
            "error": None,
        }
    return {
        "step": s.step,
        "status": s.status.value,
        "attempts": s.attempt,
        "output": load(s) if s.status is StepStatus.SUCCESS else None,
        "error": s.error if s.status is not StepStatus.SUCCESS else None,
        "depends_on": list(s.deps),
        "started_at": s.started_at,
        "finished_at": s.finished_at,
        "output_bytes": s.output_size if s.status is StepStatus.SUCCESS else None,
    }


def run_view(
    run: RunRecord, steps: list[StepRecord] | None, load: Callable[[StepRecord], Any]
) -> dict[str, Any]:
    """A run as the API shows it; without `steps` (None) the run alone, from its row."""
    view = {
        "run_id": run.run_id,
        "workflow": run.workflow,
        "status": run.status.value,
        "input": run.input,
        "error": run.error,
        "created_at": run.created_at,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "kill_reason": run.kill_reason,
        "trigger": None if run.trigger is None else run.trigger.to_json(),
        "rerun_of": run.rerun_of,
        "admission": None
        if run.gate is None
        else {
            "group": run.gate.group,
            "key": run.gate.key if run.gate.group else None,
            "policy": run.gate.policy.value if run.gate.group else None,
            "throttle_key": None if run.gate.throttle is None else run.gate.throttle.key,
            "admit_at": run.admit_at,
        },
    }
    if steps is not None:
        by_name = {s.step: s for s in steps}
        order = run.definition.order()
        order += [n for n in by_name if n not in order]  # steps added at run time
        view["steps"] = [step_view(by_name.get(n), n, load) for n in order]
    return view
