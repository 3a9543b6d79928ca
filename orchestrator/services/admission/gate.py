"""The gate a queued run passes before it starts (README, "Flow control"): its throttle
(throttle.py), then its concurrency limits (concurrency.py).

A run of a workflow with a `throttle:`, a concurrency group or a debounce is created
`queued` and comes here; one without any starts at once and never does. `arrive` moves
a queued run as far as it can go now and is idempotent: the sweeper calls it again for
every run still queued each interval, which repairs any step a crash cut short. A run
waiting for admission is a row, never a worker thread."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field, replace
from typing import Any

from orchestrator.adapters.messages import AdmitRun
from orchestrator.adapters.queue import Queues
from orchestrator.adapters.store import Store
from orchestrator.adapters.store.control import Control
from orchestrator.engine.definition import Gate
from orchestrator.engine.records import RunRecord
from orchestrator.engine.states import RunStatus
from orchestrator.errors import Code, ConditionFailed, error_doc
from orchestrator.services.admission.concurrency import Groups
from orchestrator.services.admission.throttle import SLACK, Throttles

__all__ = ["Admission"]


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
    throttles: Throttles = field(init=False)
    groups: Groups = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "throttles", Throttles(self.control, self.clock))
        object.__setattr__(self, "groups", Groups(
            self.store, self.control, self.clock, admit_id=self._admit_id,
            refuse=self._refuse, reread=self._reread, cancel=self.cancel))

    def arrive(self, run: RunRecord) -> RunRecord:
        """Move a queued run as far as it can go now (idempotent)."""
        gate = run.gate or Gate()
        now = self.clock()
        throttle = gate.throttle
        if throttle is not None and run.admit_at is None:
            slot = self.throttles.reserve(run.workflow, throttle, now)
            if slot is None:
                return self._refuse(run, Code.THROTTLED, f"over the rate of {throttle.limit}"
                                    f" per {throttle.period:g}s for key {throttle.key!r}")
            try:
                self.store.runs.set_admit_at(run.run_id, slot)
            except ConditionFailed:
                return self._reread(run)
            run = replace(run, admit_at=slot)
        if run.admit_at is not None and run.admit_at > now + SLACK:
            # A throttle's slot, or a debounce's quiet period, still ahead: a timer.
            self.queues.timer(AdmitRun(run_id=run.run_id, due_at=run.admit_at), now)
            return run
        if not gate.group:
            return self._admit(run, {})
        return self.groups.arrive(run, gate, now)

    def recheck(self, run: RunRecord) -> RunRecord:
        """The sweeper's look at a run still queued: as `arrive`, and for one waiting
        for its limits, the repairs of `Groups.recheck`."""
        gate = run.gate or Gate()
        now = self.clock()
        if gate.group and (run.admit_at is None or run.admit_at <= now + SLACK) and \
                (gate.throttle is None or run.admit_at is not None):
            return self.groups.recheck(run, gate, now)
        return self.arrive(run)

    def rejoin(self, run: RunRecord) -> None:
        """A sweep's look at a run waiting for limits another run of the same limit was
        looked at for: only its key's place in the turns is mended."""
        gate = run.gate or Gate()
        if gate.group:
            self.groups.rejoin(run, gate, self.clock())

    def due(self, run_id: str) -> None:
        """An admission timer fired: carry the run on."""
        run = self.store.runs.get_run(run_id, self.clock())
        if run is not None and run.status is RunStatus.QUEUED:
            self.arrive(run)

    def release(self, run: RunRecord, *, looked: bool = True) -> None:
        """A run with concurrency limits finished (or was cancelled while queued): it
        lets go of them, and each lets its next run go."""
        self.groups.release(run, looked=looked)

    # ---- the queued run's moves --------------------------------------------------------

    def _admit(self, run: RunRecord, detail: dict[str, Any]) -> RunRecord:
        admitted = self._admit_id(run.run_id, detail)
        return self._reread(run) if admitted is None else admitted

    def _admit_id(self, run_id: str, detail: dict[str, Any]) -> RunRecord | None:
        """queued -> running, then launched (None: it was not queued any more)."""
        try:
            admitted = self.store.runs.admit_run(run_id, self.clock(), detail)
        except ConditionFailed:
            return None
        # Its places in line go first: a launch that fails (or dies) leaves none behind.
        self.groups.admitted(admitted)
        self.launch(admitted)
        return admitted

    def _refuse(self, run: RunRecord, code: Code, message: str) -> RunRecord:
        now = self.clock()
        try:
            return self.store.runs.finish_queued(
                run.run_id, RunStatus.SKIPPED, error_doc(code, message), now,
                now + self.ttl, created_at=run.created_at,
            )
        except ConditionFailed:
            return self._reread(run)

    def _reread(self, run: RunRecord) -> RunRecord:
        return self.store.runs.get_run(run.run_id, self.clock()) or run
