"""A YAML step that calls its route: one signed POST per attempt (adapters/invoker.py),
its outcome decided by the engine (engine/attempts.py) and recorded: a success promotes
its dependants (the last one taken inline on this thread, if its timeout fits), a
retryable failure sends the next attempt's timer, a final failure fails the step.

This runner also records why an attempt of any kind could not run at all: its run is
gone, or its backend is unknown."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from orchestrator.adapters.invoker import Call, Invoker
from orchestrator.engine.attempts import (
    Fail,
    Retry,
    Succeed,
    after_attempt,
    command_failed,
    inputs_unavailable,
    output_not_kept,
    run_missing,
    unknown_backend,
)
from orchestrator.engine.context import RunContext
from orchestrator.engine.records import StepRecord
from orchestrator.errors import OrchestratorError, StoreError
from orchestrator.expressions import ExpressionError
from orchestrator.manifest.shell import (
    COMMAND_KEY,
    RUN_ROUTE,
    VALUES_KEY,
    bind_command,
    command_steps,
)
from orchestrator.runners.base import Attempt
from orchestrator.runners.cache import RunCache
from orchestrator.services.execution.executor import Executor
from orchestrator.services.execution.tally import Tally

__all__ = ["CallRunner"]


class CallRunner:
    def __init__(self, executor: Executor, invoker: Invoker, cache: RunCache, *,
                 clock: Callable[[], float], rand: Callable[[], float]) -> None:
        self.executor = executor
        self.invoker = invoker
        self.cache = cache
        self.clock = clock
        self.rand = rand

    def run(self, attempt: Attempt) -> StepRecord | None:
        row, ctx, backend = attempt.row, attempt.ctx, attempt.backend
        raw = b""
        if ctx is None:
            outcome = run_missing(row.run_id)
        elif backend is None:
            outcome = unknown_backend(row.step, row.backend)
        else:
            try:
                steps = self.cache.dep_outputs(row, ctx.created_at)
            except (OrchestratorError, ValueError) as exc:
                outcome = inputs_unavailable(str(exc))
            else:
                try:
                    payload = self.payload(row, ctx)
                except (ExpressionError, ValueError) as exc:
                    outcome = command_failed(row.step, str(exc))
                else:
                    result = self.invoker.invoke(Call(
                        url=backend.url_of(row.route), secret=backend.secret,
                        run_id=row.run_id, workflow=ctx.workflow, step=row.step,
                        attempt=row.attempt, timeout=row.timeout, input=ctx.input,
                        steps=steps, payload=payload,
                    ))
                    outcome, raw = result.outcome, result.raw
                    attempt.outcome = outcome
        decision = after_attempt(row, outcome, self.clock(), self.rand())
        ctx = ctx or RunContext.missing(row.run_id)
        if not isinstance(decision, Succeed):
            self.apply(row, ctx, decision, attempt.tally)
            attempt.ended = isinstance(decision, Fail)  # a retry keeps what it holds
            return None
        try:
            output_json, output_ref = self.executor.store_output(row, raw)
        except StoreError as exc:
            # The function answered, but its output could not be kept: the engine
            # decides this attempt like any other retryable failure.
            lost = output_not_kept(str(exc))
            retry_or_fail = after_attempt(row, lost, self.clock(), self.rand())
            assert not isinstance(retry_or_fail, Succeed)
            self.apply(row, ctx, retry_or_fail, attempt.tally)
            return None
        created_at = ctx.created_at

        def remember() -> None:  # before dependants start: they read it from here
            if output_ref is None:
                self.cache.remember(row, created_at, decision.output)

        # The last dependant runs next on this thread, if it fits in its deadline.
        keep = attempt.lease() if attempt.room(row.dependants[-1:]) else None
        res = self.executor.succeed(
            row, ctx, output_json, output_ref, len(raw), attempt.tally, keep_one=keep,
            on_recorded=remember, fold=attempt.fold,
        )
        attempt.ended = True
        return None if res is None else res[0]

    def payload(self, row: StepRecord, ctx: RunContext) -> dict[str, Any]:
        """The step's payload as sent: a `run:` step's command with its `${{ }}` holes
        bound to variables (`values`) holding what they read: the run's input and the
        outputs of the ancestors (manifest/shell.py: a value is never shell code)."""
        command = row.payload.get(COMMAND_KEY) if row.route == RUN_ROUTE else None
        if not isinstance(command, str) or "${{" not in command:
            return row.payload
        names = ctx.definition.specs if ctx.definition is not None else {}
        read = sorted(command_steps(command, list(names)))
        rows = self.executor.store.steps.get_outputs(row.run_id, read) if read else {}
        outputs = {name: self.executor.load_output(r) for name, r in rows.items()}
        text, values = bind_command(command, ctx.input, outputs)
        return {**row.payload, COMMAND_KEY: text, VALUES_KEY: values}

    def apply(self, row: StepRecord, ctx: RunContext, decision: Retry | Fail,
              tally: Tally) -> None:
        if isinstance(decision, Retry):
            self.executor.retry(row, decision, tally)
        else:
            self.executor.fail(row, ctx, decision, tally)
