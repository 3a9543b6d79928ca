"""`limits:` on a backend (engine/backend_limits.py): every call to it takes a slot
first. A call step's attempt that finds none is released to wait, holding no worker
(runners/waits.py): its row stays `dispatched` with no lease and `waiting` naming the
backend and the limit (`show` and the dashboard say so), a timer for when it may try
again, and a place in the backend's line when the backend is full, so that the call
that frees a slot pokes it at once. The slot goes back once the call has answered."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from functions.sdk.protocol import WaitKind
from orchestrator.engine.backend_limits import LimitKind, Limits, Wait
from orchestrator.engine.durable_waits import Waiting
from orchestrator.engine.records import StepRecord
from orchestrator.engine.states import Released
from orchestrator.runners.base import Attempt, Runner
from orchestrator.runners.waits import park
from orchestrator.services.coordination.backend_limits import BackendLimits
from orchestrator.services.execution.executor import Executor
from orchestrator.services.execution.tally import Tally

__all__ = ["BackendGate", "arrived_at", "backend_wait", "line_holder", "slot_holder",
           "take_slot"]


def slot_holder(row: StepRecord, item: str = "") -> str:
    """The id of one call's slot: its step (and fan-out item) under this claim's lease,
    so a call of a later claim never takes over an earlier one's slot."""
    return f"{row.run_id}/{row.step}{item}#{row.lease_owner or ''}"


def line_holder(row: StepRecord) -> str:
    """The step's place in its backend's line (the same across its claims)."""
    return f"{row.run_id}/{row.step}"


def backend_wait(limits: Limits, wait: Wait, since: float, attempt: int = 0) -> Waiting:
    """What a step (or a durable run) waiting for its backend records on its row: it
    resolves as soon as it is looked at (`next`): the caller then tries for a slot
    again. `attempt`: a YAML step's, which its view checks (the row keeps the record
    once the attempt has moved on)."""
    detail: dict[str, Any] = {"backend": limits.backend, "limit": wait.limit.value,
                              "limits": limits.to_json()}
    if attempt:
        detail["attempt"] = attempt
    return Waiting(WaitKind.NEXT, name=limits.backend, since=since, until=wait.until,
                   detail=detail)


def arrived_at(waiting: dict[str, Any] | None, limits: Limits, now: float) -> float:
    """When the step first waited for this backend (its place in the line), else now."""
    waiting = waiting or {}
    detail = waiting.get("detail") or {}
    if detail.get("backend") == limits.backend:
        return float(waiting.get("since") or now)
    return now


def take_slot(executor: Executor, gate: BackendLimits, limits: Limits, row: StepRecord,
              tally: Tally, *, enter: Callable[[], Wait | None] | None = None) -> bool:
    """Whether the claimed `row` may call now (its slot taken by `enter`, by default
    the step's own); False: it was released to wait for its backend (or its run is
    stopping and it was given up)."""
    clock = executor.clock
    arrived = arrived_at(row.waiting, limits, clock())
    queued = (row.waiting or {}).get("detail", {}).get("limit") == LimitKind.CONCURRENCY
    pokes = row.pokes
    take = enter or (lambda: gate.enter(limits, slot_holder(row), row.timeout))
    joined = False
    for _ in range(10):
        wait = take()
        if wait is None:
            if queued:
                gate.dequeue(limits, line_holder(row), arrived)
            return True
        if wait.limit is LimitKind.CONCURRENCY and not joined:
            gate.queue(limits, line_holder(row), row.run_id, row.step, arrived)
            queued = joined = True
            # One more look once in line: a slot freed between the refusal and the join
            # found nobody to hand it to.
            continue
        left = park(executor, row, pokes, backend_wait(limits, wait, arrived, row.attempt),
                    clock(), tally)
        if left is not Released.POKED:
            return False
        # Poked (a hand-over takes its place in the line away): try again, and join
        # again if need be.
        joined = False
        fresh = executor.store.steps.get_step(row.run_id, row.step)
        pokes = fresh.pokes if fresh is not None else pokes + 1
    return False


class BackendGate:
    """A call step to a limited backend: its slot taken (or a wait) before `inner`
    calls, given back once the call has answered."""

    def __init__(self, executor: Executor, gate: BackendLimits | None, inner: Runner) -> None:
        self.executor = executor
        self.gate = gate
        self.inner = inner

    def run(self, attempt: Attempt) -> StepRecord | None:
        limits = attempt.backend.limits if attempt.backend is not None else None
        if limits is None or self.gate is None or attempt.ctx is None:
            return self.inner.run(attempt)
        row = attempt.row
        if not take_slot(self.executor, self.gate, limits, row, attempt.tally):
            return None
        try:
            return self.inner.run(attempt)
        finally:
            self.gate.leave(limits, slot_holder(row), attempt.outcome)
