"""Signals to durable runs: queued per run and name until a wait consumes them (first
in, first out), so none is lost when it arrives before the run waits for it.

Sending is two writes: the signal's item, then a poke on the run's driver row. A run
nobody holds gets a dispatch (and a wake, in case the dispatch is lost); a run being
advanced sees the poke when it next tries to wait, and looks again."""

from __future__ import annotations

import hashlib
import unicodedata
import uuid
from collections.abc import Callable
from typing import Any

from orchestrator.adapters.messages import Dispatch
from orchestrator.adapters.metering import metered
from orchestrator.adapters.queue import Queues
from orchestrator.adapters.store import Store
from orchestrator.engine.definition import DRIVER
from orchestrator.errors import Code, Conflict, NotFound, imported_run
from orchestrator.services.values import NAME, check_value, checked_name

__all__ = ["SIGNAL_NAME", "Signals"]

# The rule of every name (services/values.py); kept under its old name.
SIGNAL_NAME = NAME


class Signals:
    def __init__(self, store: Store, queues: Queues, clock: Callable[[], float]) -> None:
        self.store = store
        self.queues = queues
        self.clock = clock

    def send(self, run_id: str, name: str, payload: Any, key: str | None = None, *,
             also: tuple[dict[str, Any], ...] = ()) -> dict[str, Any]:
        """Queue signal `name` with `payload` for a durable run and wake it. `key` (an
        Idempotency-Key) makes a resend queue nothing. `also`: writes of a transaction
        (a hook's use) that commit with the signal, or neither does: a guard of theirs
        that fails queues nothing (`duplicate` true, as for a resent key). Its requests
        are the run's (adapters/metering.py: the driver's poke carries them)."""
        with metered(run_id):
            return self._send(run_id, name, payload, key, also)

    def _send(self, run_id: str, name: str, payload: Any, key: str | None,
              also: tuple[dict[str, Any], ...]) -> dict[str, Any]:
        name = checked_name("signal name", name)
        check_value("a signal's payload", payload)
        run = self.store.runs.get_run(run_id, self.clock())
        if run is None:
            raise NotFound(f"run {run_id!r} not found")
        if run.definition.durable is None:
            raise Conflict(Code.CONFLICT, f"run {run_id!r} is a run of DAG workflow "
                           f"{run.workflow!r}: only durable workflows take signals")
        sid = (hashlib.sha256(key.encode()).hexdigest()[:32] if key is not None
               else uuid.uuid4().hex)
        if run.imported is not None:
            raise imported_run(run_id, run.imported, "a signal")
        if run.status.terminal:
            if key is not None and self.store.signals.signal_sent(run_id, name, sid):
                # A resend of a signal delivered before the run ended.
                return {"run_id": run_id, "signal": name, "id": sid, "duplicate": True}
            raise Conflict(Code.RUN_FINISHED, f"run {run_id!r} has already finished "
                           f"({run.status.value}): the signal would never be read")
        now = self.clock()
        created = self.store.signals.queue_signal(run_id, name, payload, sid, now, also=also)
        for row in self.store.drivers.all(run_id):
            # The scopes that may take it: those waiting for it, and those being
            # advanced (their holder sees the poke before it waits).
            waits = row.waiting or {}
            if not row.status.terminal and (row.lease_owner is not None or (
                    waits.get("kind") == "signal"
                    and unicodedata.normalize("NFC", str(waits.get("name"))) == name)):
                self.wake(run_id, row.step)
        return {"run_id": run_id, "signal": name, "id": sid, "duplicate": not created}

    def wake(self, run_id: str, step: str = DRIVER) -> None:
        """Tell a durable run's driver (its top's, or a branch's) to look again at what
        it waits for: a dispatch if nobody holds it, a poke its holder sees otherwise."""
        poked = self.store.drivers.poke_driver(run_id, self.clock(), step)
        if poked is not None:
            self.queues.dispatch([Dispatch(run_id=run_id, step=step, attempt=poked.attempt)])
