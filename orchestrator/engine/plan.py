"""Planning a run's rows from its definition.

Pure: nothing here does I/O."""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.engine.definition import StepSpec
from orchestrator.engine.records import StepRecord
from orchestrator.engine.states import StepStatus

__all__ = [
    "StepSpec",
    "plan_steps",
]


def plan_steps(run_id: str, specs: Sequence[StepSpec], now: float) -> list[StepRecord]:
    """Rows for a new run. Roots start `ready` at attempt 1 (their dispatch is the run's
    first act); everything else starts `blocked`. Reverse edges are stored on each row so
    that a finished step touches only its dependants (O(out-degree))."""
    dependants: dict[str, list[str]] = {s.name: [] for s in specs}
    for s in specs:
        for d in s.deps:
            dependants[d].append(s.name)
    rows = []
    for s in specs:
        root = not s.deps
        rows.append(
            StepRecord(
                run_id=run_id,
                step=s.name,
                status=StepStatus.READY if root else StepStatus.BLOCKED,
                backend=s.backend,
                route=s.route,
                deps=tuple(s.deps),
                dependants=tuple(dependants[s.name]),
                payload=dict(s.payload),
                attempt=1 if root else 0,
                max_attempts=s.retry_max + 1,
                timeout=s.timeout,
                retry_strategy=s.retry_strategy,
                retry_delay=s.retry_delay,
                retry_max_delay=s.retry_max_delay,
                ready_at=now if root else None,
                at_launch=root,
                history=({"at": round(now, 3), "type": "step.ready"},) if root else (),
            )
        )
    return rows
