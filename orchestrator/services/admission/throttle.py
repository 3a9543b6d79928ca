"""The throttle stage (`throttle: {limit, period, key, burst, policy}`): a generic
cell-rate budget kept in one control item per key (`tat`, the theoretical arrival
time), moved forward only by a conditional write that names the value it read. Each
arrival takes the next slot, so queued runs start evenly spaced, `period / limit` apart;
`burst` lets that many start together after a quiet spell. Policy `drop` refuses a run
that would have to wait. A slot in the future is the run's `admit_at`, and a timer."""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.adapters.store.control import Control
from orchestrator.adapters.store.control_keys import throttle_key
from orchestrator.engine.admission import throttle_slot
from orchestrator.engine.definition import Throttle
from orchestrator.engine.policies import ThrottlePolicy
from orchestrator.errors import StoreError

__all__ = ["SLACK", "Throttles"]

# A slot this close to now starts at once rather than via a timer.
SLACK = 0.05


class Throttles:
    def __init__(self, control: Control, clock: Callable[[], float]) -> None:
        self.control = control
        self.clock = clock

    def reserve(self, workflow: str, spec: Throttle, now: float) -> float | None:
        """Take the next slot for this key: when the run may start (None: policy drop,
        and no slot is free now)."""
        pk = throttle_key(workflow, spec.key)
        for _ in range(50):
            tat = self.control.throttle_tat(pk, now)
            start, new_tat = throttle_slot(
                tat or 0.0, now, limit=spec.limit, period=spec.period, burst=spec.burst
            )
            if spec.policy is ThrottlePolicy.DROP and start > now + SLACK:
                return None
            if self.control.move_throttle(
                pk, tat, new_tat, expires_at=new_tat + spec.period + 86400, now=now
            ):
                return start
            now = self.clock()
        raise StoreError(f"throttle {pk}: too much contention, try again")
