"""Child runs of durable runs: `ctx.call` (wait for its result) and `ctx.spawn` (do
not), and runs started through the API with a `parent_run_id`.

A child's run id is derived from its parent's run and operation, so a repeated call
starts nothing new. The link is kept in the control table (`children#<parent>`, one
item per child) for `GET /runs/{id}/children`; the child's trigger names its parent
(and, for `ctx.call`, the driver row that waits for it). When a child ends, the parent's
waiting row is poked; the sweeper's pass over finished runs does it again, so a poke
lost with its process costs one sweep. Cancelling a parent cancels its running
children.

A spawned child may `notify` its parent: when it ends, the parent is sent that signal
with the child's outcome `{run_id, status, output, error}` (a script's `activity wait`
waits for it). The signal's id is the child's run id, so the sweeper's repeat of
`finished` queues nothing twice; a parent that has ended is not signalled."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from orchestrator.adapters.store import Store
from orchestrator.adapters.store.control import Control
from orchestrator.adapters.store.control_keys import Sk, child_sk, children_key, sk_of
from orchestrator.engine.records import RunRecord
from orchestrator.engine.states import StepStatus
from orchestrator.errors import Code, Conflict, NotFound, UsageError

__all__ = ["Children", "child_run_id"]

LINK_LIFE = 400 * 24 * 3600.0


def child_run_id(parent: str, op_id: str) -> str:
    return f"{parent[:170]}-c{op_id[:16]}"


class Children:
    def __init__(self, control: Control, store: Store, clock: Callable[[], float], *,
                 start: Callable[..., tuple[RunRecord, bool]],
                 wake: Callable[[str, str], object],
                 signal: Callable[..., object] | None = None,
                 load_output: Callable[[Any], Any] | None = None) -> None:
        self.control = control
        self.store = store
        self.clock = clock
        self._start = start
        self._wake = wake
        self._signal = signal
        self._load_output = load_output

    def start(self, parent: str, row: str, op: dict[str, Any], workflow: str, input: Any,
              *, waits: bool, notify: str | None = None) -> RunRecord:
        """Start (once) the child of operation `op` of run `parent`."""
        run_id = child_run_id(parent, str(op["id"]))
        trigger: dict[str, Any] = {"source": "parent", "parent_run_id": parent,
                                   "scope": op.get("scope", ""), "pos": op.get("pos")}
        if waits:
            trigger["row"] = row
        if notify is not None:
            trigger["notify"] = notify
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
        """A run ended: wake the parent row waiting for it, if one is, or send the
        parent the signal it asked for."""
        trigger = run.trigger
        if trigger is None or trigger.source != "parent":
            return
        parent = str(trigger.detail.get("parent_run_id"))
        if "row" in trigger.detail:
            self._wake(parent, str(trigger.detail["row"]))
        notify = trigger.detail.get("notify")
        if notify is not None and self._signal is not None:
            # `run` may be the record its finisher read before the finish: read it again.
            ended = self.store.runs.get_run(run.run_id, self.clock())
            if ended is None or not ended.status.terminal:
                return
            outcome = self.outcome(ended)
            try:
                try:
                    self._signal(parent, str(notify), outcome, key=run.run_id)
                except UsageError as exc:  # the output is past a signal's cap: say so
                    self._signal(parent, str(notify), {
                        **outcome, "output": None, "status": "failed",
                        "error": {"code": Code.OUTPUT_TOO_LARGE.value,
                                  "message": f"child {run.run_id}'s outcome could not be"
                                  f" sent: {exc.message}"}}, key=run.run_id)
            except (Conflict, NotFound, UsageError):
                pass  # the parent has ended (or expired): nobody will wait for it

    def outcome(self, child: RunRecord) -> dict[str, Any]:
        """What a parent learns of its ended child: {run_id, status, output, error}."""
        out: dict[str, Any] = {"run_id": child.run_id, "status": child.status.value,
                               "error": child.error}
        if child.definition.durable is not None:
            driver = self.store.drivers.get_driver(child.run_id)
            if (driver is not None and driver.status is StepStatus.SUCCESS
                    and self._load_output is not None):
                out["output"] = self._load_output(driver)
        else:
            out["output"] = {"run_id": child.run_id, "status": child.status.value}
        return out

    def require(self, run_id: str) -> RunRecord:
        run = self.store.runs.get_run(run_id, self.clock())
        if run is None:
            raise NotFound(f"run {run_id!r} not found (or expired)")
        return run
