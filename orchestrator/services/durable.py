"""Advancing a durable run: call its workflow with the journal, commit what the call
reports, and call again at once while the run has a step to run (eager continuation).

The worker that claimed the run's driver row holds its lease for the whole chain; it
reads the journal once and keeps it in memory, so a sequential step costs one HTTP call
and one conditional put. The run leaves the worker only to wait (a sleep, a signal, a
step's backoff), when the worker's time is up, or when it ends. While it waits, nobody
holds it: a timer message (or the sweeper, for waits past the queue's 15-minute delay)
or a poke (a signal landed) brings it back to a worker, which resolves the wait before
calling the workflow again.

Whoever advances the run, the decisions are engine/durable.py's: this module only reads
and writes."""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from functions.sdk.protocol import DurableOp, EndOp, RecordOp, RetryOp, WaitKind
from orchestrator import telemetry
from orchestrator.adapters.invoker import Call, Invoker, Result, StreamCut
from orchestrator.adapters.messages import Dispatch
from orchestrator.engine.attempts import (
    Fail,
    Outcome,
    OutcomeKind,
    Retry,
    after_attempt,
    output_not_kept,
)
from orchestrator.engine.context import RunContext
from orchestrator.engine.durable import (
    DRIVER,
    LOCK_RECHECK,
    BadAnswer,
    BranchDone,
    Complete,
    Continue,
    JournalView,
    Next,
    Pause,
    Suspend,
    Waiting,
    branch_scope,
    first_branches,
    first_holder,
    in_view,
    next_move,
    read_answer,
    read_op,
    resolve,
    row_of,
    scope_of,
    wait_of,
)
from orchestrator.engine.durable import Fail as WorkflowFail
from orchestrator.engine.durable_moves import (
    Look,
    idle_calls,
    look_for,
    new_entries,
    over_cap,
    release_of,
    stands,
)
from orchestrator.engine.records import StepRecord
from orchestrator.engine.states import StepStatus
from orchestrator.errors import (
    Code,
    ConditionFailed,
    InvalidName,
    UsageError,
    ValueTooLarge,
    error_doc,
)
from orchestrator.services.approvals import Approvals, gate_outcome, reject_run
from orchestrator.services.checkpoints import END, IDLE, Exchange, Item, Lines
from orchestrator.services.children import Children, child_run_id
from orchestrator.services.event_waits import EventWaits
from orchestrator.services.executor import Executor, Tally
from orchestrator.services.hooks import Hooks
from orchestrator.services.locks import Locks
from orchestrator.services.state_cells import StateService
from orchestrator.services.values import check_value, checked_name
from orchestrator.strict_json import dumps

__all__ = ["Durable", "Target"]

log = logging.getLogger("orchestrator.durable")

# How often a chain of calls reads its driver row for a cancel.
STOP_CHECK_EVERY = 1.0
# The share of a call's timeout during which a version 2 call may start step bodies: the
# rest is for the last one to end before the timeout (and the lease) does.
CALL_BUDGET = 0.5



@dataclass(frozen=True)
class Target:
    url: str
    secret: str | None


class Durable:
    def __init__(self, executor: Executor, invoker: Invoker, *,
                 clock: Callable[[], float], rand: Callable[[], float],
                 events: EventWaits | None = None, hooks: Hooks | None = None,
                 children: Children | None = None, approvals: Approvals | None = None,
                 state: StateService | None = None, locks: Locks | None = None) -> None:
        self.executor = executor
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

    # ---- advancing a run ---------------------------------------------------------------

    def advance(self, row: StepRecord, ctx: RunContext, target: Target, tally: Tally,
                room: Callable[[], bool]) -> None:
        """Advance the run whose driver `row` this worker has just claimed, until it
        waits or ends (or `room()` says this worker's time is up)."""
        run_id = row.run_id
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
                found = None
                for look in look_for(waiting, fresh_wait):
                    found = self._look(look, row, ctx, waiting, view, now, carried)
                    if isinstance(found, dict) and "refused" in found:
                        break  # resolved as failed: nothing more to look up
                if waiting.kind in (WaitKind.CALL, WaitKind.SPAWN):
                    # Started: the row keeps no copy of the child's input.
                    waiting = replace(waiting, detail={k: v for k, v in waiting.detail.items()
                                                       if k != "input"})
                fresh_wait = False
                done = resolve(waiting, now, found)
                if done is not None and waiting.kind == "parallel":
                    self._settle_branches(run_id, waiting, now)
                if done is None:
                    if waiting.kind is WaitKind.LOCK:  # still in line: look again later
                        waiting = replace(waiting, until=now + LOCK_RECHECK)
                    left = self._suspend(row, pokes, waiting, now, tally)
                    if left != "poked":
                        return
                    fresh = self.store.drivers.get_driver(run_id, row.step)
                    pokes = fresh.pokes if fresh is not None else pokes + 1
                    continue
                if done.entry is not None:
                    # A state operation's entry was written with the cell, already.
                    stored = (done.entry if isinstance(found, dict) and "committed" in found
                              else self.store.journal.put_entry(run_id, done.entry, now))
                    if stored is done.entry:  # written now (not another outcome's)
                        telemetry.operation_span(run_id, stored)
                    if waiting.kind == "signal" and found is not None \
                            and stored.get("signal") != found.get("id"):
                        # Another outcome won (a timeout written by a stalled holder):
                        # the signal goes back to the queue for the next wait.
                        self.store.signals.untake_signal(run_id, str(found["key"]),
                                                         f"{waiting.scope}#{waiting.pos}")
                    view.add(stored)
                if waiting.kind == "event" and self.events is not None:
                    self.events.forget(run_id, waiting)
                if waiting.kind == "approval" and found is not None and found.get("rejected"):
                    # Rejected: the run is cancelled (the kill is recorded first).
                    reject_run(self.executor, found)
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
                self._branch_done(row, ctx, scope, tally)
                return
            kept = self._keep_lease(row, ctx)
            if kept is None:
                return  # the lease is lost: its next holder carries on
            row = kept
            turn = self._call(row, ctx, target, view, attempts, refs, tally)
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
                self._branch_done(row, ctx, scope, tally)
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

    def _look(self, look: Look, row: StepRecord, ctx: RunContext, waiting: Waiting,
              view: JournalView, now: float, carried: dict[str, Waiting]) -> Any:
        """Carry out one lookup `look_for` asked for; what it found (None: nothing, or
        `{"refused": error}`: a name or a value of the wait the orchestrator refuses,
        which an SDK that checks them never sends)."""
        try:
            return self._lookup(look, row, ctx, waiting, view, now, carried)
        except (InvalidName, ValueTooLarge) as exc:
            return {"refused": exc.to_dict()}

    def _lookup(self, look: Look, row: StepRecord, ctx: RunContext, waiting: Waiting,
                view: JournalView, now: float, carried: dict[str, Waiting]) -> Any:
        run_id = row.run_id
        d = waiting.detail
        if look is Look.TAKE_SIGNAL:
            name = checked_name("signal name", waiting.name)
            return self.store.signals.take_signal(run_id, name,
                                                  f"{waiting.scope}#{waiting.pos}")
        if look is Look.REGISTER_EVENT and self.events is not None:
            checked_name("event name", str(d["event"]), event=True)
            # Register first, then look: an event landing in between finds the
            # registration and pokes this run.
            self.events.register(run_id, waiting)
        elif look is Look.FIND_EVENT and self.events is not None:
            checked_name("event name", str(d["event"]), event=True)
            return self.events.find(waiting)
        elif look is Look.CREATE_HOOK and self.hooks is not None:
            return self.hooks.create(run_id, waiting.id, str(d["signal"]), d.get("metadata"),
                                     d.get("ttl"))
        elif look in (Look.START_CHILD, Look.CHILD) and self.children is not None:
            if look is Look.START_CHILD:
                check_value(f"input (of child run of {d.get('workflow')!r})", d.get("input"))
            return self._child(row, waiting, start=look is Look.START_CHILD)
        elif look is Look.OPEN_PARALLEL:
            self._open_parallel(row, ctx, waiting, view, now, carried)
        elif look is Look.PARALLEL:
            return self.store.drivers.get_parallel(run_id, waiting.scope, waiting.pos, now)
        elif look is Look.APPROVAL and self.approvals is not None:
            return gate_outcome(self.approvals, run_id, ctx.workflow, waiting, now)
        elif look is Look.LOCK and self.locks is not None:
            key = Locks.checked(str(d.get("key")))
            holder = f"{run_id}#{waiting.scope or 'top'}"
            if d.get("action") == "release":
                self.locks.release(key, holder, run_id)
                return {"released": True}
            return {"held": True} if self.locks.acquire(key, holder, run_id, row.step,
                                                        waiting.since) else None
        elif look is Look.STATE and self.state is not None:
            try:
                return {"committed": self.state.perform(run_id, waiting, now)}
            except UsageError as exc:  # a name or value the orchestrator refuses
                return {"refused": exc.to_dict()}
        return None

    def _body(self, row: StepRecord, ctx: RunContext, view: JournalView,
              attempts: dict[str, int]) -> dict[str, Any]:
        scope = scope_of(row.step)
        body: dict[str, Any] = {
            "run": {"run_id": row.run_id, "workflow": ctx.served,
                    "started_at": ctx.started_at, "now": self.clock(), "attempt": row.attempt,
                    "subject": ctx.subject, "max_value": self.settings.output_hard_cap},
            "input": ctx.input,
            "journal": [self._shown(row.run_id, e) for e in view.entries
                        if in_view(str(e.get("scope", "")), scope)],
            "target": scope,
            "attempts": attempts,
        }
        if self.settings.durable_protocol >= 2:
            body["protocol"] = self.settings.durable_protocol
            # The call starts no step body past this (an HTTP timeout ends it later).
            body["budget"] = max(0.5, row.timeout * CALL_BUDGET)
        return body

    def _call(self, row: StepRecord, ctx: RunContext, target: Target, view: JournalView,
              attempts: dict[str, int], refs: list[bool], tally: Tally) -> Turn:
        """One call, its checkpoints committed. `refs` holds one flag: set once the host
        refused a body with a 413, so the rest of this chain sends its journal by
        reference at once."""
        body = self._body(row, ctx, view, attempts)
        raw = dumps(body).encode()
        by_reference = refs[0] or len(raw) > self.settings.durable_inline_body
        if by_reference:
            raw = self._by_reference(row, body)
        exchange = self._open(row, ctx, target, raw)
        first = self._first(row, exchange, tally)
        if isinstance(first, Result) and not by_reference \
                and (first.outcome.error or {}).get("status") == 413:
            # The host refused a body this large: the journal goes by reference.
            refs[0] = True
            exchange = self._open(row, ctx, target, self._by_reference(row, body))
            first = self._first(row, exchange, tally)
        if first is None:
            return Turn(gone=True, checked=self.clock())
        if isinstance(first, Result):
            return self._answered(row, view, first)
        return self._streamed(row, ctx, view, exchange, first, tally)

    def _first(self, row: StepRecord, exchange: Exchange, tally: Tally) -> Item | None:
        """The first thing the call answers, looking for a stop every STOP_CHECK_EVERY
        meanwhile (the call's first step may run long before its checkpoint); None when
        the run stopped or the lease was lost: the call is hung up on."""
        # Real time, as the call's own timeout is (a test's clock may jump meanwhile).
        deadline = time.monotonic() + row.timeout + self.settings.lease_margin
        while True:
            item = exchange.take(STOP_CHECK_EVERY)
            if item is not IDLE or time.monotonic() >= deadline:
                return item
            if self._stopped(row):
                exchange.stop()
                self._give_up(row, tally, self.clock())
                return None

    def _open(self, row: StepRecord, ctx: RunContext, target: Target, raw: bytes
              ) -> Exchange:
        return Exchange(self.invoker, self._request(row, ctx, target, raw),
                        max_line=self.invoker.max_body)

    def _answered(self, row: StepRecord, view: JournalView, result: Result) -> Turn:
        """A version 1 answer (or a call that failed): commit its entries in order."""
        if result.outcome.kind is not OutcomeKind.SUCCESS:
            return Turn(failure=result.outcome)
        try:
            answer = json.loads(result.raw)
        except ValueError:
            return Turn(failure=_bad("the workflow's answer is not JSON"))
        now = self.clock()
        try:
            entries, after = read_answer(answer, now, scope_of(row.step))
        except BadAnswer as exc:
            return Turn(failure=_bad(f"workflow {row.run_id}: {exc}"))
        committed = 0
        for entry in entries:
            stored = self.store.journal.put_entry(row.run_id, entry, self.clock())
            if stored.get("id") != entry.get("id"):
                after = _conflict(entry, stored, now)
                break
            view.add(stored)
            if stored is entry:  # written now (not adopted from an earlier call)
                telemetry.operation_span(row.run_id, stored)
            committed += 1
        return Turn(after=after, committed=committed)

    def _streamed(self, row: StepRecord, ctx: RunContext, view: JournalView,
                  exchange: Exchange, item: Item, tally: Tally) -> Turn:
        """A version 2 answer: commit its checkpoints as they arrive (several that came
        together in one request), in order; the first that finds another outcome at its
        place ends the exchange, and the next call replays what is committed."""
        target = scope_of(row.step)
        ops: list[DurableOp] = []  # what is not a checkpoint, in order
        committed = 0
        checked = self.clock()
        end: EndOp | None = None
        try:
            while True:
                if item is IDLE or self.clock() - checked >= STOP_CHECK_EVERY:
                    checked = self.clock()
                    if self._stopped(row):
                        self._give_up(row, tally, checked)
                        return Turn(gone=True, checked=checked)
                if isinstance(item, StreamCut):
                    return Turn(failure=item.outcome, committed=committed, checked=checked)
                if isinstance(item, Result) or item is END:
                    return Turn(failure=_bad(f"workflow {ctx.served}: the answer ended before"
                                             " its end line"), committed=committed,
                                checked=checked)
                if isinstance(item, Lines):
                    entries: list[dict[str, Any]] = []
                    for line in item.lines:
                        try:
                            op = read_op(line)
                        except BadAnswer as exc:
                            return Turn(failure=_bad(f"workflow {ctx.served}: {exc}"),
                                        committed=committed, checked=checked)
                        if isinstance(op, RecordOp):
                            entries.append(op.entry.doc())
                        elif isinstance(op, EndOp):
                            end = op
                        else:
                            ops.append(op)
                    entries, clash = new_entries(view, entries)
                    stored = self.store.journal.commit_entries(row.run_id, entries, self.clock())
                    if clash is not None and len(stored) == len(entries) \
                            and stored == entries:
                        # The call sent another entry for a place it sent before: the
                        # next call replays what is committed.
                        entries, stored = [*entries, clash[0]], [*stored, clash[1]]
                    for ours, got in zip(entries, stored, strict=False):
                        view.add(got)
                        if got != ours:
                            # Another execution committed this place first: nothing this
                            # call computed after it counts.
                            conflict = (_conflict(ours, got, self.clock())
                                        if got.get("id") != ours.get("id") else Continue())
                            return Turn(after=conflict, committed=committed + 1,
                                        checked=checked)
                        telemetry.operation_span(row.run_id, got)
                        committed += 1
                    if len(view) > self.settings.durable_max_entries:
                        return Turn(after=Continue(), committed=committed, checked=checked)
                    if end is not None:
                        return Turn(after=next_move(ops, self.clock(), target, end.deadline,
                                                    view.entries[len(view) - committed:]),
                                    committed=committed, checked=checked,
                                    carried=_branch_retries(ops, self.clock(), target))
                item = exchange.take(STOP_CHECK_EVERY)
        except BadAnswer as exc:
            return Turn(failure=_bad(f"workflow {ctx.served}: {exc}"), committed=committed,
                        checked=checked)
        finally:
            exchange.stop()

    def _request(self, row: StepRecord, ctx: RunContext, target: Target, raw: bytes) -> Call:
        return Call(url=target.url, secret=target.secret, run_id=row.run_id,
                    workflow=ctx.workflow, step=row.step, attempt=row.attempt,
                    timeout=row.timeout, input=None, steps=None, payload={}, raw_body=raw)

    def _by_reference(self, row: StepRecord, body: dict[str, Any]) -> bytes:
        """The call's body with its journal in the blob store, fetched by a presigned
        URL (good for 15 minutes)."""
        key = f"calls/{row.run_id}/{uuid.uuid4().hex}.json"
        self.executor.blobs.put(key, dumps(body["journal"]).encode())
        lean = {k: v for k, v in body.items() if k != "journal"}
        return dumps({**lean, "journal_ref": {"url": self.executor.blobs.url(key)}}).encode()

    def _shown(self, run_id: str, entry: dict[str, Any]) -> dict[str, Any]:
        """An entry as the workflow gets it: a hook's with its token and URL, which the
        journal does not keep (they are derived again, never stored)."""
        if entry.get("kind") != "hook" or self.hooks is None or entry.get("status") != "ok":
            return entry
        token = self.hooks.token_for(run_id, str(entry["id"]))
        return {**entry, "value": {**(entry.get("value") or {}), "token": token,
                                   "url": self.hooks.url_for(token)}}

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
                 tally: Tally, *, send: bool = False, settle: bool = False) -> str:
        """Release the run to wait; a timer message if its wait ends within reach.
        `settle`: a poke that landed meanwhile does not keep the lease (the caller has
        nothing to look at again: the run goes to the queue or is paused)."""
        for _ in range(8 if settle else 1):
            left = self._release(row, pokes, waiting, now, tally, send=send)
            if left != "poked" or not settle:
                return left
            fresh = self.store.drivers.get_driver(row.run_id, row.step)
            pokes = fresh.pokes if fresh is not None else pokes + 1
        return left

    def _release(self, row: StepRecord, pokes: int, waiting: Waiting, now: float,
                 tally: Tally, *, send: bool = False) -> str:
        out = release_of(waiting, now, redispatch_after=self.executor.store.wake.redispatch_after,
                              send=send)
        left = self.store.drivers.suspend_driver(
            row.run_id, row.lease_owner or "", row.attempt, pokes, waiting.to_json(), out.due,
            out.wake, now, reset_attempt=row.attempt > 1, step=row.step)
        if left == "stopping":
            # The run is being cancelled and the lease is still ours: end the driver.
            self._give_up(row, tally, now)
            return left
        if left == "ok" and out.due is not None and (out.dispatch or out.timer):
            attempt = 1 if row.attempt > 1 else row.attempt
            msg = Dispatch(run_id=row.run_id, step=row.step, attempt=attempt,
                           due_at=None if out.dispatch else out.due)
            if out.dispatch:
                self.queues.dispatch([msg])
            else:
                self.queues.timer(msg, now)
        return left

    # ---- parallel branches ---------------------------------------------------------------

    def _open_parallel(self, row: StepRecord, ctx: RunContext, waiting: Waiting,
                       view: JournalView, now: float, carried: dict[str, Waiting]) -> None:
        """A parallel operation begins: its aggregate, then its first branches."""
        total, limit = int(waiting.detail["branches"]), int(waiting.detail["max"])
        done = {i for i in range(total)
                if branch_scope(waiting.scope, waiting.pos, i) in view.ended}
        first, cursor = first_branches(total, limit, done)
        # Only those before the cursor count as done now: one past it is counted when the
        # cursor reaches it and its row finds its result, passing its slot on.
        self.store.drivers.open_parallel(row.run_id, waiting.scope, waiting.pos, total, limit,
                                         {i for i in done if i < cursor}, cursor, now)
        self._start_branches(row, ctx, [branch_scope(waiting.scope, waiting.pos, i)
                                        for i in first], now, carried)

    def _start_branches(self, row: StepRecord, ctx: RunContext, scopes: list[str],
                        now: float, carried: dict[str, Waiting] | None = None) -> None:
        spec = ctx.definition.specs[DRIVER] if ctx.definition is not None else None
        sends = []
        for scope in scopes:
            # A branch that failed an attempt in its parent's call waits out its backoff.
            wait = (carried or {}).get(scope)
            branch = StepRecord(
                run_id=row.run_id, step=row_of(scope), status=StepStatus.READY,
                backend=spec.backend if spec else row.backend,
                route=spec.route if spec else row.route,
                # Not counted towards the run's finish: the top's driver ends the run.
                dependants=(DRIVER,), attempt=1, max_attempts=row.max_attempts,
                timeout=row.timeout, retry_strategy=row.retry_strategy,
                retry_delay=row.retry_delay, retry_max_delay=row.retry_max_delay,
                ready_at=now, wake_at=now + self.store.wake.redispatch_after,
                history=({"at": round(now, 3), "type": "step.ready"},),
                waiting=None if wait is None else wait.to_json(),
            )
            try:
                self.store.steps.create_step_if_absent(branch)
            except ConditionFailed:
                continue  # started before (a repeated call); its dispatch went then
            sends.append(Dispatch(run_id=row.run_id, step=branch.step, attempt=1))
        if sends:
            self.queues.dispatch(sends)

    def _branch_done(self, row: StepRecord, ctx: RunContext, scope: str, tally: Tally) -> None:
        """A branch's code ended: count it, start the next branch waiting, wake the parent
        if it was the last, end its row. A worker dying before the row's end leaves it
        leased, and its retry does all of this again (each part idempotent); if the
        parent goes on first, it ends the row itself (`_settle_branches`)."""
        parent, _, last = scope.rpartition("/")
        pos, index = (int(x) for x in last.split(":", 1))
        agg = self.store.drivers.branch_done(row.run_id, parent, pos, index)
        now = self.clock()
        if agg["start"] is not None:
            self._start_branches(row, ctx, [branch_scope(parent, pos, agg["start"])], now)
        if len(agg["done"]) >= agg["total"]:
            self.wake(row.run_id, row_of(parent))
        try:
            self.store.steps.record_success(
                row.run_id, row.step, row.attempt, row.lease_owner or "",
                output_json="null", output_ref=None, size=0, now=now)
        except ConditionFailed:
            pass  # the lease was lost: its next holder finds the branch done and ends it

    def _child(self, row: StepRecord, waiting: Waiting, start: bool) -> dict[str, Any] | None:
        """Start the child of a call or spawn (`start`: once, idempotent); a spawn's child
        once started, a call's once ended."""
        assert self.children is not None
        d = waiting.detail
        child_id = child_run_id(row.run_id, waiting.id)
        if start:
            self.children.start(row.run_id, row.step, waiting.place(), str(d["workflow"]),
                                d.get("input"), waits=waiting.kind is WaitKind.CALL)
            if waiting.kind is WaitKind.SPAWN:
                return {"run_id": child_id}
            return None
        child = self.store.runs.get_run(child_id, self.clock())
        if child is None:
            return {"run_id": child_id, "status": "failed",
                    "error": {"code": Code.RUN_MISSING, "message": "the child run is gone"}}
        if not child.status.terminal:
            return None
        out: dict[str, Any] = {"run_id": child_id, "status": child.status.value,
                               "error": child.error}
        if child.definition.durable is not None:
            driver = self.store.drivers.get_driver(child_id)
            if driver is not None and driver.status is StepStatus.SUCCESS:
                out["output"] = self.executor.load_output(driver)
        else:
            out["output"] = {"run_id": child_id, "status": child.status.value}
        return out

    def _settle_branches(self, run_id: str, waiting: Waiting, now: float) -> None:
        """Every branch of a parallel operation is done: end the rows of any whose
        holder died between counting it and ending it (one query), so no row of the run
        stays in flight once the parent goes on."""
        prefix = row_of(branch_scope(waiting.scope, waiting.pos, 0))[:-1]
        for branch in self.store.drivers.all(run_id):
            if branch.step.startswith(prefix) and "/" not in branch.step[len(prefix):] \
                    and not branch.status.terminal:
                self.store.drivers.settle_branch(run_id, branch.step, now)

    def wake(self, run_id: str, step: str) -> None:
        """Poke a driver row; dispatch it if nobody holds it."""
        poked = self.store.drivers.poke_driver(run_id, self.clock(), step)
        if poked is not None:
            self.queues.dispatch([Dispatch(run_id=run_id, step=step, attempt=poked.attempt)])

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


def _place(entry: dict[str, Any]) -> dict[str, Any]:
    return {k: entry.get(k) for k in ("scope", "pos", "id", "kind", "name")}


@dataclass(frozen=True)
class Turn:
    """How one call went: what follows it, or why it failed as a whole; how many
    entries it committed; whether the run left this worker meanwhile (`gone`); when the
    run was last looked at for a cancel; the waits its parallel branches reported."""

    after: Next | None = None
    failure: Outcome | None = None
    committed: int = 0
    gone: bool = False
    checked: float = 0.0
    carried: dict[str, Waiting] = field(default_factory=dict)


def _bad(message: str) -> Outcome:
    return Outcome(OutcomeKind.RETRYABLE, error=error_doc(Code.BAD_ANSWER, message))


def _conflict(entry: dict[str, Any], stored: dict[str, Any], now: float) -> Pause:
    """Another call committed a different operation at `entry`'s place: the code differs
    between the two (a deploy mid-run). Pause, as for a mismatch."""
    return Pause(
        Waiting(WaitKind.MISMATCH, str(entry.get("scope", "")), int(entry["pos"]),
                str(entry.get("id")), str(entry.get("name")), since=now,
                detail={"recorded": _place(stored), "issued": _place(entry)}),
        {"code": Code.REPLAY_MISMATCH,
         "message": f"two calls recorded different operations at position "
                    f"{entry['pos']}: {stored.get('name')!r} and {entry.get('name')!r}"})


def _branch_retries(ops: list[DurableOp], now: float, target: str) -> dict[str, Waiting]:
    """The retries parallel branches inside `target` reported (their backoff carries
    over to the branch's own driver)."""
    out: dict[str, Waiting] = {}
    for op in ops:
        if isinstance(op, RetryOp) and op.scope != target:
            waiting = wait_of(op, now, None)
            if waiting is not None:
                out[op.scope] = waiting
    return out
