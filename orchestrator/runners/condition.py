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
from orchestrator.runners.base import Attempt, Runner
from orchestrator.services.execution.executor import Executor

__all__ = ["CONDITION_FALSE", "ConditionRunner", "compiled", "holds"]

# The reason a step whose condition is false ends skipped.
CONDITION_FALSE = "condition false"


class ConditionRunner:
    """A step with an `if:` (any YAML kind): its condition is read once its dependencies
    are done, right before it runs; false ends it skipped, as a success would (its
    dependants go on), else `inner` runs it."""

    def __init__(self, executor: Executor, inner: Runner) -> None:
        self.executor = executor
        self.inner = inner

    def run(self, attempt: Attempt) -> StepRecord | None:
        spec, ctx, row = attempt.spec, attempt.ctx, attempt.row
        if spec is None or spec.condition is None or ctx is None or ctx.definition is None:
            return self.inner.run(attempt)
        store = self.executor.store
        if holds(spec, list(ctx.definition.specs), ctx.input,
                 lambda names: store.steps.get_outputs(row.run_id, names),
                 self.executor.load_output):
            return self.inner.run(attempt)
        self.executor.succeed(row, ctx, "null", None, 0, attempt.tally, keep_one=None,
                              skipped=CONDITION_FALSE)
        attempt.ended = True
        return None


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
