"""An operator's hand on a durable run: resume it (after a fix for a replay mismatch)
or reset it to an earlier point of its journal.

Both take the run's driver only while nobody holds it, and hand it back waiting for its
next call. A holder about to let go (the worker that paused the run writes the pause,
then releases the driver) is waited for, up to HOLD_WAIT seconds; a run still being
advanced after that answers 409: try again once it waits."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from functions.sdk.protocol import WaitKind
from orchestrator.adapters.messages import Dispatch
from orchestrator.adapters.queue import Queues
from orchestrator.adapters.store import Store
from orchestrator.engine.definition import DRIVER
from orchestrator.engine.durable_waits import Waiting
from orchestrator.engine.records import RunRecord
from orchestrator.engine.states import Released
from orchestrator.errors import Code, Conflict, NotFound, UsageError, imported_run

__all__ = ["DurableAdmin"]

HOLD_FOR = 30.0
# How long an operator's move waits for the driver's holder to let go, and how often it
# tries again meanwhile (by `sleep`, real time unless given: the clock may be a test's,
# standing still).
HOLD_WAIT = 5.0
HOLD_RETRY = 0.02


class DurableAdmin:
    def __init__(self, store: Store, queues: Queues, clock: Callable[[], float],
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.store = store
        self.queues = queues
        self.clock = clock
        self.sleep = sleep

    def _durable_run(self, run_id: str) -> RunRecord:
        run = self.store.runs.get_run(run_id, self.clock())
        if run is None:
            raise NotFound(f"run {run_id!r} not found (or expired)")
        if run.definition.durable is None:
            raise Conflict(Code.CONFLICT, f"run {run_id!r} is a run of DAG workflow "
                           f"{run.workflow!r}: only durable runs resume or reset")
        if run.imported is not None:
            raise imported_run(run_id, run.imported, "a resume or a reset")
        if run.status.terminal:
            raise Conflict(Code.RUN_FINISHED, f"run {run_id!r} has already finished "
                           f"({run.status.value}); start it again with rerun")
        return run

    def resume(self, run_id: str) -> dict[str, Any]:
        """Call a paused run's workflow again (the code was fixed). A run that is not
        paused is only woken: harmless."""
        run = self._durable_run(run_id)
        self._restart(run_id, "resume", lambda: self.store.runs.unpause_run(
            run_id, self.clock(), how="resume"))
        return {"run_id": run_id, "resumed": True, "was_paused": run.paused is not None}

    def reset(self, run_id: str, to: int) -> dict[str, Any]:
        """Forget the journal from position `to` of the workflow's top on, and call the
        workflow again: what follows runs again. Only the top's entries are forgotten: a
        parallel operation or a child run after `to` keeps its branches' results and its
        children (their ids derive from the operation), so reset before them only if
        they should not run again."""
        if isinstance(to, bool) or not isinstance(to, int) or to < 0:
            raise UsageError(f"to: {to!r} is not a position (an integer >= 0)")
        run = self._durable_run(run_id)
        deleted: list[int] = []

        def forget() -> None:
            deleted.append(self.store.journal.delete_entries(run_id, "", to))
            if not self.store.runs.unpause_run(run_id, self.clock(), how="reset", to=to):
                # Not paused: the reset is in the run's history all the same (followers
                # drop the journal they kept on seeing it).
                self.store.runs.note_run(run_id, self.clock(), "run.reset", to=to)

        self._restart(run_id, "reset", forget)
        return {"run_id": run_id, "reset_to": to, "forgotten": deleted[0] if deleted else 0,
                "was_paused": run.paused is not None}

    def _held_by_another(self, run_id: str) -> bool:
        driver = self.store.drivers.get_driver(run_id)
        return (driver is not None and driver.lease_owner is not None
                and not driver.status.terminal)

    def _restart(self, run_id: str, why: str, meanwhile: Callable[[], object]) -> None:
        owner = f"{why}:{uuid.uuid4().hex[:12]}"
        now = self.clock()
        held = self.store.drivers.hold_driver(run_id, owner, now + HOLD_FOR)
        tries = int(HOLD_WAIT / HOLD_RETRY)
        free = False  # the last refusal found nobody holding the driver
        while held is None and tries > 0:
            if self._held_by_another(run_id):
                free = False
                self.sleep(HOLD_RETRY)
                tries -= 1
            elif free:
                break  # refused twice with nobody holding it: it ended, or never began
            else:
                # Nobody holds it now: its holder let go after the refusal (the worker
                # that paused the run releases it right after the pause). Try at once.
                free = True
            held = self.store.drivers.hold_driver(run_id, owner, now + HOLD_FOR)
        if held is None:
            raise Conflict(Code.CONFLICT, f"run {run_id!r} is being advanced right now (or "
                           "has not started): try again once it waits")
        meanwhile()
        nxt = Waiting(WaitKind.NEXT, since=now).to_json()
        left = self.store.drivers.suspend_driver(run_id, owner, held.attempt, held.pokes, nxt,
                                                 now, now + self.store.wake.redispatch_after, now)
        if left is not Released.OK:  # a poke landed: the holder is still us; release plainly
            fresh = self.store.drivers.get_driver(run_id)
            if fresh is not None and fresh.lease_owner == owner:
                self.store.drivers.suspend_driver(run_id, owner, fresh.attempt, fresh.pokes, nxt,
                                                  now, now + self.store.wake.redispatch_after, now)
        self.queues.dispatch([Dispatch(run_id=run_id, step=DRIVER, attempt=held.attempt)])
