"""A YAML step of kind `approval:`: a gate, not a call.

The worker that claims the step opens its gate (services/coordination/approvals.py) and, while the
gate is open, releases the row to wait, as a durable run's driver waits: no lease, its
`waiting` naming the gate, a timer message for the deadline (or, for a far deadline, a
wake the sweeper hands to the queue when it comes within reach). An answer pokes the
row; the deadline's timer brings it back too. Whoever claims it next finds the gate
resolved (or times it out, once its deadline passed) and ends the step:

- approved, or timed out: the step succeeds with `{approved, timed_out, by, at,
  comment}` (a gate that times out succeeds with `timed_out: true`: the steps below
  decide with `if:`);
- rejected: the run is cancelled, the rejecter and the comment in its kill reason."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from functions.sdk.protocol import WaitKind
from orchestrator.adapters.store.approvals import Gate
from orchestrator.engine.context import RunContext
from orchestrator.engine.durable_waits import Waiting
from orchestrator.engine.records import StepRecord
from orchestrator.engine.states import Released
from orchestrator.errors import ConditionFailed
from orchestrator.runners.base import Attempt
from orchestrator.runners.waits import park
from orchestrator.services.coordination.approvals import Approvals, rejected_reason
from orchestrator.services.execution.executor import Executor
from orchestrator.services.execution.tally import Tally
from orchestrator.strict_json import dumps

__all__ = ["ApprovalSteps"]


class ApprovalSteps:
    def __init__(self, executor: Executor, approvals: Approvals,
                 clock: Callable[[], float]) -> None:
        self.executor = executor
        self.store = executor.store
        self.queues = executor.queues
        self.approvals = approvals
        self.clock = clock

    def run(self, attempt: Attempt) -> StepRecord | None:
        """The approval runner: the gate of the claimed step (runners/base.py)."""
        spec = attempt.spec
        assert attempt.ctx is not None and spec is not None and spec.approval is not None
        self.advance(attempt.row, attempt.ctx, spec.approval, attempt.tally)
        return None

    def advance(self, row: StepRecord, ctx: RunContext, spec: Mapping[str, Any],
                tally: Tally) -> None:
        """Carry the claimed approval step `row` on: end it if its gate is resolved,
        else release it to wait."""
        pokes = row.pokes
        for _ in range(8):
            now = self.clock()
            gate = self.approvals.settle(
                self.approvals.open(row.run_id, row.step, ctx.workflow, spec, now), now)
            if not gate.open:
                self._end(row, ctx, gate, tally)
                return
            waiting = Waiting(WaitKind.APPROVAL, name=row.step, until=gate.deadline,
                              since=gate.created_at)
            if park(self.executor, row, pokes, waiting, now, tally) is not Released.POKED:
                return  # waiting; or stopping (given up); or the lease is someone else's
            fresh = self.store.steps.get_step(row.run_id, row.step)
            pokes = fresh.pokes if fresh is not None else pokes + 1

    def _end(self, row: StepRecord, ctx: RunContext, gate: Gate, tally: Tally) -> None:
        if gate.status == "rejected":
            # The kill is recorded first; the step then lands in a stopping run.
            try:
                self.executor.kill(row.run_id, rejected_reason(gate))
            except ConditionFailed:
                pass  # killed, or finished, already
        raw = dumps(gate.output())
        self.executor.succeed(row, ctx, raw, None, len(raw), tally, keep_one=None)
