"""Planning a run's rows from its definition.

A step blocked on exactly one dependency is *unwritten* at the start (`unwritten`): the
write that first moves it (its promotion, usually promote-and-claim, or a skip) creates
its row, so a chain or a fan-out costs no row write per step at the start. Until then
readers see the row as planned (`with_unwritten`). A rerun's start writes every row: the
steps it reuses, and those they make ready, are not as planned.

Pure: nothing here does I/O."""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.engine.definition import Definition, StepSpec
from orchestrator.engine.records import StepRecord
from orchestrator.engine.states import StepStatus

__all__ = [
    "StepSpec",
    "plan_row",
    "plan_steps",
    "unwritten",
    "with_unwritten",
]


def _row(run_id: str, s: StepSpec, dependants: tuple[str, ...], now: float) -> StepRecord:
    root = not s.deps
    return StepRecord(
        run_id=run_id,
        step=s.name,
        status=StepStatus.READY if root else StepStatus.BLOCKED,
        backend=s.backend,
        route=s.route,
        deps=tuple(s.deps),
        dependants=dependants,
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


def plan_steps(run_id: str, specs: Sequence[StepSpec], now: float) -> list[StepRecord]:
    """Rows for a new run. Roots start `ready` at attempt 1 (their dispatch is the run's
    first act); everything else starts `blocked`. Reverse edges are stored on each row so
    that a finished step touches only its dependants (O(out-degree))."""
    dependants: dict[str, list[str]] = {s.name: [] for s in specs}
    for s in specs:
        for d in s.deps:
            dependants[d].append(s.name)
    return [_row(run_id, s, tuple(dependants[s.name]), now) for s in specs]


def plan_row(run_id: str, definition: Definition, step: str) -> StepRecord | None:
    """The planned row of one step of `definition` (None: no such step, or a rerun's,
    whose start writes every row)."""
    spec = definition.specs.get(step)
    if spec is None or definition.reused:
        return None
    return _row(run_id, spec, definition.dependants.get(step, ()), 0.0)


def unwritten(row: StepRecord) -> bool:
    """Whether the start leaves this planned row out: blocked on exactly one dependency
    (a join's row, which counts its dependencies, and a ready row are written)."""
    return row.status is StepStatus.BLOCKED and len(row.deps) == 1 and not row.satisfied


def with_unwritten(
    rows: Sequence[StepRecord], run_id: str, definition: Definition
) -> list[StepRecord]:
    """A run's rows as read, with the planned rows its start left out and nobody has
    written since (blocked, as planned), in the order of the rows' keys."""
    if definition.reused:
        return list(rows)  # a rerun's start writes every row (see RunService.launch)
    have = {r.step for r in rows}
    extra = []
    for spec in definition.steps:
        if spec.name not in have and len(spec.deps) == 1:
            extra.append(_row(run_id, spec, definition.dependants.get(spec.name, ()), 0.0))
    if not extra:
        return list(rows)
    return sorted([*rows, *extra], key=lambda r: r.step)
