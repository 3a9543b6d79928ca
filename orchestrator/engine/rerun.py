"""Rerun planning (pure): a new run's rows when it reuses the successful steps of a
finished run. Reused steps start `success` with the old output; a step all of whose
dependencies are reused starts `ready`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from orchestrator.engine.records import StepRecord
from orchestrator.engine.states import StepStatus

__all__ = ["with_reused"]


def with_reused(
    rows: Sequence[StepRecord],
    reused: Mapping[str, str],
    old: Mapping[str, StepRecord],
    now: float,
) -> list[StepRecord]:
    """`rows` (planned afresh) with the steps in `reused` (step -> source run) taken from
    `old` (their rows in the source run), where those succeeded."""
    done = {n for n, r in old.items() if r.status is StepStatus.SUCCESS and n in reused}
    out = []
    for row in rows:
        if row.step in done:
            prev = old[row.step]
            out.append(replace(
                row, status=StepStatus.SUCCESS, attempt=1, ready_at=None, finished_at=now,
                has_output=True, output=prev.output, output_ref=prev.output_ref,
                output_size=prev.output_size, satisfied=frozenset(row.deps),
                history=({"at": round(now, 3), "type": "step.reused",
                          "from_run": reused[row.step]},),
            ))
            continue
        met = frozenset(d for d in row.deps if d in done)
        if row.deps and len(met) == len(set(row.deps)):
            row = replace(row, status=StepStatus.READY, attempt=1, ready_at=now,
                          history=({"at": round(now, 3), "type": "step.ready"},))
        out.append(replace(row, satisfied=met))
    return out
