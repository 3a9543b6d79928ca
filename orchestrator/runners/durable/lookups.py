"""What a durable run's wait needs looked up or done before it can resolve: a signal
taken, an event registered and found, a hook created, a child started or read, a
parallel's aggregate opened or read, an approval's gate, a lock taken or released, a
state cell's operation. Each answers what it found (None: nothing yet)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from functions.sdk.protocol import WaitKind
from orchestrator.engine.context import RunContext
from orchestrator.engine.durable_moves import Look
from orchestrator.engine.durable_scopes import JournalView
from orchestrator.engine.durable_waits import Committed, Found, Held, Lookup, Refused, Waiting
from orchestrator.engine.records import StepRecord
from orchestrator.errors import Code, InvalidName, NotFound, UsageError, ValueTooLarge
from orchestrator.runners.durable.branches import Branches
from orchestrator.services.coordination.approvals import Approvals, gate_outcome
from orchestrator.services.coordination.locks import Locks
from orchestrator.services.coordination.state_cells import StateService
from orchestrator.services.durable.children import Children, child_run_id
from orchestrator.services.durable.event_waits import EventWaits
from orchestrator.services.durable.hooks import Hooks
from orchestrator.services.execution.executor import Executor
from orchestrator.services.values import check_value, checked_name

__all__ = ["Lookups"]


class Lookups:
    def __init__(self, executor: Executor, branches: Branches, *,
                 clock: Callable[[], float], events: EventWaits | None = None,
                 hooks: Hooks | None = None, children: Children | None = None,
                 approvals: Approvals | None = None, state: StateService | None = None,
                 locks: Locks | None = None) -> None:
        self.executor = executor
        self.store = executor.store
        self.branches = branches
        self.clock = clock
        self.events = events
        self.hooks = hooks
        self.children = children
        self.approvals = approvals
        self.state = state
        self.locks = locks

    def look(self, look: Look, row: StepRecord, ctx: RunContext, waiting: Waiting,
              view: JournalView, now: float, carried: dict[str, Waiting]) -> Lookup:
        """Carry out one lookup `look_for` asked for: what it found (engine/durable_waits:
        `Found`, `Held`, `Committed`, `Refused`; None: nothing yet)."""
        try:
            return self._lookup(look, row, ctx, waiting, view, now, carried)
        except (InvalidName, ValueTooLarge) as exc:
            return Refused(exc.to_dict())

    def _lookup(self, look: Look, row: StepRecord, ctx: RunContext, waiting: Waiting,
                view: JournalView, now: float, carried: dict[str, Waiting]) -> Lookup:
        run_id = row.run_id
        d = waiting.detail
        if look is Look.TAKE_SIGNAL:
            name = checked_name("signal name", waiting.name)
            return _found(self.store.signals.take_signal(run_id, name,
                                                         f"{waiting.scope}#{waiting.pos}"))
        if look is Look.REGISTER_EVENT and self.events is not None:
            checked_name("event name", str(d["event"]), event=True)
            # Register first, then look: an event landing in between finds the
            # registration and pokes this run.
            self.events.register(run_id, waiting)
        elif look is Look.FIND_EVENT and self.events is not None:
            checked_name("event name", str(d["event"]), event=True)
            return _found(self.events.find(waiting))
        elif look is Look.CREATE_HOOK and self.hooks is not None:
            return _found(self.hooks.create(run_id, waiting.id, str(d["signal"]),
                                            d.get("metadata"), d.get("ttl")))
        elif look in (Look.START_CHILD, Look.CHILD) and self.children is not None:
            if look is Look.START_CHILD:
                check_value(f"input (of child run of {d.get('workflow')!r})", d.get("input"))
                try:
                    return _found(self._child(row, waiting, start=True))
                except NotFound as exc:  # no such workflow (or no backend can run it):
                    return Refused(exc.to_dict())  # the workflow learns where it asked
            return _found(self._child(row, waiting, start=False))
        elif look is Look.OPEN_PARALLEL:
            self.branches.open_parallel(row, ctx, waiting, view, now, carried)
        elif look is Look.PARALLEL:
            return _found(self.store.drivers.get_parallel(run_id, waiting.scope, waiting.pos,
                                                          now))
        elif look is Look.APPROVAL and self.approvals is not None:
            return _found(gate_outcome(self.approvals, run_id, ctx.workflow, waiting, now))
        elif look is Look.LOCK and self.locks is not None:
            key = Locks.checked(str(d.get("key")))
            holder = f"{run_id}#{waiting.scope or 'top'}"
            if d.get("action") == "release":
                self.locks.release(key, holder, run_id)
                return Held()
            return Held() if self.locks.acquire(key, holder, run_id, row.step,
                                                waiting.since) else None
        elif look is Look.STATE and self.state is not None:
            try:
                return Committed(self.state.perform(run_id, waiting, now))
            except UsageError as exc:  # a name or value the orchestrator refuses
                return Refused(exc.to_dict())
        return None

    def _child(self, row: StepRecord, waiting: Waiting, start: bool) -> dict[str, Any] | None:
        """Start the child of a call or spawn (`start`: once, idempotent); a spawn's child
        once started, a call's once ended."""
        assert self.children is not None
        d = waiting.detail
        child_id = child_run_id(row.run_id, waiting.id)
        if start:
            self.children.start(row.run_id, row.step, waiting.place(), str(d["workflow"]),
                                d.get("input"), waits=waiting.kind is WaitKind.CALL,
                                notify=d.get("notify"))
            if waiting.kind is WaitKind.SPAWN:
                return {"run_id": child_id}
            return None
        child = self.store.runs.get_run(child_id, self.clock())
        if child is None:
            return {"run_id": child_id, "status": "failed",
                    "error": {"code": Code.RUN_MISSING, "message": "the child run is gone"}}
        if not child.status.terminal:
            return None
        return self.children.outcome(child)


def _found(doc: Mapping[str, Any] | None) -> Found | None:
    return None if doc is None else Found(doc)
