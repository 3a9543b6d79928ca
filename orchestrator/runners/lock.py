"""`lock:` on a YAML step: the step takes its lock (a template over the run's input, e.g.
`customer-${{ input.customer }}`) before its call, waiting in line without a worker
(runners/waits.py) until it is its turn, and keeps it through its attempts and
their backoff; it lets it go once it has ended (its success, its final failure). A run
that ends releases what its steps still hold. The holder is the step of its run, so two
steps of one run asking for one key also take turns."""

from __future__ import annotations

from functions.sdk.protocol import WaitKind
from orchestrator.engine.attempts import Fail
from orchestrator.engine.context import RunContext
from orchestrator.engine.durable_waits import LOCK_RECHECK, Waiting
from orchestrator.engine.records import StepRecord
from orchestrator.engine.states import Released
from orchestrator.errors import OrchestratorError
from orchestrator.expressions import ExpressionError, compile_template
from orchestrator.runners.base import Attempt, Runner
from orchestrator.runners.waits import park
from orchestrator.services.coordination.locks import Locks
from orchestrator.services.execution.executor import Executor
from orchestrator.services.execution.tally import Tally

__all__ = ["LockRunner", "lock_key", "step_lock", "unlock_step"]


class LockRunner:
    """A call step with a `lock:`: it takes its lock (or waits in line for it, holding no
    worker) before `inner` calls it, and lets it go once the step has ended."""

    def __init__(self, executor: Executor, locks: Locks, inner: Runner) -> None:
        self.executor = executor
        self.locks = locks
        self.inner = inner

    def run(self, attempt: Attempt) -> StepRecord | None:
        spec, ctx, row = attempt.spec, attempt.ctx, attempt.row
        if spec is None or spec.lock is None or ctx is None:
            return self.inner.run(attempt)
        if not step_lock(self.executor, self.locks, row, ctx, spec.lock, attempt.tally):
            return None  # in line (or failed: a key that does not render)
        try:
            return self.inner.run(attempt)
        finally:
            if attempt.ended:  # its success or its last failure (a retry keeps it)
                unlock_step(self.locks, row, ctx, spec.lock)


def lock_key(template: str, ctx: RunContext) -> str:
    """The step's lock key, rendered from the run's input and checked."""
    return Locks.checked(compile_template(template).render({"input": ctx.input}))


def _holder(row: StepRecord) -> str:
    return f"{row.run_id}#{row.step}"


def step_lock(executor: Executor, locks: Locks, row: StepRecord, ctx: RunContext,
              template: str, tally: Tally) -> bool:
    """Whether the claimed step holds its lock (call it now); False: it was released to
    wait in line (or failed: a key that does not render fails the step)."""
    try:
        key = lock_key(template, ctx)
    except (ExpressionError, OrchestratorError) as exc:
        executor.fail(row, ctx, Fail({"code": "invalid_lock_key",
                                      "message": f"step {row.step}: lock: {exc}"}), tally)
        return False
    pokes = row.pokes
    waiting = row.waiting or {}
    # In line since its first try (kept on the row while it waits): its place is fixed.
    arrived = (float(waiting.get("since", 0.0)) if waiting.get("kind") == WaitKind.LOCK
               else executor.clock())
    for _ in range(8):
        now = executor.clock()
        if locks.acquire(key, _holder(row), row.run_id, row.step, arrived):
            return True
        parked = Waiting(WaitKind.LOCK, name=key, since=arrived, until=now + LOCK_RECHECK,
                         detail={"action": "acquire", "key": key})
        left = park(executor, row, pokes, parked, now, tally)
        if left is not Released.POKED:
            return False
        fresh = executor.store.steps.get_step(row.run_id, row.step)
        pokes = fresh.pokes if fresh is not None else pokes + 1
    return False


def unlock_step(locks: Locks, row: StepRecord, ctx: RunContext, template: str) -> None:
    try:
        key = lock_key(template, ctx)
    except (ExpressionError, OrchestratorError):
        return  # it never took one
    locks.release(key, _holder(row), row.run_id)
