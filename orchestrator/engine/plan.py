"""Planning a run's rows from its definition.

A root, and a step blocked on exactly one dependency, are *unwritten* at the start
(`unwritten`): the write that first moves it (a root's claim, a promotion, usually
promote-and-claim, a redispatch or a skip) creates its row, so a chain or a fan-out costs
no row write per step at the start, and a root's claim is its first write (a row written
ready and then claimed costs two more writes to the wake index). Until then readers see
the row as planned (`with_unwritten`): a root ready since its run started. A rerun's
start writes every row (the steps it reuses, and those they make ready, are not as
planned), and so does a durable run's (its driver is there for a signal from the start).

Pure: nothing here does I/O."""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.engine.definition import Definition, StepSpec
from orchestrator.engine.records import StepRecord
from orchestrator.engine.states import StepStatus

__all__ = [
    "StepSpec",
    "left_out",
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


def left_out(definition: Definition, spec: StepSpec) -> bool:
    """Whether the start of a run of `definition` leaves this step's row out: a root or
    a step with one dependency (a join's row, which counts its dependencies, is written),
    except in a rerun or a durable run, whose starts write every row."""
    return not definition.reused and definition.durable is None and len(spec.deps) <= 1


def plan_row(run_id: str, definition: Definition, step: str) -> StepRecord | None:
    """The planned row of one step its start leaves out (None: no such step, or one
    whose row the start writes)."""
    spec = definition.specs.get(step)
    if spec is None or not left_out(definition, spec):
        return None
    return _row(run_id, spec, definition.dependants.get(step, ()), 0.0)


def unwritten(row: StepRecord, definition: Definition) -> bool:
    """Whether the start leaves this planned row out (`left_out`)."""
    spec = definition.specs.get(row.step)
    return spec is not None and left_out(definition, spec) and not row.satisfied


def with_unwritten(
    rows: Sequence[StepRecord], run_id: str, definition: Definition,
    launched_at: float | None = None,
) -> list[StepRecord]:
    """A run's rows as read, with the planned rows its start left out and nobody has
    written since, in the order of the rows' keys: a step with one dependency blocked;
    a root ready since `launched_at`, when its run was launched (None: it was not, and
    its roots, like every other step, wait: blocked, with no attempt)."""
    have = {r.step for r in rows}
    extra = []
    for spec in definition.steps:
        if spec.name not in have and left_out(definition, spec):
            if spec.deps:
                row = _row(run_id, spec, definition.dependants.get(spec.name, ()), 0.0)
            elif launched_at is not None:
                row = _row(run_id, spec, definition.dependants.get(spec.name, ()), launched_at)
            else:
                continue
            extra.append(row)
    if not extra:
        return list(rows)
    return sorted([*rows, *extra], key=lambda r: r.step)
