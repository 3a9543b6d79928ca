"""Child runs of durable runs: `ctx.call` (wait for its result) and `ctx.spawn` (do
not), and runs started through the API with a `parent_run_id`.

A child's run id is derived from its parent's run and operation, so a repeated call
starts nothing new. The link is kept in the control table (`children#<parent>`, one
item per child) for `GET /runs/{id}/children`; the child's trigger names its parent
(and, for `ctx.call`, the driver row that waits for it). When a child ends, the parent's
waiting row is poked; the sweeper's pass over finished runs does it again, so a poke
lost with its process costs one sweep. Cancelling a parent cancels its running
children."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from orchestrator.adapters.store import Store
from orchestrator.adapters.store.control import Control
from orchestrator.adapters.store.control_keys import Sk, child_sk, children_key, sk_of
from orchestrator.engine.records import RunRecord
from orchestrator.errors import NotFound

__all__ = ["Children", "child_run_id"]

LINK_LIFE = 400 * 24 * 3600.0


def child_run_id(parent: str, op_id: str) -> str:
    return f"{parent[:170]}-c{op_id[:16]}"


class Children:
    def __init__(self, control: Control, store: Store, clock: Callable[[], float], *,
                 start: Callable[..., tuple[RunRecord, bool]],
                 wake: Callable[[str, str], object]) -> None:
        self.control = control
        self.store = store
        self.clock = clock
        self._start = start
        self._wake = wake

    def start(self, parent: str, row: str, op: dict[str, Any], workflow: str, input: Any,
              *, waits: bool) -> RunRecord:
        """Start (once) the child of operation `op` of run `parent`."""
        run_id = child_run_id(parent, str(op["id"]))
        trigger: dict[str, Any] = {"source": "parent", "parent_run_id": parent,
                                   "scope": op.get("scope", ""), "pos": op.get("pos")}
        if waits:
            trigger["row"] = row
        self.link(parent, run_id, workflow)
        run, _ = self._start(workflow, input, run_id, trigger=trigger)
        return run

    def link(self, parent: str, child: str, workflow: str) -> None:
        now = self.clock()
        self.control.put_new(children_key(parent), child_sk(child), now=now,
                             doc={"workflow": workflow, "at": round(now, 3)},
                             expires_at=now + LINK_LIFE)

    def of(self, parent: str) -> list[str]:
        """The children of a run, oldest link first."""
        out: list[str] = []
        after: Sk | None = None
        while True:
            items = self.control.query(children_key(parent), now=self.clock(), after=after)
            out.extend(sk_of(i) for i in items)
            if len(items) < 100:
                return out
            after = sk_of(items[-1])

    def parent_of(self, run: RunRecord) -> str | None:
        trigger = run.trigger
        if trigger is None:
            return None
        parent = trigger.detail.get("parent_run_id")
        return None if parent is None else str(parent)

    def finished(self, run: RunRecord) -> None:
        """A run ended: wake the parent row waiting for it, if one is."""
        trigger = run.trigger
        if trigger is None or trigger.source != "parent" or "row" not in trigger.detail:
            return
        self._wake(str(trigger.detail["parent_run_id"]), str(trigger.detail["row"]))

    def require(self, run_id: str) -> RunRecord:
        run = self.store.runs.get_run(run_id, self.clock())
        if run is None:
            raise NotFound(f"run {run_id!r} not found (or expired)")
        return run
