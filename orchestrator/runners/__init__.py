"""Runners: what a worker does with a claimed attempt, one runner per step kind.

The worker only takes messages, claims attempts and makes their start check; then it
hands each attempt to the runner of its step's kind (kinds.py), from the table
`runners()` builds (Runtime passes it to each worker):

- `call` (call.py): a YAML step that calls its route once per attempt, behind its `if:`
  (condition.py), its `lock:` (lock.py) and its backend's `limits:` (backend_gate.py,
  which fan_out.py and durable/ use too);
- `approval` (approval.py): a gate, behind its `if:`;
- `fan_out` (fan_out.py): the route called once per item, behind its `if:`;
- `durable` (durable/): a durable run's driver row, advanced call after call.

Adding a step kind is adding a runner and its row in the table."""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.adapters.invoker import Invoker
from orchestrator.runners.approval import ApprovalSteps
from orchestrator.runners.backend_gate import BackendGate
from orchestrator.runners.base import Attempt, BackendRef, Runner
from orchestrator.runners.cache import RunCache
from orchestrator.runners.call import CallRunner
from orchestrator.runners.condition import ConditionRunner
from orchestrator.runners.durable import Durable
from orchestrator.runners.fan_out import FanOutSteps
from orchestrator.runners.kinds import StepKind, kind_of
from orchestrator.runners.lock import LockRunner
from orchestrator.services.coordination.approvals import Approvals
from orchestrator.services.coordination.backend_limits import BackendLimits
from orchestrator.services.coordination.locks import Locks
from orchestrator.services.coordination.state_cells import StateService
from orchestrator.services.durable.children import Children
from orchestrator.services.durable.event_waits import EventWaits
from orchestrator.services.durable.hooks import Hooks
from orchestrator.services.execution.executor import Executor
from orchestrator.services.versions import Versions

__all__ = ["Attempt", "BackendRef", "RunCache", "Runner", "StepKind", "kind_of", "runners"]


def runners(executor: Executor, invoker: Invoker, cache: RunCache, *,
            clock: Callable[[], float], rand: Callable[[], float],
            sleep: Callable[[float], object], events: EventWaits, hooks: Hooks,
            children: Children, approvals: Approvals, state: StateService,
            locks: Locks, versions: Versions | None = None,
            limits: BackendLimits | None = None) -> dict[StepKind, Runner]:
    """The table from step kind to runner. `limits`: where calls to a backend with
    `limits:` take their slot (backend_gate.py)."""
    call = CallRunner(executor, invoker, cache, clock=clock, rand=rand)
    return {
        StepKind.CALL: ConditionRunner(executor, LockRunner(
            executor, locks, BackendGate(executor, limits, call))),
        StepKind.APPROVAL: ConditionRunner(executor, ApprovalSteps(executor, approvals, clock)),
        StepKind.FAN_OUT: ConditionRunner(executor, FanOutSteps(
            executor, invoker, cache, clock=clock, rand=rand, sleep=sleep, limits=limits)),
        StepKind.DURABLE: Durable(executor, invoker, clock=clock, rand=rand, events=events,
                                  hooks=hooks, children=children, approvals=approvals,
                                  state=state, locks=locks, versions=versions,
                                  limits=limits),
    }
