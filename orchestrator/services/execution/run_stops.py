"""Stopping runs and branches: continue-independent's skip of the branch below a
failure (`skip_branch`), a halt, a kill, and the stop pass (engine.transitions.stop_pass)
applied row by row (`stop_step`: skip a step that has not started, flag one in flight)."""

from __future__ import annotations

from orchestrator.engine.commands import HaltRun, SkipBranch, SkipStep, StopInFlight
from orchestrator.engine.context import RunContext
from orchestrator.engine.records import RunRecord
from orchestrator.engine.states import StepStatus
from orchestrator.engine.transitions import (
    NOT_STARTED,
    stop_pass,
)
from orchestrator.errors import ConditionFailed
from orchestrator.services.execution.run_finishes import RunFinishes
from orchestrator.services.execution.tally import Tally

__all__ = ["RunStops"]


class RunStops(RunFinishes):
    """Skipping a branch, halting, killing and stopping a run."""

    def skip_branch(self, run_id: str, cmd: SkipBranch, tally: Tally,
                    ctx: RunContext | None = None) -> None:
        """continue-independent: skip the branch below a failure, nothing else."""
        ctx = self.context(run_id, ctx)
        now = self.clock()
        frontier = list(cmd.dependants)
        seen: set[str] = set()
        while frontier:
            name = frontier.pop()
            if name in seen:
                continue
            seen.add(name)
            skipped = self.store.steps.skip(run_id, name, (StepStatus.BLOCKED,), cmd.reason, now,
                                            plan=ctx.plan(name))
            if skipped is not None:
                if skipped.counted:
                    tally.add(run_id)
                frontier.extend(skipped.dependants)

    def halt(self, run_id: str, cmd: HaltRun, tally: Tally,
             ctx: RunContext | None = None) -> None:
        """Stop the run, then flag it halted: the flag comes after the pass, so no step
        starts after the run's `run.halted` entry."""
        ctx = self.context(run_id, ctx)
        self.stop(run_id, cmd.reason, tally, ctx)
        try:
            self.store.runs.mark_halted(run_id, cmd.error, self.clock(),
                                        created_at=ctx.created_at or None)
        except ConditionFailed:
            pass  # halted by another failure already, killed, or finished

    def kill(self, run_id: str, reason: str) -> RunRecord:
        """Cancel a running run: the request is recorded first (the sweeper carries on
        from it if this process dies), then the run is stopped."""
        run = self.store.runs.request_kill(run_id, reason, self.clock())
        tally = Tally()
        self.stop(run_id, f"run killed: {reason}", tally, RunContext.of(run))
        self.flush(tally)
        return run

    def stop(self, run_id: str, reason: str, tally: Tally,
             ctx: RunContext | None = None) -> None:
        """The stop pass (engine.transitions): skip every step that has not started
        (those its start left out included), flag every step in flight; in-flight ones
        land."""
        ctx = self.context(run_id, ctx)
        for cmd in stop_pass(ctx.rows(self.store.steps.query_steps(run_id, states_only=True)),
                                   reason):
            self.apply_stop(run_id, cmd, tally, ctx)

    def apply_stop(self, run_id: str, cmd: SkipStep | StopInFlight, tally: Tally,
                   ctx: RunContext | None = None) -> None:
        if isinstance(cmd, SkipStep):
            self.stop_step(run_id, cmd.step, cmd.reason, tally, ctx=ctx)
        else:
            self.stop_step(run_id, cmd.step, "", tally, in_flight=True, ctx=ctx)

    def stop_step(
        self, run_id: str, step: str, reason: str, tally: Tally, *, in_flight: bool = False,
        ctx: RunContext | None = None,
    ) -> None:
        """Skip the step if it has not started, else flag it `stopping`. Each write is
        guarded by the state it expects; a row that moved between the read and the write
        (claimed, or back to waiting for a retry) is read again and handled as it is."""
        now = self.clock()
        for _ in range(4):
            if not in_flight:
                plan = ctx.plan(step) if ctx is not None else None
                skipped = self.store.steps.skip(run_id, step, NOT_STARTED,
                                                reason or "run stopped", now, plan=plan)
                if skipped is not None:
                    if skipped.counted:
                        tally.add(run_id)
                    return
            if self.store.steps.mark_stopping(run_id, step, now):
                return
            row = self.store.steps.get_step(run_id, step)
            if row is None and (ctx is None or ctx.definition is None):
                # Perhaps a row its start left out: skipped as planned, from the run.
                ctx = self.context(run_id)
                in_flight = False
                continue
            if row is None or row.status.terminal or row.stopping:
                return
            in_flight = row.claimed
