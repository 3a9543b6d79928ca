"""The sweeper: a periodic reconciliation of the runs whose rows say they need a look.

Every write stamps its row's wake (engine/wakes.py): when the row must have moved on.
A pass takes each wake shard that no other sweeper holds, reads the wakes that passed
since the shard's cursor, and reconciles just those runs: it re-dispatches lost
messages, takes back expired leases, finishes interrupted promotions, skips and halts,
re-creates rows a crashed start left out, releases a finished run's concurrency group
and finishes runs whose last step landed while no one was counting. Healthy runs cost a
pass nothing, and several sweepers divide the shards between them rather than repeat
each other's work. Every repair is a conditional write."""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from orchestrator.adapters.metering import metered
from orchestrator.adapters.queue import Dispatch
from orchestrator.adapters.store.control import Control
from orchestrator.adapters.store.tables import WakeKey
from orchestrator.engine import commands as do
from orchestrator.engine.attempts import Retry
from orchestrator.engine.context import RunContext
from orchestrator.engine.reconcile import SweepPolicy, reconcile, settle_due
from orchestrator.engine.records import RunRecord, StepRecord
from orchestrator.engine.states import RunStatus, StepStatus
from orchestrator.engine.wakes import WAKE_SHARDS
from orchestrator.errors import ConditionFailed, OrchestratorError
from orchestrator.services.execution.executor import Executor
from orchestrator.services.execution.tally import Tally
from orchestrator.services.health.heartbeat import Heartbeat, process_id

__all__ = ["SweepReport", "Sweeper"]

log = logging.getLogger("orchestrator.sweeper")


@dataclass
class SweepReport:
    runs: int = 0
    redispatched: int = 0
    leases_expired: int = 0
    promoted: int = 0
    skipped: int = 0
    created: int = 0
    finished: int = 0
    queued: int = 0
    # Of those, the ones whose group was examined already in this pass (through the
    # group's first waiting run: a queued run is only ever let go in arrival order).
    queued_same_group: int = 0
    # Shards swept by this pass, and left to another sweeper holding them.
    shards: int = 0
    shards_busy: int = 0
    # Wakes read (rows that might have needed a look) and runs re-armed for later.
    woken: int = 0
    rearmed: int = 0
    # Runs copied from another stack it came upon and left alone (`runs pull`).
    imported: int = 0


class Sweeper:
    def __init__(
        self,
        executor: Executor,
        *,
        control: Control,
        plan: Callable[[RunRecord], list[StepRecord]],
        clock: Callable[[], float] = time.time,
        rand: Callable[[], float] = random.random,
        on_queued: Callable[[RunRecord], object] | None = None,
        on_finished: Callable[[RunRecord], object] | None = None,
        on_waiting: Callable[[RunRecord], object] | None = None,
        tasks: tuple[Callable[[], object], ...] = (),
        sweeper_id: str | None = None,
    ) -> None:
        # `plan` rebuilds a run's step rows; `on_queued` re-examines a run waiting for
        # admission; `on_finished` releases what a finished run held (its group);
        # `on_waiting` mends a waiting run's key in its limit's turns; `tasks` run once
        # per sweep (the scheduler's tick).
        self.plan = plan
        self.on_queued = on_queued
        self.on_waiting = on_waiting
        # The turns keys of each limit mended so far in this pass.
        self._keys: set[str] = set()
        # Whether this is the full sweep (the backstop: it mends what the others leave).
        self._full = False
        # The concurrency groups examined so far in this pass (each once, whichever
        # shard its runs are in); a pass starts with none.
        self._groups: set[str] = set()
        self.on_finished = on_finished
        self.tasks = tasks
        self.executor = executor
        self.store = executor.store
        self.queues = executor.queues
        self.settings = executor.settings
        self.control = control
        self.clock = clock
        self.rand = rand
        self.id = sweeper_id or process_id()
        self._next_full_ask = float("-inf")
        # Its passes and what they repaired since it started, told by its heartbeat.
        self.handled: dict[str, int] = {}
        self.heartbeat = Heartbeat(self.store, "sweeper", self.id,
                                   every=self.settings.heartbeat_interval, clock=clock,
                                   handled=lambda: dict(self.handled))

    @property
    def policy(self) -> SweepPolicy:
        # A promotion is repaired only once it is as overdue as a lost message: the
        # worker promoting a wide fan-out may legitimately still be at it.
        return SweepPolicy(redispatch_after=self.settings.redispatch_after,
                           settle=self.settings.redispatch_after,
                           step_retention=self.store.step_retention)

    def sweep(self, *, since: float | None = None) -> SweepReport:
        """One pass over every wake shard no other sweeper holds, and, when its turn
        comes, over every running run (the backstop). `since` reads the wakes from that
        time on instead of from each shard's cursors (0: every row whose wake passed,
        as after restoring tables or correcting a clock that ran ahead)."""
        report = SweepReport()
        self._groups = set()
        self._keys = set()
        now = self.clock()
        for task in self.tasks:
            try:
                task()
            except OrchestratorError as exc:
                log.warning("sweep task %s failed: %s", task, exc)
        # A sweeper that dies holding a shard loses it after three intervals; one whose
        # pass is slower than that may find another sweeper on it too (harmless: every
        # repair is a conditional write).
        hold = max(1.0, 3 * self.settings.sweep_interval)
        shards = list(range(WAKE_SHARDS))
        random.shuffle(shards)
        for shard in shards:
            try:
                cursors = self.control.take_shard(shard, self.id, now + hold, now)
            except OrchestratorError as exc:
                log.warning("sweep: shard %d: %s", shard, exc)
                continue
            if cursors is None:
                report.shards_busy += 1
                continue
            report.shards += 1
            done: tuple[float, float] | None = None
            try:
                start = cursors if since is None else (since, since)
                ahead = self.sweep_shard(shard, start, now, report)
                done = (max(ahead[0], cursors[0]), max(ahead[1], cursors[1]))
            except OrchestratorError as exc:
                log.warning("sweep: shard %d failed: %s", shard, exc)
            finally:
                try:
                    self.control.release_shard(shard, self.id, done)
                except OrchestratorError as exc:
                    log.warning("sweep: shard %d release failed: %s", shard, exc)
        # Whose turn the full sweep is, asked a few times per period (not every pass).
        every = self.settings.full_sweep_every
        if now >= self._next_full_ask:
            self._next_full_ask = now + every / 4
            try:
                if self.control.take_full_sweep(self.id, now, every):
                    self._full = True
                    try:
                        self.sweep_runs(self.store.runs.active_run_ids(), set(), now, report)
                    finally:
                        self._full = False
            except OrchestratorError as exc:
                log.warning("sweep: the full sweep failed: %s", exc)
        self._tell(report)
        return report

    def _tell(self, report: SweepReport) -> None:
        """Add a pass and what it repaired to what the heartbeat tells."""
        handled = dict(self.handled)
        handled["passes"] = handled.get("passes", 0) + 1
        for what in ("redispatched", "leases_expired", "promoted", "created", "finished"):
            if getattr(report, what):
                handled[what] = handled.get(what, 0) + getattr(report, what)
        self.handled = handled  # replaced whole: the heartbeat's thread reads it

    def sweep_shard(
        self, shard: int, cursors: tuple[float, float], now: float, report: SweepReport
    ) -> tuple[float, float]:
        """Reconcile the runs with a wake in (cursor, now - wake_lag], and again those
        with one in (trail, now - wake_late]; the new cursors.

        The lag covers the index's propagation and the writers' clock skew: a wake
        written as `now` by another process is read a little later, never skipped. The
        second, late read covers a write that landed after its own wake (its process
        stalled between taking the time and sending it); the full sweep, anything later."""
        windows = [(cursors[0], now - self.settings.wake_lag),
                   (cursors[1], now - self.settings.wake_late)]
        # One query per table covers both windows (the index gives each key's wake), at
        # the price of reading the keys between them again: bytes, not requests.
        lo, hi = min(w[0] for w in windows), max(w[1] for w in windows)

        def due(key: WakeKey) -> bool:
            return any(after < key.wake_at <= upto for after, upto in windows)

        run_keys: list[WakeKey] = []
        step_keys: list[WakeKey] = []
        if hi > lo:
            names = self.store.names
            run_keys = [k for k in self.store.runs.woken(names.runs_table, shard, lo, hi)
                        if due(k)]
            step_keys = [k for k in self.store.steps.woken(names.steps_table, shard, lo, hi)
                         if due(k)]
        report.woken += len(run_keys) + len(step_keys)
        ids = list(dict.fromkeys(k.run_id for k in run_keys + step_keys))
        self.sweep_runs(ids, {k.run_id for k in run_keys}, now, report)
        return (max(cursors[0], windows[0][1]), max(cursors[1], windows[1][1]))

    def sweep_runs(
        self, ids: list[str], at_run_level: set[str], now: float, report: SweepReport
    ) -> None:
        """Reconcile these runs: carry queued ones on, release what finished ones held
        (when their own wake came), repair running ones and wake them again when a
        repair left for later falls due."""
        if not ids:
            return
        runs = self.store.runs.get_runs(ids, now)
        policy = self.policy
        for run_id in ids:
            run = runs.get(run_id)
            if run is None:
                continue
            try:
                with metered(run_id):  # its repairs' requests are the run's (metering.py)
                    self._sweep_one(run, at_run_level, now, report, policy)
            except OrchestratorError as exc:
                log.warning("sweep of %s failed: %s", run_id, exc)

    def _sweep_one(self, run: RunRecord, at_run_level: set[str], now: float,
                   report: SweepReport, policy: SweepPolicy) -> None:
        run_id = run.run_id
        if run.imported is not None:
            # A copy of another stack's run (`runs pull`): nothing here moves it on, or
            # releases what it held there (its import gave it no wake; this is the
            # guard should a row of it ever come up).
            report.imported += 1
            return
        if run.status is RunStatus.QUEUED:
            self.sweep_queued(run, now, report)
        elif run.status.terminal:
            if run_id in at_run_level and self.on_finished is not None:
                self.on_finished(run)  # a release lost with its process
        else:
            ctx = RunContext.of(run)
            steps = ctx.rows(self.store.steps.query_steps(run_id, states_only=True))
            self.sweep_run(run, steps, policy, report, now, ctx)
            due = settle_due(run, steps, now, policy)
            if due is not None and self.store.runs.arm_run(run_id, due, now):
                report.rearmed += 1

    def sweep_queued(self, run: RunRecord, now: float, report: SweepReport) -> None:
        """A run waiting for admission `settle` past its arrival or its throttle slot
        (its wake): carry it on, in case its start or its timer was lost. A younger one
        (the full sweep sees every run) is left to its start: two arrivals at once would
        each take a throttle slot. One waiting for a busy group is admitted when the
        holder finishes (`on_finished`).

        A group is examined once a pass (`_groups`), whichever of its waiting runs comes
        first (admission lets its next run go whichever it is); the others' places in
        line are mended (`on_waiting`: a write and a read; in the full sweep once a
        turns key, `_keys`), so the
        work of a pass grows with the number of groups, not of runs waiting in them."""
        report.queued += 1
        since = max(run.created_at, run.admit_at or 0.0)
        if self.on_queued is None or now - since < self.policy.settle:
            return
        gate = run.gate
        gid = gate.group_id if gate is not None else ""
        # Waiting for its group: not for a throttle slot it has yet to take or reach.
        if gate is not None and gid and (gate.throttle is None or run.admit_at is not None) \
                and (run.admit_at or 0.0) <= now:
            if gid in self._groups:
                report.queued_same_group += 1
                # Its places in line are mended (a start that died before writing them):
                # at its own wake, and once a pass a key in the full sweep.
                key = f"{gid}#{gate.limits[0].turns}"
                if self.on_waiting is not None and not (self._full and key in self._keys):
                    self._keys.add(key)
                    self.on_waiting(run)
                return
            self._groups.add(gid)
            self._keys.add(f"{gid}#{gate.limits[0].turns}")
        self.on_queued(run)

    def sweep_run(
        self,
        run: RunRecord,
        steps: list[StepRecord],
        policy: SweepPolicy,
        report: SweepReport,
        now: float,
        ctx: RunContext | None = None,
    ) -> None:
        run_id = run.run_id
        report.runs += 1
        ctx = ctx or RunContext.of(run)
        planned = self.plan(run) if len(steps) < run.total else []
        cmds = reconcile(run, steps, planned, now, policy, self.rand())
        tally = Tally()
        sends: list[Dispatch] = []
        by_name = {s.step: s for s in steps}
        stopping = run.kill_requested or run.halted
        for c in cmds:
            if isinstance(c, do.CreateStep):
                try:
                    self.store.steps.create_step_if_absent(c.record)
                    report.created += 1
                    if c.record.status is StepStatus.READY:
                        sends.append(Dispatch(run_id=run_id, step=c.record.step, attempt=1))
                except ConditionFailed:
                    pass
            elif isinstance(c, do.StopInFlight) or (isinstance(c, do.SkipStep) and stopping):
                # Every skip of a stopping run is its stop pass's, carried on.
                self.executor.apply_stop(run_id, c, tally, ctx)
                report.skipped += 1
            elif isinstance(c, do.SkipStep):
                skipped = self.store.steps.skip(run_id, c.step, c.statuses, c.reason, now,
                                                plan=ctx.plan(c.step))
                if skipped is not None:
                    report.skipped += 1
                    if skipped.counted:
                        tally.add(run_id)
            elif isinstance(c, do.Restamp):
                self.store.steps.stamp_expiry(run_id, c.step, c.expires_at)
            elif isinstance(c, do.HaltRun):
                self.executor.halt(run_id, c, tally, ctx)
            elif isinstance(c, do.SkipBranch):
                self.executor.skip_branch(run_id, c, tally, ctx)
            elif isinstance(c, do.Promote):
                row = by_name[c.step]
                if (
                    self.store.steps.promote(run_id, c.step, c.ndeps, None, now,
                                             all_deps=list(row.deps), plan=ctx.plan(c.step))
                    is not None
                ):
                    sends.append(Dispatch(run_id=run_id, step=c.step, attempt=1))
                    report.promoted += 1
            elif isinstance(c, do.Redispatch):
                log.debug("redispatch %s/%s attempt %d (waited %.1fs, resent %d times)",
                          run_id, c.step, c.attempt,
                          now - max(by_name[c.step].ready_at or 0, by_name[c.step].due_at or 0),
                          by_name[c.step].resends)
                # A root its start left out is created by this write (as `steps` shows
                # it: ready since its run started).
                root = by_name[c.step] if ctx.plan(c.step) is not None else None
                if self.store.steps.touch_dispatch(run_id, c.step, c.attempt, now,
                                                   resends=by_name[c.step].resends + 1,
                                                   plan=root):
                    sends.append(Dispatch(run_id=run_id, step=c.step, attempt=c.attempt))
                    report.redispatched += 1
            elif isinstance(c, do.ExpireLease):
                row = by_name[c.step]
                if isinstance(c.decision, Retry):
                    ok = self.executor.retry(row, c.decision, tally, expired_before=now)
                else:
                    ok = self.executor.fail(row, ctx, c.decision, tally, expired_before=now)
                report.leases_expired += int(ok)
            elif isinstance(c, do.Finalize) and self.executor.finish_if_done(run_id) is not None:
                report.finished += 1
        if sends:
            log.info("run %s: sending %d dispatches (%s)", run_id, len(sends),
                     ", ".join(sorted({type(c).__name__ for c in cmds})))
            self.queues.dispatch(sends)
        self.executor.flush(tally)
        if any(isinstance(c, do.HaltRun) for c in cmds) \
                and self.executor.finish_if_done(run_id) is not None:
            # A halt this sweep made may have found nothing left to stop (its first
            # halter died after its stop pass, before its counts landed): no later wake
            # comes before the full sweep, so the run ends here.
            report.finished += 1

    def run(self, stop: threading.Event) -> None:
        # Passes start every interval (not an interval after the last one ended), so a
        # wake waits at most the interval plus the lag for its pass, however long passes take.
        beating = self.heartbeat.start(stop)
        try:
            self._passes(stop)
        finally:
            beating.join(timeout=5.0)
            self.heartbeat.stopped()

    def _passes(self, stop: threading.Event) -> None:
        while not stop.is_set():
            started = time.monotonic()
            try:
                report = self.sweep()
                if any(
                    (report.redispatched, report.leases_expired, report.promoted, report.created)
                ):
                    log.info("sweep repaired: %s", report)
            except OrchestratorError as exc:
                log.warning("sweep failed: %s", exc)
            stop.wait(max(0.0, started + self.settings.sweep_interval - time.monotonic()))
