"""The executor: applies the engine's commands through the store and the queue, one
small method per command, each a conditional write (plus the dispatches it causes).

The decisions themselves are the engine's (engine/attempts.py for one attempt,
engine/transitions.py for the run, engine/reconcile.py for repairs); this module only
carries them out. Shared by the worker (after each attempt), the sweeper (repairs) and
the API (cancel)."""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from collections.abc import Callable, Collection
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from orchestrator.adapters.blobs import Blobs
from orchestrator.adapters.messages import Dispatch, Promote
from orchestrator.adapters.metering import metered
from orchestrator.adapters.queue import Queues
from orchestrator.adapters.store import Lease, Store
from orchestrator.adapters.store.join_counts import WIDE_JOIN
from orchestrator.engine.attempts import Fail, Retry
from orchestrator.engine.commands import Finish, HaltRun, SkipBranch, SkipStep, StopInFlight
from orchestrator.engine.context import RunContext
from orchestrator.engine.policies import OnFailure
from orchestrator.engine.records import RunRecord, StepRecord
from orchestrator.engine.states import RunStatus, StepStatus
from orchestrator.engine.transitions import (
    NOT_STARTED,
    RESTAMP_AFTER,
    after_failure,
    finish,
    stop_pass,
)
from orchestrator.errors import ConditionFailed, OrchestratorError
from orchestrator.settings import Settings

log = logging.getLogger(__name__)

# Reads of a finishing run's rows, when steps keep landing between a read and its flags.
FINISH_TRIES = 3
# A join with at least this many dependencies may have its completions folded by the
# caller (`fold`): a wide fan-in is counted in a few writes, not one per dependency.
# Such a join is counted apart from its row, however its completions come
# (adapters/store/join_counts.py).
FOLD_FROM = WIDE_JOIN

__all__ = ["FOLD_FROM", "LRU", "Executor", "Fold", "RunContext", "Tally"]

# (run, join, the dependency that succeeded, the join's in-degree): see promote_dependants.
Fold = Callable[[str, str, str, int], None]


class LRU(OrderedDict[Any, Any]):
    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def put(self, key: Any, value: Any) -> None:
        self[key] = value
        self.move_to_end(key)
        while len(self) > self.size:
            self.popitem(last=False)


@dataclass
class Tally:
    """Terminal transitions counted locally and folded into one write per run."""

    counts: dict[str, int] = field(default_factory=dict)

    def add(self, run_id: str, n: int = 1) -> None:
        if n:
            self.counts[run_id] = self.counts.get(run_id, 0) + n


def _no_release(run: RunRecord) -> None:
    return None


def _attempt_of(row: StepRecord) -> tuple[str, str, int, str]:
    """(run, step, attempt, lease owner): what names an attempt in the store's writes."""
    return row.run_id, row.step, row.attempt, row.lease_owner or ""


@dataclass(frozen=True)
class Executor:
    store: Store
    queues: Queues
    blobs: Blobs
    settings: Settings
    clock: Callable[[], float]
    _: KW_ONLY
    # Called once a run has finished: admission's release (frees its group's lock).
    on_finish: Callable[[RunRecord], None] = _no_release

    # ---- outputs --------------------------------------------------------------------

    def store_output(self, row: StepRecord, raw: bytes) -> tuple[str | None, str | None]:
        """(inline JSON, blob key): bodies too large for a row go to the blob store."""
        if len(raw) > self.settings.inline_output_limit:
            key = f"outputs/{row.run_id}/{row.step}/{row.attempt}.json"
            return None, self.blobs.put(key, raw)
        return (raw.decode("utf-8") if raw else "null"), None

    def load_output(self, row: StepRecord) -> Any:
        if row.output_ref is not None:
            return json.loads(self.blobs.get(row.output_ref))
        return row.output

    # ---- after an attempt ------------------------------------------------------------

    def succeed(
        self,
        row: StepRecord,
        ctx: RunContext,
        output_json: str | None,
        output_ref: str | None,
        size: int,
        tally: Tally,
        *,
        keep_one: Lease | None,
        on_recorded: Callable[[], None] | None = None,
        fold: Fold | None = None,
        skipped: str | None = None,
    ) -> tuple[StepRecord | None, StepRecord] | None:
        """Record success and promote dependants. Returns (the dependant promoted straight
        into `keep_one`'s lease for the caller to run inline, the recorded row), or None
        if our lease was lost (someone else owns the attempt now). `skipped`: the step's
        condition was false; it ends skipped for that reason, and its dependants go on
        as after a success (its output is null)."""
        now = self.clock()
        done: StepRecord | None = None
        # A success keeps its claim's wake: a crash between this record and its
        # follow-ups (its dependants' promotions, a sink's count or its run's finish) is
        # repaired at the lease's end, like a crash just before it, and the record costs
        # no wake-index write (engine/wakes.py). Not a sink of a run whose finish others
        # wait for (a group's next run, a parent): its wake is now, for the next sweep.
        # Only while the lease holds: a record landing after it (a stalled worker) may
        # find the sweeper past that wake already, and takes the finish time instead.
        keep_wake = (now < (row.lease_until or 0.0)
                     and (bool(row.dependants) or not ctx.follow_ups))
        try:
            # Most rows carry no flag: the row as its claim answered it, moved on, is
            # put whole (store.steps.put_success). A flagged row (its run is stopping or
            # failing) fails that guard and takes the full write, which reads the flags
            # back.
            done = self.store.steps.put_success(row, output_json=output_json, output_ref=output_ref,
                                                size=size, now=now, keep_wake=keep_wake,
                                                skipped=skipped)
        except ConditionFailed:
            pass
        if done is None:
            try:
                done = self.store.steps.record_success(
                    *_attempt_of(row),
                    output_json=output_json,
                    output_ref=output_ref,
                    size=size,
                    now=now,
                    skipped=skipped,
                )
            except ConditionFailed:
                return None
        ended = not done.stopping and done.step == ctx.ends_with and self.end_with(done, ctx)
        if done.counted and not ended:
            tally.add(row.run_id)
        if on_recorded is not None:
            on_recorded()
        if done.stopping:
            # It landed in a stopping run: nothing below it starts (rows the stop pass
            # could not see, written by a launch still under way, are skipped here).
            self.skip_branch(row.run_id, SkipBranch(done.step, done.dependants, "run stopped"),
                             tally, ctx)
            return None, done
        hi, size = len(done.dependants), self.settings.fanout_slice
        if hi > 2 * size:
            # A wide fan-out: its other slices go to the queue first, for any worker
            # (its own worker promotes the first).
            self.queues.dispatch([Promote(run_id=done.run_id, step=done.step, lo=lo,
                                          hi=min(lo + size, hi))
                                  for lo in range(size, hi, size)])
            hi = size
        inline, sends = self.promote_dependants(done, ctx, keep_one, fold, hi=hi)
        if sends:
            self.queues.dispatch(sends)
        return inline, done

    def promote_slice(self, msg: Promote, ctx: RunContext, fold: Fold | None) -> None:
        """Promote one slice of a wide fan-out's dependants (a Promote message). The
        row decides: a step that is not a success, or that landed in a stopping run,
        promotes nothing; in a run stopped since, the stop pass's skips make each
        promotion's guard fail. Promoting twice is harmless."""
        done = self.store.steps.get_step(msg.run_id, msg.step)
        if done is None or done.status is not StepStatus.SUCCESS or done.stopping:
            return
        _, sends = self.promote_dependants(done, ctx, None, fold, lo=msg.lo, hi=msg.hi)
        if sends:
            self.queues.dispatch(sends)

    def promote_dependants(
        self, done: StepRecord, ctx: RunContext, keep_one: Lease | None,
        fold: Fold | None = None, *, lo: int = 0, hi: int | None = None,
    ) -> tuple[StepRecord | None, list[Dispatch]]:
        """Count `done` towards each dependant (those from `lo` to `hi`). Returns the
        dependant promoted into `keep_one` (if any) and the dispatches of the others not
        sent yet. A wide join (FOLD_FROM dependencies or more) is handed to `fold` when
        given: the caller counts it later with others (satisfy_many)."""
        inline: StepRecord | None = None
        sends: list[Dispatch] = []
        deps = done.dependants[lo:hi]
        last = len(deps) - 1
        for i, dep in enumerate(deps):
            # Only the last dependant may be run inline: a lease taken at the start of a
            # wide fan-out would age while the rest are being promoted.
            lease = keep_one if i == last else None
            ndeps = ctx.ndeps.get(dep, 0)
            if fold is not None and ndeps >= FOLD_FROM:
                fold(done.run_id, dep, done.step, ndeps)
            elif ndeps >= FOLD_FROM:
                promoted = self._count_wide(done.run_id, dep, [done.step], ndeps, ctx, lease)
                if promoted is not None and promoted.status is StepStatus.DISPATCHED:
                    inline = promoted
                elif promoted is not None:
                    sends.append(Dispatch(run_id=done.run_id, step=dep, attempt=1))
            elif ndeps == 1 and lease is None:
                # `done` was its only dependency: it is ready as its row stands. No write
                # says so; its message does, and the worker that takes it promotes and
                # claims it in one write. A lost message leaves it blocked with its
                # dependency done, which the sweeper promotes as it would a promotion
                # lost with its worker.
                sends.append(Dispatch(run_id=done.run_id, step=dep, attempt=1,
                                      after=done.step, ready_at=self.clock()))
            else:
                # Stamp each promotion with its own time: a wide fan-out takes a while,
                # and the sweeper reads ready_at as "when was this message due to be sent".
                promoted = self.store.steps.satisfy(done.run_id, dep, done.step, ndeps, lease,
                                                    self.clock(), plan=ctx.plan(dep))
                if promoted is None:
                    continue
                if promoted.status is StepStatus.DISPATCHED:
                    inline = promoted
                    continue
                sends.append(Dispatch(run_id=done.run_id, step=dep, attempt=1))
            if len(sends) == 10:  # a wide fan-out starts while it is still promoting
                self.queues.dispatch(sends)
                sends = []
        return inline, sends

    def satisfy_many(self, run_id: str, step: str, deps: Collection[str], ndeps: int,
                     ctx: RunContext | None = None) -> bool:
        """Count several successes towards one wide join (folded by a worker) and
        dispatch the join if that completed it. True if it did. `ctx`: the run's, if
        the caller has it (else it is read)."""
        promoted = self._count_wide(run_id, step, deps, ndeps, self.context(run_id, ctx))
        if promoted is None:
            return False
        self.queues.dispatch([Dispatch(run_id=run_id, step=step, attempt=1)])
        return True

    def _count_wide(self, run_id: str, step: str, deps: Collection[str], ndeps: int,
                    ctx: RunContext, lease: Lease | None = None) -> StepRecord | None:
        """Count `deps` towards a wide join by their places in its `dependsOn` (the
        run's definition): the row if that promoted it."""
        if ctx.definition is None:
            return None  # the run is gone
        places = ctx.definition.places.get(step, {})
        known = [places[d] for d in deps if d in places]
        if not known:
            return None
        return self.store.steps.satisfy_many(run_id, step, known, ndeps, self.clock(),
                                             lease=lease)

    def retry(
        self,
        row: StepRecord,
        decision: Retry,
        tally: Tally,
        *,
        expired_before: float | None = None,
    ) -> bool:
        """Record a failed attempt and send the timer of the next. A step of a stopping
        run (flagged `stopping` while this attempt ran) is skipped instead."""
        now = self.clock()
        try:
            waiting = self.store.steps.record_retry(
                *_attempt_of(row),
                next_attempt=decision.next_attempt,
                due_at=decision.due_at,
                error=decision.error,
                now=now,
                expired_before=expired_before,
            )
        except ConditionFailed:
            return False
        if waiting.stopping:
            self.stop_step(row.run_id, row.step, "run stopped: not retried", tally)
            return True
        self.queues.timer(
            Dispatch(
                run_id=row.run_id,
                step=row.step,
                attempt=decision.next_attempt,
                due_at=decision.due_at,
            ),
            now,
        )
        return True

    def fail(
        self,
        row: StepRecord,
        ctx: RunContext,
        decision: Fail,
        tally: Tally,
        *,
        expired_before: float | None = None,
    ) -> bool:
        """Record a step's failure, then what the engine says it does to its run. Under
        `halt` the failure's write is the run's stop instant too (`stop_run`): the pass
        that skips the rest may come late (this process may die first), no start will."""
        try:
            failed = self.store.steps.record_failure(
                *_attempt_of(row),
                error=decision.error,
                now=self.clock(),
                expired_before=expired_before,
                stop_run=ctx.definition is not None and ctx.on_failure is OnFailure.HALT,
            )
        except ConditionFailed:
            return False
        if failed.counted:
            tally.add(row.run_id)
        then = after_failure(ctx.on_failure, failed)
        if isinstance(then, SkipBranch):
            self.skip_branch(row.run_id, then, tally, ctx)
        else:
            self.halt(row.run_id, then, tally, ctx)
        return True

    # ---- the run's transitions ---------------------------------------------------------

    def context(self, run_id: str, ctx: RunContext | None = None) -> RunContext:
        """`ctx` if it knows the run's definition, else one read afresh."""
        if ctx is not None and ctx.definition is not None:
            return ctx
        run = self.store.runs.get_run(run_id, self.clock())
        return RunContext.of(run) if run is not None else RunContext.missing(run_id)

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
        self.stop(run_id, cmd.reason, tally, ctx)
        try:
            self.store.runs.mark_halted(run_id, cmd.error, self.clock())
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

    # ---- finishing ---------------------------------------------------------------------

    def end_with(self, done: StepRecord, ctx: RunContext) -> bool:
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
                                       unstopped=True, wake=ctx.follow_ups)
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
        try:
            self.store.runs.finish_run(run_id, done.status, done.error, now, done.expires_at,
                                       halted=halted_too, wake=run.follow_ups)
        except ConditionFailed:
            if not halted_too:
                return None
            try:  # the halter recorded its halt meanwhile: finish without another
                self.store.runs.finish_run(run_id, done.status, done.error, now, done.expires_at,
                                           wake=run.follow_ups)
            except ConditionFailed:
                return None
        try:
            self.on_finish(run)
        except OrchestratorError as exc:  # the sweeper repairs what this left undone
            log.warning("run %s: after-finish hook failed: %s", run_id, exc)
        return done.status
