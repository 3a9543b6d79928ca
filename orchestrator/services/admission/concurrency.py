"""The concurrency stage (a group: one run at a time per group and key): a lock item
holds the admitted run's id, taken with a conditional put. Runs waiting for it are
items sorted by arrival time; only the oldest waiting run may take a free lock, so they
start in arrival order. Policy `skip` refuses a run that finds the group busy;
`cancel-running` cancels the holder (and any older waiting runs) so that the newest run
goes next. A finished run releases its lock and admits the next waiting run; a lock
whose holder has finished (or is gone) is broken by whoever finds it."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from orchestrator.adapters.store import Store
from orchestrator.adapters.store.control import Control
from orchestrator.adapters.store.control_keys import Sk, holder_key, waiting_key, waiting_sk
from orchestrator.engine.definition import Gate
from orchestrator.engine.policies import GroupPolicy
from orchestrator.engine.records import RunRecord
from orchestrator.engine.states import RunStatus
from orchestrator.errors import Code

__all__ = ["Groups", "waiting_place"]

log = logging.getLogger("orchestrator.services.admission")

Admit = Callable[[RunRecord, dict[str, Any]], RunRecord]
Refuse = Callable[[RunRecord, Code, str], RunRecord]


def waiting_place(run: RunRecord) -> Sk:
    """A waiting run's place in line: arrival order, ties broken by run id."""
    return waiting_sk(run.created_at, run.run_id)


class Groups:
    """`admit(run, detail)` starts a run the group lets go; `refuse(run, code, why)`
    ends one it refuses; `reread(run)` reads a run again; `cancel(run_id, why)` cancels
    a replaced one."""

    def __init__(self, store: Store, control: Control, clock: Callable[[], float], *,
                 admit: Admit, refuse: Refuse, reread: Callable[[RunRecord], RunRecord],
                 cancel: Callable[[str, str], object]) -> None:
        self.store = store
        self.control = control
        self.clock = clock
        self.admit = admit
        self.refuse = refuse
        self.reread = reread
        self.cancel = cancel

    def arrive(self, run: RunRecord, gate: Gate, now: float) -> RunRecord:
        gid = gate.group_id
        if gate.policy is not GroupPolicy.SKIP:
            self.control.wait_in_line(waiting_key(gid), waiting_place(run), run.run_id, now)
        if gate.policy is GroupPolicy.CANCEL_RUNNING:
            self._replace_others(run, gid)
        return self.try_admit(run)

    def try_admit(self, run: RunRecord) -> RunRecord:
        """Take the group's lock if it is free and this run is first in line."""
        gate = run.gate or Gate()
        gid = gate.group_id
        now = self.clock()
        holder = self._holder(gid, now)
        if holder == run.run_id:
            return self.admit(run, {"group": gate.group, "key": gate.key})
        if holder is not None:
            if gate.policy is GroupPolicy.SKIP:
                return self.refuse(run, Code.CONCURRENCY_BUSY,
                                   f"group {gate.group!r} key {gate.key!r} is busy"
                                   f" with run {holder}")
            return run
        if gate.policy is not GroupPolicy.SKIP:
            head = self._head(gid, now)
            if head is not None and head.run_id != run.run_id:
                self.try_admit(head)  # the head is queued and due: let it go first
                return self.reread(run)
        if not self.control.take_hold(holder_key(gid), run.run_id, now):
            if gate.policy is GroupPolicy.SKIP:
                return self.try_admit(run)  # re-read the holder to report it
            return run
        return self.admit(run, {"group": gate.group, "key": gate.key})

    def admitted(self, run: RunRecord) -> None:
        """The run was admitted: its place in line goes."""
        gid = (run.gate or Gate()).group_id
        if gid:
            self.control.delete(waiting_key(gid), waiting_place(run))

    def release(self, run: RunRecord) -> None:
        """A run of a group finished: free the lock it held and admit the next one."""
        gate = run.gate or Gate()
        if not gate.group:
            return
        gid = gate.group_id
        now = self.clock()
        self.control.let_go(holder_key(gid), run.run_id)
        # Its waiting entry went when it was admitted (or _head drops it as finished).
        head = self._head(gid, now)
        if head is not None and head.status is RunStatus.QUEUED:
            self.try_admit(head)

    def _holder(self, gid: str, now: float) -> str | None:
        """The run holding the group, after breaking a lock whose holder has finished."""
        holder = self.control.group_holder(holder_key(gid), now)
        if holder is None:
            return None
        run = self.store.runs.get_run(holder, now)
        if run is None or run.status.terminal:
            self.control.let_go(holder_key(gid), holder)
            log.info("group %s: broke the lock of finished run %s", gid, holder)
            return self._holder(gid, now)  # None, unless another run took it meanwhile
        return holder

    def _head(self, gid: str, now: float) -> RunRecord | None:
        """The oldest waiting run still queued (finished ones are removed on the way)."""
        while True:
            waiting = self.control.waiting_runs(waiting_key(gid), now, limit=10)
            if not waiting:
                return None
            for w in waiting:
                run = self.store.runs.get_run(w.run_id, now)
                if run is not None and run.status is RunStatus.QUEUED:
                    return run
                self.control.delete(waiting_key(gid), w.sk)

    def _replace_others(self, run: RunRecord, gid: str) -> None:
        now = self.clock()
        holder = self._holder(gid, now)
        reason = f"replaced by run {run.run_id}"
        if holder is not None and holder != run.run_id:
            self.cancel(holder, reason)
        for w in self.control.waiting_runs(waiting_key(gid), now, limit=100):
            if w.run_id != run.run_id and w.sk < waiting_place(run):
                self.cancel(w.run_id, reason)
