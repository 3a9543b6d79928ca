"""Durable runs waiting for events (`ctx.wait_for_event`), without missing one.

An event and a wait that may match share a partition of the control table, and each
side writes its own item there before it reads the other side's, strongly consistent:
whichever writes second sees the first. (Never through an index: a GSI is eventually
consistent on AWS, and the race would pass on the emulator and fail in production.)

| pk                       | sk                                 | what               |
|--------------------------|------------------------------------|--------------------|
| `evw#<name>#<subject>`   | `e#<ms>#<event id>`                | an event           |
| `evw#<name>#<subject>`   | `w#<run id>#<scope>#<pos>`         | a waiting run      |

An event with subject K is written under K and `*`; one without a subject under `` and
`*`. A wait for subject S registers under S and `` (an event without a subject matches
every wait); a wait for any subject registers under `*`. Each matching pair meets in
one partition (its keys are built in adapters/store/control_keys.py). The event side pokes
each waiting run it finds; the run's worker picks the earliest event in the wait's
window (from the start of the operation before the wait, less its lookback) and records
it: first resolution wins, a later event or the timeout changes nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from orchestrator.adapters.store.control import Control
from orchestrator.adapters.store.control_keys import (
    EVENT_WAITS_FROM,
    Sk,
    doc_of,
    event_wait_event,
    event_wait_event_sk,
    event_wait_events_after,
    event_wait_keys,
    event_wait_sk,
    sk_of,
    wait_event_keys,
)
from orchestrator.engine.definition import DRIVER
from orchestrator.engine.durable_scopes import row_of
from orchestrator.engine.durable_waits import Waiting

__all__ = ["EventWaits"]


class EventWaits:
    def __init__(self, control: Control, clock: Callable[[], float], retention: float) -> None:
        self.control = control
        self.clock = clock
        self.retention = retention

    # ---- the event side ----------------------------------------------------------------

    def publish(self, event: dict[str, Any]) -> set[tuple[str, str]]:
        """Write the event where waits look, then read who waits: the (run, driver row)
        pairs to poke."""
        at = float(event["received_at"])
        parts = event_wait_keys(str(event["name"]), event.get("key"))
        for pk in parts:
            self.control.put_new(pk, event_wait_event_sk(at, event["id"]), now=at, doc=event,
                                 expires_at=at + self.retention)
        runs: set[tuple[str, str]] = set()
        now = self.clock()
        for pk in parts:
            after = EVENT_WAITS_FROM
            while True:  # every waiting run, a page at a time
                items = self.control.query(pk, now=now, after=after, limit=1000)
                for item in items:
                    doc = doc_of(item) or {}
                    if doc.get("run_id"):
                        runs.add((str(doc["run_id"]), str(doc.get("row") or DRIVER)))
                if len(items) < 1000:
                    break
                after = sk_of(items[-1])
        return runs

    # ---- the waiting side --------------------------------------------------------------

    def register(self, run_id: str, waiting: Waiting) -> None:
        detail = waiting.detail
        # Kept until the wait's own end; one without a timeout may last as long as the
        # run (a year here: a run that outlives it is woken by its hourly look).
        end = waiting.until or (self.clock() + 365 * 24 * 3600.0)
        for pk in wait_event_keys(str(detail["event"]), detail.get("subject")):
            self.control.put_new(pk, self._wait_key(run_id, waiting), now=self.clock(),
                                 doc={"run_id": run_id, "row": row_of(waiting.scope)},
                                 expires_at=end + self.retention)

    def find(self, waiting: Waiting) -> dict[str, Any] | None:
        """The earliest event in the wait's window, if any (strongly consistent)."""
        detail = waiting.detail
        after = float(detail.get("after") or 0.0)
        found: list[dict[str, Any]] = []
        now = self.clock()
        for pk in wait_event_keys(str(detail["event"]), detail.get("subject")):
            for item in self.control.query(pk, now=now, after=event_wait_events_after(after),
                                           limit=100):
                doc = event_wait_event(item)
                if doc is not None and float(doc.get("received_at", 0.0)) >= after:
                    found.append(doc)
                    break  # the earliest of this partition
        if not found:
            return None
        return min(found, key=lambda d: (float(d["received_at"]), str(d["id"])))

    def forget(self, run_id: str, waiting: Waiting) -> None:
        detail = waiting.detail
        for pk in wait_event_keys(str(detail["event"]), detail.get("subject")):
            self.control.delete(pk, self._wait_key(run_id, waiting))

    @staticmethod
    def _wait_key(run_id: str, waiting: Waiting) -> Sk:
        return event_wait_sk(run_id, waiting.scope, waiting.pos)
