"""Backend limits applied (`backends.<name>.limits`; the decisions are
engine/backend_limits.py, the item adapters/store/backend_limits.py).

- **Entering** (`enter`): before each call to a limited backend (a YAML step's, a
  fan-out item's, a durable run's), its caller takes a slot: one conditional write.
  Refused, it gets a `Wait`: it does not call, and waits released (no worker held) with
  a timer for the wait's end (its rate slot, a 429's hold-off, or a short recheck),
  joining the backend's line when the backend is full (`queue`).
- **Leaving** (`leave`): once the call has answered, its slot is freed and, if the
  backend's item says someone may wait (its line's marker, read from the give-back's
  own answer), the head of the line is poked (the hand-over: its worker tries again at
  once); nobody waiting, a release is one write. A `429` with a `Retry-After` holds
  every call to the backend off until then.
- **Repair**: a slot whose holder vanished is dropped once its lease (the call's timeout
  plus the lease margin) has passed, by whoever finds the backend full; a lost poke
  costs a waiter at most its recheck (`RECHECK`), and a lost timer is the sweeper's (the
  row's wake), as for every wait."""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.adapters.messages import Dispatch
from orchestrator.adapters.queue import Queues
from orchestrator.adapters.store import Store
from orchestrator.adapters.store.backend_limits import BackendLimitStore
from orchestrator.engine.attempts import Outcome
from orchestrator.engine.backend_limits import LimitKind, Limits, Wait, hold_off, verdict

__all__ = ["BackendLimits"]

# Tries at taking a slot before the caller waits (each refusal that finds room again
# is a write that lost a race).
TRIES = 8


class BackendLimits:
    def __init__(self, store: Store, queues: Queues, clock: Callable[[], float], *,
                 lease_margin: float) -> None:
        self.store = store
        self.items = BackendLimitStore(store.control)
        self.queues = queues
        self.clock = clock
        self.lease_margin = lease_margin

    def enter(self, limits: Limits, holder: str, timeout: float) -> Wait | None:
        """Take a slot for a call of `holder` (None: taken, call now; `leave` after);
        else what to wait for."""
        for _ in range(TRIES):
            now = self.clock()
            if self.items.take(limits.backend, holder, now + timeout + self.lease_margin, now,
                               concurrency=limits.concurrency, interval=limits.interval):
                return None
            state = self.items.state(limits.backend, now)
            if limits.concurrency is not None and not state.exists:
                self.items.open(limits.backend)
                continue
            why = verdict(limits, state, now)
            if isinstance(why, Wait):
                return why
            if why.expired:  # vanished holders: their slots are free again
                self.items.drop(limits.backend, {h: state.holders[h] for h in why.expired})
        return Wait(LimitKind.CONCURRENCY, self.clock() + 0.1)

    def leave(self, limits: Limits, holder: str, outcome: Outcome | None) -> None:
        """The call of `holder` has answered (`outcome`; None: unknown): free its slot,
        hold the backend off if it asked to, and wake the head of its line."""
        now = self.clock()
        until = hold_off(outcome, now)
        if until is not None:
            self.items.hold_off(limits.backend, until)
        if limits.concurrency is not None:
            freed = self.items.give_back(limits.backend, holder)
            if freed.queued:
                self.hand_over(limits.backend, freed.line_v)

    def queue(self, limits: Limits, holder: str, run_id: str, row: str,
              arrived: float) -> None:
        """Wait in the backend's line for a freed slot (`holder`: the step, stable
        across its claims; `arrived`: its first refusal)."""
        self.items.join(limits.backend, holder, run_id, row, arrived, self.clock())

    def dequeue(self, limits: Limits, holder: str, arrived: float) -> None:
        """Out of the line (it took its slot)."""
        self.items.leave(limits.backend, holder, arrived)

    def hand_over(self, backend: str, line_v: int | None = None) -> None:
        """Poke the head of the backend's line: its worker tries for the slot again.
        A waiter taken out of the line whose row could not be handed a dispatch (held:
        its holder sees the poke; or gone: its run ended) does not end the hand-over:
        the next one is poked too (a spare wake only looks and waits again). A line
        found empty lowers its marker if nobody joined since the item counted
        `line_v` joins (the give-back's read)."""
        now = self.clock()
        line = self.items.line(backend, now)
        if line.empty and line_v is not None:
            self.items.line_empty(backend, line_v)
            return
        for waiter in line.waiters:
            if not self.items.take_turn(backend, waiter):
                continue  # another release woke it
            poked = self.store.drivers.poke_driver(waiter.run_id, now, waiter.row)
            if poked is not None:
                self.queues.dispatch([Dispatch(run_id=waiter.run_id, step=waiter.row,
                                               attempt=poked.attempt)])
                return

