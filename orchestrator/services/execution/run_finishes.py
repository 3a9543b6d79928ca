"""Finishing runs: the terminal counts folded into the run's counter (`flush`), the
finish verified against the rows once the counter says none are left
(`finish_if_done`), and a run whose one sink just succeeded finished without reading
(`end_with`). The decisions are engine/transitions.py's."""

from __future__ import annotations

import json
import logging
from typing import Any

from orchestrator.adapters.metering import metered
from orchestrator.engine.commands import Finish
from orchestrator.engine.context import RunContext
from orchestrator.engine.definition import DRIVER
from orchestrator.engine.policies import OnFailure
from orchestrator.engine.records import RunRecord, StepRecord
from orchestrator.engine.states import RunStatus, StepStatus
from orchestrator.engine.transitions import (
    RESTAMP_AFTER,
    finish,
)
from orchestrator.errors import ConditionFailed, OrchestratorError
from orchestrator.services.execution.executor_base import ExecutorBase
from orchestrator.services.execution.tally import Tally

__all__ = ["FINISH_TRIES", "RunFinishes"]

# The executor's logger, as before the executor was split.
log = logging.getLogger("orchestrator.services.execution.executor")

# Reads of a finishing run's rows, when steps keep landing between a read and its flags.
FINISH_TRIES = 3
# A succeeding run's output is its sinks' outputs (read for its search terms) when it has
# at most this many.
OUTPUT_SINKS = 4


class RunFinishes(ExecutorBase):
    """Counting a run's terminal steps and finishing it."""

    def end_with(self, done: StepRecord, ctx: RunContext, output_json: str | None = None) -> bool:
        """Finish a run whose one sink just succeeded (ctx.ends_with): every other step
        has, so no count, read or query is needed, only the finish, guarded by the run
        still running with no cancel or halt flagged. False when that guard fails or the
        run is too old for its rows' expiry to be taken on trust: the step is counted as
        usual, and the verified finish decides. A process that dies between the two
        writes leaves the step's wake for the sweeper's finish."""
        now = self.clock()
        ttl = self.settings.ttl_success
        if now - ctx.started_at > min(RESTAMP_AFTER, ttl / 10):
            return False
        # Every row stamped `finished + retention` at its terminal write, after the
        # start: the run expires no later than its first row (see transitions.finish).
        expires = min(now + ttl, ctx.started_at + self.store.step_retention)
        try:
            self.store.runs.finish_run(done.run_id, RunStatus.SUCCESS, None, now, expires,
                                       unstopped=True, wake=ctx.follow_ups,
                                       created_at=ctx.created_at or None,
                                       output=None if output_json is None
                                       else json.loads(output_json),
                                       workflow=ctx.workflow)
        except ConditionFailed:
            return False
        return True

    def flush(self, tally: Tally) -> None:
        counts, tally.counts = tally.counts, {}
        for run_id, n in counts.items():
            with metered(run_id):  # the run's requests (adapters/metering.py)
                left = self.store.runs.decrement_remaining(run_id, n, self.clock())
                if left is not None and left <= 0:
                    self.finish_if_done(run_id)

    def finish_if_done(self, run_id: str) -> RunStatus | None:
        """Verify against the rows (the counter is only a hint) and terminalize."""
        for _ in range(FINISH_TRIES):
            run = self.store.runs.get_run(run_id, self.clock())
            if run is None or run.status.terminal:
                return None
            # States are all a finish reads, but for a failed step's error (shown on the
            # run): the rows' payloads, outputs and histories are left out unless one failed.
            ctx = RunContext.of(run)
            steps = ctx.rows(self.store.steps.query_steps(run_id, states_only=True))
            if any(s.status is StepStatus.FAILED for s in steps):
                steps = ctx.rows(self.store.steps.query_steps(run_id))
            # The finish's time is taken after its reads: a process that stalls between
            # the two must not stamp the run finished before a step the rows show started.
            now = self.clock()
            done = finish(
                run, steps, now, ttl_success=self.settings.ttl_success,
                ttl_failed=self.settings.ttl_failed,
            )
            if done is not None:
                return self._finish(run, done, now)
            # Every sink is done but a failing, halted or killed run still has steps in
            # flight (their branches below were skipped). Make those steps count too,
            # so the last of them to land finishes the run.
            moving = [s for s in steps if not s.status.terminal]
            # A row its start left out is created as the run shows it (a root ready
            # since the launch), not as bare planned.
            flagged = sum(self.store.steps.flag_counted(
                run_id, s.step, plan=s if ctx.plan(s.step) is not None else None)
                for s in moving)
            if flagged:
                self.store.runs.decrement_remaining(run_id, -flagged, now)
            if flagged == len(moving):
                return None
            # A step landed between the read and its flag, uncounted: it may have been
            # the last one, and nobody else would look. Read again.
        return None

    def _output(self, run: RunRecord, done: Finish) -> Any:
        """What a succeeding run returned, for its search terms (run_search.py): a
        durable run's driver's output, a workflow's sink's (each sink's by name, of up
        to OUTPUT_SINKS sinks). One read a sink; an output kept in the blob store (over
        the inline limit) is not read, nor indexed."""
        if done.status is not RunStatus.SUCCESS:
            return None
        sinks = sorted(run.definition.sinks)
        if run.definition.durable is not None:
            sinks = [DRIVER]
        if not sinks or len(sinks) > OUTPUT_SINKS:
            return None
        outputs = {}
        for name in sinks:
            row = self.store.steps.get_step(run.run_id, name)
            if row is not None and row.status is StepStatus.SUCCESS and row.output_ref is None:
                outputs[name] = row.output
        return next(iter(outputs.values()), None) if len(sinks) == 1 else outputs

    def _finish(self, run: RunRecord, done: Finish, now: float) -> RunStatus | None:
        run_id = run.run_id
        # Step rows stamped their own expiry when they finished; only rows that would
        # expire before their run are written again (see engine.transitions.finish).
        for name in done.restamp:
            self.store.steps.stamp_expiry(run_id, name, done.expires_at)
        # A halting run whose in-flight steps all landed before its halter recorded the
        # halt (its stop pass was slow) records the halt in its finish: one history
        # either way.
        halted_too = (done.status is RunStatus.FAILED and run.on_failure is OnFailure.HALT
                      and not run.halted and not run.kill_requested)
        ended = {"created_at": run.created_at, "output": self._output(run, done),
                 "workflow": run.workflow}
        try:
            self.store.runs.finish_run(run_id, done.status, done.error, now, done.expires_at,
                                       halted=halted_too, wake=run.follow_ups, **ended)
        except ConditionFailed:
            if not halted_too:
                return None
            try:  # the halter recorded its halt meanwhile: finish without another
                self.store.runs.finish_run(run_id, done.status, done.error, now, done.expires_at,
                                           wake=run.follow_ups, created_at=run.created_at,
                                           workflow=run.workflow)
            except ConditionFailed:
                return None
        try:
            self.on_finish(run)
        except OrchestratorError as exc:  # the sweeper repairs what this left undone
            log.warning("run %s: after-finish hook failed: %s", run_id, exc)
        return done.status
