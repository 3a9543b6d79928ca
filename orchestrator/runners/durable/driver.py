"""Advancing a durable run: call its workflow with the journal, commit what the call
reports, and call again at once while the run has a step to run (eager continuation).

The worker that claimed the run's driver row holds its lease for the whole chain; it
reads the journal once and keeps it in memory, so a sequential step costs one HTTP call
and one conditional put. The run leaves the worker only to wait (a sleep, a signal, a
step's backoff), when the worker's time is up, or when it ends. While it waits, nobody
holds it: a timer message (or the sweeper, for waits past the queue's 15-minute delay)
or a poke (a signal landed) brings it back to a worker, which resolves the wait before
calling the workflow again.

Whoever advances the run, the decisions are the engine's (engine/durable.py: a call's
answer and the next move; engine/durable_waits.py: when a wait is over): this module
only reads and writes."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from functions.sdk.protocol import WaitKind
from orchestrator import telemetry
from orchestrator.adapters.invoker import Invoker
from orchestrator.adapters.messages import Dispatch
from orchestrator.engine.attempts import (
    Fail,
    Outcome,
    OutcomeKind,
    Retry,
    after_attempt,
    output_not_kept,
)
from orchestrator.engine.backend_limits import LimitKind, Limits
from orchestrator.engine.context import RunContext
from orchestrator.engine.durable import BranchDone, Complete, Continue, Pause, Suspend
from orchestrator.engine.durable import Fail as WorkflowFail
from orchestrator.engine.durable_moves import idle_calls, look_for, over_cap, release_of, stands
from orchestrator.engine.durable_scopes import JournalView, first_holder, scope_of
from orchestrator.engine.durable_waits import (
    LOCK_RECHECK,
    Committed,
    Found,
    Lookup,
    Refused,
    Waiting,
    resolve,
)
from orchestrator.engine.records import StepRecord
from orchestrator.engine.states import Released
from orchestrator.errors import Code
from orchestrator.runners.backend_gate import arrived_at, backend_wait, line_holder, slot_holder
from orchestrator.runners.base import Attempt
from orchestrator.runners.durable.branches import Branches
from orchestrator.runners.durable.calls import STOP_CHECK_EVERY, Calls, Target
from orchestrator.runners.durable.lookups import Lookups
from orchestrator.services.coordination.approvals import Approvals, reject_run
from orchestrator.services.coordination.backend_limits import BackendLimits
from orchestrator.services.coordination.locks import Locks
from orchestrator.services.coordination.state_cells import StateService
from orchestrator.services.durable.children import Children
from orchestrator.services.durable.event_waits import EventWaits
from orchestrator.services.durable.hooks import Hooks
from orchestrator.services.execution.executor import Executor
from orchestrator.services.execution.tally import Tally
from orchestrator.services.versions import Versions
from orchestrator.strict_json import dumps

__all__ = ["Durable", "Target"]

log = logging.getLogger("orchestrator.durable")


class Durable:
    def __init__(self, executor: Executor, invoker: Invoker, *,
                 clock: Callable[[], float], rand: Callable[[], float],
                 events: EventWaits | None = None, hooks: Hooks | None = None,
                 children: Children | None = None, approvals: Approvals | None = None,
                 state: StateService | None = None, locks: Locks | None = None,
                 versions: Versions | None = None,
                 limits: BackendLimits | None = None) -> None:
        self.executor = executor
        # Where a call to a backend with `limits:` takes its slot (runners/backend_gate.py).
        self.limits = limits
        # Where each version of a backend's code is served (services/versions/).
        self.versions = versions
        self.locks = locks
        self.approvals = approvals
        self.state = state
        self.children = children
        self.events = events
        self.hooks = hooks
        self.store = executor.store
        self.queues = executor.queues
        self.settings = executor.settings
        self.invoker = invoker
        self.clock = clock
        self.rand = rand
        # Its parts: the parallel branches, what a wait looks up, the calls.
        self.branches = Branches(executor, clock=clock)
        self.lookups = Lookups(executor, self.branches, clock=clock, events=events,
                               hooks=hooks, children=children, approvals=approvals,
                               state=state, locks=locks)
        self.calls = Calls(executor, invoker, clock=clock, hooks=hooks,
                           stopped=self._stopped, give_up=self._give_up)

    # ---- advancing a run ---------------------------------------------------------------

    def run(self, attempt: Attempt) -> StepRecord | None:
        """The durable runner: the claimed driver row's run, advanced (runners/base.py)."""
        row, ctx, backend = attempt.row, attempt.ctx, attempt.backend
        assert ctx is not None and backend is not None
        url = backend.url_of(row.route)
        script = ctx.definition is not None and ctx.definition.script
        if ctx.version is not None and self.versions is not None and not script:
            # The run is called on the version it started on (or a migration moved it to),
            # read afresh at its first call: a retire may have counted its runs before
            # this one's row was written.
            served = self.versions.callable_url(row.backend, ctx.version, row.run_id,
                                                first=first_holder(row))
            if served is None:
                self._version_gone(row, ctx, attempt.tally)
                return None
            url = served.rstrip("/") + row.route
        self.advance(row, ctx, Target(url, backend.secret),
                     attempt.tally, room=lambda: attempt.room((row.step,)),
                     limits=backend.limits)
        return None

    def _version_gone(self, row: StepRecord, ctx: RunContext, tally: Tally) -> None:
        """The run's version is not live (retired under it: a retire counts the runs
        pinned to a version, but a start that read the current version just before it
        moved may land after the count). It is paused, its journal untouched, for
        `runs migrate` (which checks it) or a cancel."""
        message = (f"version {ctx.version!r} of {row.backend!r} is not live: migrate the"
                   " run to a live version (orchestrator runs migrate) or cancel it")
        waiting = Waiting(WaitKind.MISMATCH, since=self.clock())
        self._pause(row, row.pokes, Pause(waiting, {"code": Code.VERSION_GONE.value,
                                                    "message": message}), tally)

    def advance(self, row: StepRecord, ctx: RunContext, target: Target, tally: Tally,
                room: Callable[[], bool], limits: Limits | None = None) -> None:
        """Advance the run whose driver `row` this worker has just claimed, until it
        waits or ends (or `room()` says this worker's time is up). `limits`: its
        backend's, each call taking a slot first."""
        run_id = row.run_id
        gate = self.limits if limits is not None else None
        # Its first wait for its backend (its place in the backend's line).
        arrived = 0.0 if limits is None else arrived_at(row.waiting, limits, 0.0)
        queued = (row.waiting or {}).get("detail", {}).get("limit") == LimitKind.CONCURRENCY
        joined = False
        scope = scope_of(row.step)
        view = JournalView([] if first_holder(row)
                           else self.store.journal.read_journal(run_id, self.clock()))
        waiting = Waiting.from_json(row.waiting) if row.waiting else None
        pokes = row.pokes
        attempts: dict[str, int] = {}
        # A wait just reported by a call (not one found on the row): it registers.
        fresh_wait = False
        refs = [False]
        idle = 0
        checked = self.clock()
        # Waits the branches of a parallel reported in the last call (version 2 runs
        # them in the call): a retry's backoff carries over to the branch's own driver.
        carried: dict[str, Waiting] = {}
        while True:
            now = self.clock()
            if now - checked >= STOP_CHECK_EVERY:
                # A long chain looks for a cancel now and then (one read), not every step.
                checked = now
                if self._stopped(row):
                    self._give_up(row, tally, now)
                    return
            if waiting is not None and not stands(waiting, view):
                waiting = None  # resolved already (a stale record of a past wait)
            if waiting is not None:
                if waiting.kind is WaitKind.RETRY:
                    attempts = {waiting.id: waiting.attempt}
                found: Lookup = None
                for look in look_for(waiting, fresh_wait):
                    found = self.lookups.look(look, row, ctx, waiting, view, now, carried)
                    if isinstance(found, Refused):
                        break  # resolved as failed: nothing more to look up
                if waiting.kind in (WaitKind.CALL, WaitKind.SPAWN):
                    # Started: the row keeps no copy of the child's input.
                    waiting = replace(waiting, detail={k: v for k, v in waiting.detail.items()
                                                       if k != "input"})
                fresh_wait = False
                done = resolve(waiting, now, found)
                if done is not None and waiting.kind is WaitKind.PARALLEL:
                    self.branches.settle(run_id, waiting, now)
                if done is None:
                    if waiting.kind is WaitKind.LOCK:  # still in line: look again later
                        waiting = replace(waiting, until=now + LOCK_RECHECK)
                    left = self._suspend(row, pokes, waiting, now, tally)
                    if left is not Released.POKED:
                        return
                    fresh = self.store.drivers.get_driver(run_id, row.step)
                    pokes = fresh.pokes if fresh is not None else pokes + 1
                    continue
                if done.entry is not None:
                    # A state operation's entry was written with the cell, already.
                    stored = (done.entry if isinstance(found, Committed)
                              else self.store.journal.put_entry(run_id, done.entry, now))
                    if stored is done.entry:  # written now (not another outcome's)
                        telemetry.operation_span(run_id, stored)
                    if waiting.kind is WaitKind.SIGNAL and isinstance(found, Found) \
                            and stored.get("signal") != found.doc.get("id"):
                        # Another outcome won (a timeout written by a stalled holder):
                        # the signal goes back to the queue for the next wait.
                        self.store.signals.untake_signal(run_id, str(found.doc["key"]),
                                                         f"{waiting.scope}#{waiting.pos}")
                    view.add(stored)
                if waiting.kind is WaitKind.EVENT and self.events is not None:
                    self.events.forget(run_id, waiting)
                if waiting.kind is WaitKind.APPROVAL and isinstance(found, Found) \
                        and found.doc.get("rejected"):
                    # Rejected: the run is cancelled (the kill is recorded first).
                    reject_run(self.executor, found.doc)
                    self._give_up(row, tally, self.clock())
                    return
                waiting = None
            error = over_cap(len(view), self.settings.durable_max_entries)
            if error is not None:
                self.executor.fail(row, ctx, Fail(error), tally)
                return
            if scope and scope in view.ended:
                # The branch's result was committed by a holder that died before counting
                # it: count it now (calling again would report nothing new).
                self.branches.done(row, ctx, scope, tally)
                return
            kept = self._keep_lease(row, ctx)
            if kept is None:
                return  # the lease is lost: its next holder carries on
            row = kept
            if gate is not None and limits is not None:
                wait = gate.enter(limits, slot_holder(row), row.timeout)
                if wait is not None:  # its backend is busy: wait for a slot, released
                    arrived = arrived or self.clock()
                    if wait.limit is LimitKind.CONCURRENCY and not joined:
                        gate.queue(limits, line_holder(row), run_id, row.step, arrived)
                        queued = joined = True
                        continue  # one more look once in line (runners/backend_gate.py)
                    left = self._suspend(row, pokes, backend_wait(limits, wait, arrived),
                                         self.clock(), tally)
                    if left is not Released.POKED:
                        return
                    joined = False
                    fresh = self.store.drivers.get_driver(run_id, row.step)
                    pokes = fresh.pokes if fresh is not None else pokes + 1
                    continue
                if queued:
                    gate.dequeue(limits, line_holder(row), arrived)
                    queued = False
                arrived, joined = 0.0, False  # a later refusal takes a new place
                try:
                    turn = self.calls.call(row, ctx, target, view, attempts, refs, tally)
                except BaseException:
                    gate.leave(limits, slot_holder(row), None)
                    raise
                gate.leave(limits, slot_holder(row), turn.failure)
            else:
                turn = self.calls.call(row, ctx, target, view, attempts, refs, tally)
            checked = max(checked, turn.checked)
            if turn.gone:
                return
            if turn.failure is not None:
                self._call_failed(row, ctx, turn.failure, tally)
                return
            after = turn.after
            assert after is not None
            carried = turn.carried
            attempts = {}
            idle, error = idle_calls(idle, turn.committed, after, ctx.served)
            if error is not None:
                self._call_failed(row, ctx, Outcome(OutcomeKind.RETRYABLE, error=error), tally)
                return
            if isinstance(after, Continue):
                if room():
                    continue
                # This worker's time is up: the next call goes to the queue.
                waiting = Waiting(WaitKind.NEXT, since=self.clock())
                self._suspend(row, pokes, waiting, self.clock(), tally, send=True, settle=True)
                return
            if isinstance(after, Suspend):
                waiting = after.waiting
                fresh_wait = True
                continue
            if isinstance(after, Complete):
                self._complete(row, ctx, after.value, tally)
                return
            if isinstance(after, BranchDone):
                self.branches.done(row, ctx, scope, tally)
                return
            if isinstance(after, WorkflowFail):
                self.executor.fail(row, ctx, Fail(dict(after.error)), tally)
                return
            assert isinstance(after, Pause)
            self._pause(row, pokes, after, tally)
            return

    def _stopped(self, row: StepRecord) -> bool:
        """Whether the run is being cancelled, or the lease was lost (one read)."""
        fresh = self.store.drivers.get_driver(row.run_id, row.step)
        return fresh is None or fresh.lease_owner != row.lease_owner or bool(fresh.stopping)

    def _call_failed(self, row: StepRecord, ctx: RunContext, outcome: Outcome,
                     tally: Tally) -> None:
        """A call that failed as a whole (endpoint down, 5xx, a malformed answer): tried
        again with backoff, like a step's attempt; a 4xx fails the run."""
        decision = after_attempt(row, outcome, self.clock(), self.rand())
        if isinstance(decision, Retry):
            self.executor.retry(row, decision, tally)
        elif isinstance(decision, Fail):
            self.executor.fail(row, ctx, decision, tally)

    def _keep_lease(self, row: StepRecord, ctx: RunContext) -> StepRecord | None:
        """The row, with a lease that outlasts one more call (renewed if need be)."""
        now = self.clock()
        # Renewed once less than a call's timeout and half the margin is left: a chain
        # of fast steps renews every few seconds, not every step.
        if (row.lease_until or 0.0) - now >= row.timeout + self.settings.lease_margin / 2:
            return row
        until = now + row.timeout + self.settings.lease_margin
        if not self.store.drivers.renew_driver(row.run_id, row.lease_owner or "", row.attempt,
                                               until, row.step):
            return None
        return replace(row, lease_until=until)

    def _suspend(self, row: StepRecord, pokes: int, waiting: Waiting, now: float,
                 tally: Tally, *, send: bool = False, settle: bool = False) -> Released:
        """Release the run to wait; a timer message if its wait ends within reach.
        `settle`: a poke that landed meanwhile does not keep the lease (the caller has
        nothing to look at again: the run goes to the queue or is paused)."""
        for _ in range(8 if settle else 1):
            left = self._release(row, pokes, waiting, now, tally, send=send)
            if left is not Released.POKED or not settle:
                return left
            fresh = self.store.drivers.get_driver(row.run_id, row.step)
            pokes = fresh.pokes if fresh is not None else pokes + 1
        return left

    def _release(self, row: StepRecord, pokes: int, waiting: Waiting, now: float,
                 tally: Tally, *, send: bool = False) -> Released:
        out = release_of(waiting, now, redispatch_after=self.executor.store.wake.redispatch_after,
                              send=send)
        left = self.store.drivers.suspend_driver(
            row.run_id, row.lease_owner or "", row.attempt, pokes, waiting.to_json(), out.due,
            out.wake, now, reset_attempt=row.attempt > 1, step=row.step)
        if left is Released.STOPPING:
            # The run is being cancelled and the lease is still ours: end the driver.
            self._give_up(row, tally, now)
            return left
        if left is Released.OK and out.due is not None and (out.dispatch or out.timer):
            attempt = 1 if row.attempt > 1 else row.attempt
            msg = Dispatch(run_id=row.run_id, step=row.step, attempt=attempt,
                           due_at=None if out.dispatch else out.due)
            if out.dispatch:
                self.queues.dispatch([msg])
            else:
                self.queues.timer(msg, now)
        return left

    def _give_up(self, row: StepRecord, tally: Tally, now: float) -> None:
        """End the driver of a run being cancelled (a no-op if the lease is lost)."""
        gone = self.store.steps.abandon(row.run_id, row.step, row.attempt, row.lease_owner or "",
                                        "run stopped", now)
        if gone is not None and gone.counted:
            tally.add(row.run_id)

    def _complete(self, row: StepRecord, ctx: RunContext, value: Any, tally: Tally) -> None:
        raw = dumps(value).encode()
        try:
            output_json, output_ref = self.executor.store_output(row, raw)
        except Exception as exc:  # the blob store failed: try the call again later
            self._call_failed(row, ctx, output_not_kept(str(exc)), tally)
            return
        self.executor.succeed(row, ctx, output_json, output_ref, len(raw), tally, keep_one=None)

    def _pause(self, row: StepRecord, pokes: int, pause: Pause, tally: Tally) -> None:
        now = self.clock()
        self.store.runs.pause_run(row.run_id, pause.error, now)
        self._suspend(row, pokes, pause.waiting, now, tally, settle=True)


