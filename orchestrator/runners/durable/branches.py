"""A durable run's parallel branches: the aggregate a `ctx.parallel` opens, its first
branches started as driver rows of their own (at most `max` at once), each branch's end
counted (starting the next waiting one, and waking the parent once the last is done),
and the rows of branches whose holder died before ending them settled."""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.adapters.messages import Dispatch
from orchestrator.engine.context import RunContext
from orchestrator.engine.definition import DRIVER
from orchestrator.engine.durable_scopes import JournalView, branch_scope, first_branches, row_of
from orchestrator.engine.durable_waits import Waiting
from orchestrator.engine.records import StepRecord
from orchestrator.engine.states import StepStatus
from orchestrator.errors import ConditionFailed
from orchestrator.services.execution.executor import Executor
from orchestrator.services.execution.tally import Tally

__all__ = ["Branches"]


class Branches:
    def __init__(self, executor: Executor, *, clock: Callable[[], float]) -> None:
        self.store = executor.store
        self.queues = executor.queues
        self.clock = clock

    def open_parallel(self, row: StepRecord, ctx: RunContext, waiting: Waiting,
                       view: JournalView, now: float, carried: dict[str, Waiting]) -> None:
        """A parallel operation begins: its aggregate, then its first branches."""
        total, limit = int(waiting.detail["branches"]), int(waiting.detail["max"])
        done = {i for i in range(total)
                if branch_scope(waiting.scope, waiting.pos, i) in view.ended}
        first, cursor = first_branches(total, limit, done)
        # Only those before the cursor count as done now: one past it is counted when the
        # cursor reaches it and its row finds its result, passing its slot on.
        self.store.drivers.open_parallel(row.run_id, waiting.scope, waiting.pos, total, limit,
                                         {i for i in done if i < cursor}, cursor, now)
        self.start(row, ctx, [branch_scope(waiting.scope, waiting.pos, i)
                                        for i in first], now, carried)

    def start(self, row: StepRecord, ctx: RunContext, scopes: list[str],
                        now: float, carried: dict[str, Waiting] | None = None) -> None:
        spec = ctx.definition.specs[DRIVER] if ctx.definition is not None else None
        sends = []
        for scope in scopes:
            # A branch that failed an attempt in its parent's call waits out its backoff.
            wait = (carried or {}).get(scope)
            branch = StepRecord(
                run_id=row.run_id, step=row_of(scope), status=StepStatus.READY,
                backend=spec.backend if spec else row.backend,
                route=spec.route if spec else row.route,
                # Not counted towards the run's finish: the top's driver ends the run.
                dependants=(DRIVER,), attempt=1, max_attempts=row.max_attempts,
                timeout=row.timeout, retry_strategy=row.retry_strategy,
                retry_delay=row.retry_delay, retry_max_delay=row.retry_max_delay,
                ready_at=now, wake_at=now + self.store.wake.redispatch_after,
                history=({"at": round(now, 3), "type": "step.ready"},),
                waiting=None if wait is None else wait.to_json(),
            )
            try:
                self.store.steps.create_step_if_absent(branch)
            except ConditionFailed:
                continue  # started before (a repeated call); its dispatch went then
            sends.append(Dispatch(run_id=row.run_id, step=branch.step, attempt=1))
        if sends:
            self.queues.dispatch(sends)

    def done(self, row: StepRecord, ctx: RunContext, scope: str, tally: Tally) -> None:
        """A branch's code ended: count it, start the next branch waiting, wake the parent
        if it was the last, end its row. A worker dying before the row's end leaves it
        leased, and its retry does all of this again (each part idempotent); if the
        parent goes on first, it ends the row itself (`settle`)."""
        parent, _, last = scope.rpartition("/")
        pos, index = (int(x) for x in last.split(":", 1))
        agg = self.store.drivers.branch_done(row.run_id, parent, pos, index)
        now = self.clock()
        if agg["start"] is not None:
            self.start(row, ctx, [branch_scope(parent, pos, agg["start"])], now)
        if len(agg["done"]) >= agg["total"]:
            self.wake(row.run_id, row_of(parent))
        try:
            self.store.steps.record_success(
                row.run_id, row.step, row.attempt, row.lease_owner or "",
                output_json="null", output_ref=None, size=0, now=now)
        except ConditionFailed:
            pass  # the lease was lost: its next holder finds the branch done and ends it

    def settle(self, run_id: str, waiting: Waiting, now: float) -> None:
        """Every branch of a parallel operation is done: end the rows of any whose
        holder died between counting it and ending it (one query), so no row of the run
        stays in flight once the parent goes on."""
        prefix = row_of(branch_scope(waiting.scope, waiting.pos, 0))[:-1]
        for branch in self.store.drivers.all(run_id):
            if branch.step.startswith(prefix) and "/" not in branch.step[len(prefix):] \
                    and not branch.status.terminal:
                self.store.drivers.settle_branch(run_id, branch.step, now)

    def wake(self, run_id: str, step: str) -> None:
        """Poke a driver row; dispatch it if nobody holds it."""
        poked = self.store.drivers.poke_driver(run_id, self.clock(), step)
        if poked is not None:
            self.queues.dispatch([Dispatch(run_id=run_id, step=step, attempt=poked.attempt)])

