"""Admission: when a queued run may start (README, "Flow control").

A run of a workflow with a `throttle:` or a concurrency group is created `queued` and
admitted here; one without either starts at once and never comes here.

- **Throttle** (`limit` per `period`, per key, `burst`): a generic cell-rate budget
  kept in one control item per key (`tat`, the theoretical arrival time), moved forward
  only by a conditional write that names the value it read. Each arrival takes the next
  slot, so queued runs start evenly spaced, `period / limit` apart; `burst` lets that
  many start together after a quiet spell. Policy `drop` refuses (status `skipped`) a
  run that would have to wait. A slot in the future is a timer message.
- **Concurrency group** (one run at a time per group and key): a lock item holds the
  admitted run's id, taken with a conditional put. Runs waiting for it are items sorted
  by arrival time; only the oldest waiting run may take a free lock, so they start in
  arrival order. Policy `skip` refuses a run that finds the group busy; `cancel-running`
  cancels the holder (and any older waiting runs) so that the newest run goes next.
- A finished run releases its lock and admits the next waiting run. Releases are an
  optimisation: the sweeper re-examines every queued run each interval, and a lock
  whose holder has finished (or is gone) is broken by whoever finds it. A run waiting
  for admission is a row, never a worker thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, replace
from typing import Any

from orchestrator.adapters.messages import AdmitRun
from orchestrator.adapters.queue import Queues
from orchestrator.adapters.store import Store
from orchestrator.adapters.store.control import (
    Control,
    Sk,
    lock_key,
    throttle_key,
    waiting_key,
    waiting_sk,
)
from orchestrator.engine.admission import throttle_slot
from orchestrator.engine.definition import Gate, Throttle
from orchestrator.engine.policies import GroupPolicy, ThrottlePolicy
from orchestrator.engine.records import RunRecord
from orchestrator.engine.states import RunStatus
from orchestrator.errors import Code, ConditionFailed, StoreError, error_doc

__all__ = ["Admission"]

log = logging.getLogger(__name__)

# A slot this close to now starts at once rather than via a timer.
SLACK = 0.05


@dataclass(frozen=True)
class Admission:
    """`launch` starts an admitted run; `cancel` cancels a replaced one (cancel-running);
    `ttl` is how long a run refused admission is kept."""

    store: Store
    control: Control
    queues: Queues
    clock: Callable[[], float]
    _: KW_ONLY
    launch: Callable[[RunRecord], None]
    cancel: Callable[[str, str], object]
    ttl: float

    # ---- arrival and repair ------------------------------------------------------------

    def arrive(self, run: RunRecord) -> RunRecord:
        """Move a queued run as far as it can go now. Idempotent: the sweeper calls it
        again for every run still queued, which repairs any step a crash cut short."""
        gate = run.gate or Gate()
        now = self.clock()
        throttle = gate.throttle
        if throttle is not None and run.admit_at is None:
            slot = self.reserve(run.workflow, throttle, now)
            if slot is None:
                return self._refuse(run, Code.THROTTLED, f"over the rate of {throttle.limit}"
                                    f" per {throttle.period:g}s for key {throttle.key!r}")
            try:
                self.store.runs.set_admit_at(run.run_id, slot)
            except ConditionFailed:
                return self._reread(run)
            run = replace(run, admit_at=slot)
        if run.admit_at is not None and run.admit_at > now + SLACK:
            self.queues.timer(
                AdmitRun(run_id=run.run_id, due_at=run.admit_at),
                now,
            )
            return run
        if not gate.group:
            return self._admit(run, {})
        return self._arrive_group(run, gate, now)

    def _arrive_group(self, run: RunRecord, gate: Gate, now: float) -> RunRecord:
        gid = gate.group_id
        if gate.policy is not GroupPolicy.SKIP:
            self.control.wait_in_line(waiting_key(gid), _waiting_sk(run), run.run_id, now)
        if gate.policy is GroupPolicy.CANCEL_RUNNING:
            self._replace_others(run, gid)
        return self.try_admit(run)

    def due(self, run_id: str) -> None:
        """A throttle timer fired: carry the run on."""
        run = self.store.runs.get_run(run_id, self.clock())
        if run is not None and run.status is RunStatus.QUEUED:
            self.arrive(run)

    def try_admit(self, run: RunRecord) -> RunRecord:
        """Take the group's lock if it is free and this run is first in line."""
        gate = run.gate or Gate()
        gid = gate.group_id
        now = self.clock()
        holder = self._holder(gid, now)
        if holder == run.run_id:
            return self._admit(run, {"group": gate.group, "key": gate.key})
        if holder is not None:
            if gate.policy is GroupPolicy.SKIP:
                return self._refuse(run, Code.CONCURRENCY_BUSY,
                                    f"group {gate.group!r} key {gate.key!r} is busy"
                                    f" with run {holder}")
            return run
        if gate.policy is not GroupPolicy.SKIP:
            head = self._head(gid, now)
            if head is not None and head.run_id != run.run_id:
                self.try_admit(head)  # the head is queued and due: let it go first
                return self._reread(run)
        if not self.control.take_lock(lock_key(gid), run.run_id, now):
            if gate.policy is GroupPolicy.SKIP:
                return self.try_admit(run)  # re-read the holder to report it
            return run
        return self._admit(run, {"group": gate.group, "key": gate.key})

    # ---- release -----------------------------------------------------------------------

    def release(self, run: RunRecord) -> None:
        """A run of a group finished: free the lock it held and admit the next one."""
        gate = run.gate or Gate()
        if not gate.group:
            return
        gid = gate.group_id
        now = self.clock()
        self.control.release_lock(lock_key(gid), run.run_id)
        # Its waiting entry went when it was admitted (or _head drops it as finished).
        head = self._head(gid, now)
        if head is not None and head.status is RunStatus.QUEUED:
            self.try_admit(head)

    # ---- pieces ------------------------------------------------------------------------

    def reserve(self, workflow: str, spec: Throttle, now: float) -> float | None:
        """Take the next throttle slot for this key (None: policy drop and none free)."""
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

    def _holder(self, gid: str, now: float) -> str | None:
        """The run holding the group, after breaking a lock whose holder has finished."""
        holder = self.control.lock_holder(lock_key(gid), now)
        if holder is None:
            return None
        run = self.store.runs.get_run(holder, now)
        if run is None or run.status.terminal:
            self.control.release_lock(lock_key(gid), holder)
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
            if w.run_id != run.run_id and w.sk < _waiting_sk(run):
                self.cancel(w.run_id, reason)

    def _admit(self, run: RunRecord, detail: dict[str, Any]) -> RunRecord:
        try:
            admitted = self.store.runs.admit_run(run.run_id, self.clock(), detail)
        except ConditionFailed:
            return self._reread(run)
        self.launch(admitted)
        gid = (run.gate or Gate()).group_id
        if gid:
            self.control.delete(waiting_key(gid), _waiting_sk(run))
        return admitted

    def _refuse(self, run: RunRecord, code: Code, message: str) -> RunRecord:
        now = self.clock()
        try:
            return self.store.runs.finish_queued(
                run.run_id, RunStatus.SKIPPED, error_doc(code, message), now,
                now + self.ttl,
            )
        except ConditionFailed:
            return self._reread(run)

    def _reread(self, run: RunRecord) -> RunRecord:
        return self.store.runs.get_run(run.run_id, self.clock()) or run


def _waiting_sk(run: RunRecord) -> Sk:
    """A waiting run's place in line: arrival order, ties broken by run id."""
    return waiting_sk(run.created_at, run.run_id)
