"""Evaluating a step's `if:` when it is about to run: the outputs of the steps it reads
(any ancestors, not only its dependencies) are read in one batch, and the condition
decides whether the step is called or ends skipped (`condition false`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import Any

from orchestrator.engine.definition import StepSpec
from orchestrator.engine.records import StepRecord
from orchestrator.expressions.conditions import Condition, compile_condition

__all__ = ["CONDITION_FALSE", "compiled", "holds"]

# The reason a step whose condition is false ends skipped.
CONDITION_FALSE = "condition false"


@lru_cache(maxsize=512)
def compiled(source: str, steps: tuple[str, ...]) -> Condition:
    return compile_condition(source, steps)


def holds(spec: StepSpec, steps: Sequence[str], input: Any,
          read: Callable[[list[str]], Mapping[str, StepRecord]],
          load: Callable[[StepRecord], Any]) -> bool:
    """Whether `spec`'s condition holds for this run (True without one). `steps`: the
    run's step names; `read` the rows of named steps (outputs), `load` a row's output.
    A condition that no longer compiles (a stored run of an older manifest) is false."""
    if spec.condition is None:
        return True
    try:
        cond = compiled(spec.condition, tuple(steps))
    except ValueError:
        return False
    names = sorted(set(cond.refs.values()))
    rows = read(names) if names else {}
    outputs = {name: load(row) for name, row in rows.items()}
    return cond.test(input, outputs)
