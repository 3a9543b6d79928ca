"""Locks: one holder per key at a time, the others waiting in arrival order, nobody holding
a worker while they wait (`ctx.lock(key)` in a durable workflow, `lock:` on a YAML step).

- **Acquiring** (`acquire`): the holder joins the key's line (once: its arrival time is
  fixed when it first asks), then takes the lock if it is at the head of the line and
  the lock is free (one transaction: never two holders). Otherwise it waits, released,
  for a poke.
- **Releasing** (`release`) frees the lock and pokes the new head of the line, whose
  worker takes it (the hand-over). A run that ends, however it ends, releases every
  lock it holds (`release_all`, from the run's finish).
- **Repair**: a waiter looks again every `RECHECK` seconds even without a poke (a
  releaser that died before poking costs at most that), and on each look clears what
  a vanished run left behind: a holder whose run has ended or expired, and places in
  the line of runs that have ended."""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.adapters.messages import Dispatch
from orchestrator.adapters.queue import Queues
from orchestrator.adapters.store import Store
from orchestrator.services.values import checked_name

__all__ = ["RECHECK", "Locks"]

# How often a waiter looks at its lock without a poke.
RECHECK = 30.0


class Locks:
    def __init__(self, store: Store, queues: Queues, clock: Callable[[], float]) -> None:
        self.store = store
        self.locks = store.locks
        self.queues = queues
        self.clock = clock

    @staticmethod
    def checked(key: str) -> str:
        """A lock's key follows the rule of names (InvalidName otherwise)."""
        return checked_name("lock key", key)

    def acquire(self, key: str, holder: str, run_id: str, row: str, arrived: float) -> bool:
        """Whether `holder` (of `run_id`, waiting on step row `row`, in line since
        `arrived`) holds the lock now."""
        now = self.clock()
        current = self.locks.holder(key, now)
        if current is not None and current.holder == holder:
            return True
        if current is not None and self._gone(current.run_id, now):
            # Its run ended without releasing (it vanished): free the lock.
            self.locks.release(key, current.holder, current.run_id)
            current = None
        self.locks.join(key, holder, run_id, row, arrived, now)
        if current is not None:
            return False
        for waiter in self.locks.line(key, now, limit=10):
            if waiter.holder == holder:
                return self.locks.take(key, holder, run_id, arrived, now)
            if not self._gone(waiter.run_id, now):
                return False  # another is ahead, alive: it goes first
            self.locks.leave(key, waiter)
        return False

    def release(self, key: str, holder: str, run_id: str) -> None:
        """Free the lock if `holder` holds it, and hand it to the next in line."""
        if self.locks.release(key, holder, run_id):
            self.hand_over(key)

    def release_all(self, run_id: str) -> None:
        """Release every lock a run holds (it has ended)."""
        for key, holder in self.locks.held_by(run_id, self.clock()):
            self.release(key, holder, run_id)

    def hand_over(self, key: str) -> None:
        """Poke the head of the lock's line: its worker takes the lock."""
        now = self.clock()
        for waiter in self.locks.line(key, now, limit=10):
            if self._gone(waiter.run_id, now):
                self.locks.leave(key, waiter)
                continue
            poked = self.store.drivers.poke_driver(waiter.run_id, now, waiter.row)
            if poked is not None:
                self.queues.dispatch([Dispatch(run_id=waiter.run_id, step=waiter.row,
                                               attempt=poked.attempt)])
            return

    def _gone(self, run_id: str, now: float) -> bool:
        run = self.store.runs.get_run(run_id, now)
        return run is None or run.status.terminal
