"""The sweeper: a periodic reconciliation of every running run against its rows.

It re-dispatches lost messages, takes back expired leases, finishes interrupted
promotions, skips and halts, re-creates rows a crashed start left out and finishes runs
whose last step landed while no one was counting. Any number may run at once: every
repair is a conditional write."""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from orchestrator.adapters.queue import Dispatch
from orchestrator.engine import commands as do
from orchestrator.engine.attempts import Retry
from orchestrator.engine.reconcile import SweepPolicy, awaiting_message, reconcile, redispatch_grace
from orchestrator.engine.records import RunRecord, StepRecord
from orchestrator.engine.states import RunStatus, StepStatus
from orchestrator.errors import ConditionFailed, OrchestratorError
from orchestrator.services.executor import Executor, RunContext, Tally

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


class Sweeper:
    def __init__(
        self,
        executor: Executor,
        *,
        plan: Callable[[RunRecord], list[StepRecord]],
        clock: Callable[[], float] = time.time,
        rand: Callable[[], float] = random.random,
        on_queued: Callable[[RunRecord], object] | None = None,
        tasks: tuple[Callable[[], object], ...] = (),
    ) -> None:
        # `plan` rebuilds a run's step rows; `on_queued` re-examines a run waiting for
        # admission; `tasks` run once per sweep (the scheduler's tick).
        self.plan = plan
        self.on_queued = on_queued
        self.tasks = tasks
        self.adv = executor
        self.store = executor.store
        self.queues = executor.queues
        self.settings = executor.settings
        self.clock = clock
        self.rand = rand
        self._read_time = 0.0  # how long the last sweep took to read the rows

    def backlog(self) -> int | None:
        try:
            return self.queues.backlog(self.queues.dispatch_url) + self.queues.backlog(
                self.queues.timer_url
            )
        except OrchestratorError:
            return None

    def sweep(self) -> SweepReport:
        report = SweepReport()
        snapshots: list[tuple[RunRecord, list[StepRecord]]] = []
        # Ages are measured at the moment reading began, and the queues are read after
        # the rows: a message sent for a step before `now` is then either still queued
        # (counted in the backlog) or already claimed (the redispatch guard fails). Slow
        # reads must not make fresh promotions look old.
        now = self.clock()
        for task in self.tasks:
            try:
                task()
            except OrchestratorError as exc:
                log.warning("sweep task %s failed: %s", task, exc)
        for run_id in self.store.active_run_ids():
            try:
                run = self.store.get_run(run_id, now)
                if run is not None and run.status is RunStatus.QUEUED:
                    self.sweep_queued(run, now, report)
                elif run is not None and not run.status.terminal:
                    snapshots.append((run, self.store.query_steps(run_id, states_only=True)))
            except OrchestratorError as exc:
                log.warning("sweep of %s failed: %s", run_id, exc)
        read_time, self._read_time = self._read_time, max(0.0, self.clock() - now)
        old = self.settings.redispatch_after
        waiting = sum(awaiting_message(steps, now, old) for _, steps in snapshots)
        backlog = self.backlog()
        grace = redispatch_grace(
            backlog, waiting, self.settings, read_time=max(read_time, self._read_time)
        )
        log.debug("sweep: %d runs, %d awaiting > %gs, backlog %s: grace %gs",
                  len(snapshots), waiting, old, backlog, grace)
        # A promotion is repaired only once it is as overdue as a lost message: the
        # worker promoting a wide fan-out may legitimately still be at it.
        policy = SweepPolicy(redispatch_after=grace, settle=self.settings.redispatch_after,
                             step_retention=self.store.step_retention)
        for run, steps in snapshots:
            try:
                self.sweep_run(run, steps, policy, report, now)
            except OrchestratorError as exc:
                log.warning("sweep of %s failed: %s", run.run_id, exc)
        return report

    def sweep_queued(self, run: RunRecord, now: float, report: SweepReport) -> None:
        """A run waiting for admission: carry it on once it has waited a sweep interval
        past its arrival or its throttle slot (a lost timer or release costs that much)."""
        since = max(run.created_at, run.admit_at or 0.0)
        report.queued += 1
        if self.on_queued is not None and now - since >= self.settings.sweep_interval:
            self.on_queued(run)

    def sweep_run(
        self,
        run: RunRecord,
        steps: list[StepRecord],
        policy: SweepPolicy,
        report: SweepReport,
        now: float,
    ) -> None:
        run_id = run.run_id
        report.runs += 1
        planned = self.plan(run) if len(steps) < run.total else []
        cmds = reconcile(run, steps, planned, now, policy, self.rand())
        tally = Tally()
        sends: list[Dispatch] = []
        by_name = {s.step: s for s in steps}
        ctx = RunContext.of(run)
        stopping = run.kill_requested or run.halted
        for c in cmds:
            if isinstance(c, do.CreateStep):
                try:
                    self.store.create_step_if_absent(c.record)
                    report.created += 1
                    if c.record.status is StepStatus.READY:
                        sends.append(Dispatch(run_id=run_id, step=c.record.step, attempt=1))
                except ConditionFailed:
                    pass
            elif isinstance(c, do.StopInFlight) or (isinstance(c, do.SkipStep) and stopping):
                # Every skip of a stopping run is its stop pass's, carried on.
                self.adv.apply_stop(run_id, c, tally)
                report.skipped += 1
            elif isinstance(c, do.SkipStep):
                skipped = self.store.skip(run_id, c.step, c.statuses, c.reason, now)
                if skipped is not None:
                    report.skipped += 1
                    if skipped.counted:
                        tally.add(run_id)
            elif isinstance(c, do.Restamp):
                self.store.stamp_expiry(run_id, c.step, c.expires_at)
            elif isinstance(c, do.HaltRun):
                self.adv.halt(run_id, c, tally)
            elif isinstance(c, do.SkipBranch):
                self.adv.skip_branch(run_id, c, tally)
            elif isinstance(c, do.Promote):
                row = by_name[c.step]
                if (
                    self.store.promote(run_id, c.step, c.ndeps, None, now, all_deps=list(row.deps))
                    is not None
                ):
                    sends.append(Dispatch(run_id=run_id, step=c.step, attempt=1))
                    report.promoted += 1
            elif isinstance(c, do.Redispatch):
                log.debug("redispatch %s/%s attempt %d (waited %.1fs, grace %.1fs)", run_id,
                          c.step, c.attempt, now - max(by_name[c.step].ready_at or 0,
                                                       by_name[c.step].due_at or 0),
                          policy.redispatch_after)
                if self.store.touch_dispatch(run_id, c.step, c.attempt, now):
                    sends.append(Dispatch(run_id=run_id, step=c.step, attempt=c.attempt))
                    report.redispatched += 1
            elif isinstance(c, do.ExpireLease):
                row = by_name[c.step]
                if isinstance(c.decision, Retry):
                    ok = self.adv.retry(row, c.decision, tally, expired_before=now)
                else:
                    ok = self.adv.fail(row, ctx, c.decision, tally, expired_before=now)
                report.leases_expired += int(ok)
            elif isinstance(c, do.Finalize) and self.adv.finish_if_done(run_id) is not None:
                report.finished += 1
        if sends:
            log.info("run %s: sending %d dispatches (%s)", run_id, len(sends),
                     ", ".join(sorted({type(c).__name__ for c in cmds})))
            self.queues.dispatch(sends)
        self.adv.flush(tally)

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                report = self.sweep()
                if any(
                    (report.redispatched, report.leases_expired, report.promoted, report.created)
                ):
                    log.info("sweep repaired: %s", report)
            except OrchestratorError as exc:
                log.warning("sweep failed: %s", exc)
            stop.wait(self.settings.sweep_interval)
