"""The worker: receive a dispatch, claim the attempt, call the function, record the
result, advance the run. Stateless: any number of them may run, and any may die.

A worker that promotes a dependant takes the first one straight into its own lease and
runs it next (a chain costs no queue round-trips); the rest go to the queue for any
worker to pick up. A worker dying mid-chain leaves a leased row that the sweeper
re-dispatches when the lease expires."""

from __future__ import annotations

import itertools
import logging
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from orchestrator import logs, telemetry
from orchestrator.adapters.invoker import Call, Invoker
from orchestrator.adapters.messages import AdmitRun, AnyMessage, Dispatch, Promote
from orchestrator.adapters.metering import charge, metered
from orchestrator.adapters.queue import Received
from orchestrator.adapters.store import Lease
from orchestrator.engine.attempts import (
    Fail,
    Retry,
    Succeed,
    after_attempt,
    inputs_unavailable,
    output_not_kept,
    run_missing,
    timer_hop,
    unknown_backend,
    wait_before,
)
from orchestrator.engine.context import RunContext
from orchestrator.engine.durable import is_driver
from orchestrator.engine.records import StepRecord
from orchestrator.errors import ConditionFailed, OrchestratorError, StoreError
from orchestrator.services.approval_steps import ApprovalSteps
from orchestrator.services.approvals import Approvals
from orchestrator.services.children import Children
from orchestrator.services.conditions import CONDITION_FALSE, holds
from orchestrator.services.durable import Durable, Target
from orchestrator.services.event_waits import EventWaits
from orchestrator.services.executor import LRU, Executor, Tally
from orchestrator.services.fan_out import FanOutSteps
from orchestrator.services.hooks import Hooks
from orchestrator.services.locks import Locks
from orchestrator.services.state_cells import StateService
from orchestrator.services.step_locks import step_lock, unlock_step

__all__ = ["BackendRef", "Worker"]

log = logging.getLogger("orchestrator.worker")

_MISSING = object()
FLUSH_EVERY = 0.05
# A run with at most this many sinks has its counts written as soon as its attempt ends
# (there is little to fold, and its finish need not wait for the next flush).
FLUSH_NOW_SINKS = 4
DELETE_WITHIN = 1.0
# A received message still waiting for a free thread after this long is handed back to
# the queue: a worker whose threads are all held up (slow calls) must not keep messages
# from workers that are idle.
HAND_BACK_AFTER = 1.0


@dataclass(frozen=True)
class BackendRef:
    url: str
    secret: str | None = None


class Worker:
    def __init__(
        self,
        executor: Executor,
        invoker: Invoker,
        backends: Mapping[str, BackendRef],
        *,
        admit: Callable[[str], object] | None = None,
        clock: Callable[[], float] = time.time,
        rand: Callable[[], float] = random.random,
        sleep: Callable[[float], object] = time.sleep,
        worker_id: str | None = None,
        event_waits: EventWaits | None = None,
        hooks: Hooks | None = None,
        children: Children | None = None,
        approvals: Approvals | None = None,
        state: StateService | None = None,
        locks: Locks | None = None,
    ) -> None:
        self.executor = executor
        self.store = executor.store
        self.queues = executor.queues
        self.settings = executor.settings
        self.invoker = invoker
        self.backends = dict(backends)
        self.clock = clock
        self.rand = rand
        self.id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._claims = itertools.count(1)
        # A deadline the attempts on this thread must end by: (when, margin). Set by
        # `handle_before` (a Lambda invocation's remaining time); none for a process.
        self._limit = threading.local()
        self._contexts: LRU = LRU(2048)
        self._outputs: LRU = LRU(8192)
        self._lock = threading.Lock()
        self._deletes: dict[str, list[str]] = {}
        self._delete_runs: dict[str, str] = {}  # receipt -> its message's run
        # While the poll loop runs, terminal-step counts and message deletes from all
        # threads are folded together and written every FLUSH_EVERY seconds: one
        # counter write per run per flush instead of one per message.
        self._batching = False
        self._folds = 0  # `folding` scopes open
        self._tally = Tally()
        # Likewise a wide join's completions: (run, join) -> (its in-degree, the
        # dependencies that succeeded since the last flush), one write each per flush.
        # Lost with the process, they are the sweeper's to repair, like any promotion.
        self._joins: dict[tuple[str, str], tuple[int, set[str]]] = {}
        self._oldest_ack = float("inf")
        # Messages received and not yet acknowledged: (queue, receipt) -> when their
        # invisibility was last renewed. They wait here for a thread; a worker that
        # dies holding them frees them within one visibility timeout.
        self._held: dict[tuple[str, str], float] = {}
        # Of those, the ones still waiting for a thread (-> when received), and the ones
        # handed back meanwhile (their thread drops them).
        self._waiting: dict[tuple[str, str], float] = {}
        self._handed_back: set[tuple[str, str]] = set()
        self.sleep = sleep
        # Admission of a queued run whose throttle slot came due.
        self.admit = admit
        self.durable = Durable(executor, invoker, clock=clock, rand=rand, events=event_waits,
                               hooks=hooks, children=children, approvals=approvals,
                               state=state, locks=locks)
        self.locks = locks
        self.fan_out = FanOutSteps(executor, invoker, clock=clock, rand=rand, sleep=sleep)
        self.approval_steps = (None if approvals is None
                               else ApprovalSteps(executor, approvals, clock))

    # ---- one message -----------------------------------------------------------------

    def lease(self) -> Lease:
        """A lease of this worker's, named apart from every other it takes: its threads
        may claim copies of one message in the same millisecond, and a claim that finds
        the row already leased to its own name takes it for its own landed write
        (tables.landed)."""
        return Lease(f"{self.id}#{next(self._claims)}",
                     self.clock() + self.settings.lease_margin)

    def handle_before(self, msg: AnyMessage, deadline: float, margin: float, *,
                      parent: str | None = None) -> bool:
        """Handle `msg` only if its attempt can end by `deadline` (wall clock): its step's
        timeout plus `margin` must fit, after any wait for its due time; inline
        successors are held to the same terms (sent to the queue instead). False: not
        started, for the caller to hand back (a Lambda batch item failure)."""
        if isinstance(msg, Dispatch) and not self._fits(msg, deadline, margin):
            return False
        self._limit.deadline = (deadline, margin)
        try:
            self.handle(msg, parent=parent)
        finally:
            self._limit.deadline = None
        return True

    def _fits(self, msg: Dispatch, deadline: float, margin: float) -> bool:
        now = self.clock()
        if timer_hop(msg.due_at, now):
            return True  # only sent on as a timer hop: no attempt starts
        ctx = self.context(msg.run_id)
        if ctx is None:
            return True  # nothing will run: the claim finds no run
        wait = max(0.0, (msg.due_at or now) - now)
        need = ctx.timeouts.get(msg.step, self.settings.default_step_timeout)
        return now + wait + need + margin <= deadline

    def _room_for(self, ctx: RunContext | None, steps: tuple[str, ...]) -> bool:
        """Whether the longest of `steps` fits before this thread's deadline, if any."""
        limit = getattr(self._limit, "deadline", None)
        if limit is None or ctx is None:
            return True
        deadline, margin = limit
        need: float = max((ctx.timeouts.get(s, self.settings.default_step_timeout) for s in steps),
                   default=0.0)
        return bool(self.clock() + need + margin <= deadline)

    def handle(self, msg: AnyMessage, receipt: Received | None = None, *,
               parent: str | None = None) -> None:
        """Claim the attempt the message names and run it (and its inline successors).
        Its AWS requests are counted for the message's run (adapters/metering.py).
        `parent`: the sender's span (W3C traceparent) when not on the receipt."""
        with metered(msg.run_id):
            if not telemetry.active():
                self._handle(msg, receipt)
                return
            step = getattr(msg, "step", "")
            if parent is None and receipt is not None:
                parent = receipt.traceparent
            with telemetry.message_span(msg.run_id, msg.op, step, parent):
                self._handle(msg, receipt)

    def _handle(self, msg: AnyMessage, receipt: Received | None) -> None:
        now = self.clock()
        if timer_hop(msg.due_at, now):
            self.queues.timer(msg, now)  # sent on for the rest of its wait
            self._ack(receipt)
            return
        wait = wait_before(msg.due_at, now)
        if wait > 0:
            self.sleep(wait)
            now = self.clock()  # the attempt starts now, not when its message came
        if isinstance(msg, AdmitRun):
            if self.admit is not None:
                self.admit(msg.run_id)
            self._ack(receipt)
            return
        if isinstance(msg, Promote):
            ctx = self.context(msg.run_id)
            if ctx is not None:
                self.executor.promote_slice(msg, ctx, self._fold if self._batching else None)
            self._ack(receipt)
            return
        row: StepRecord | None = None
        if msg.after is not None and msg.attempt == 1:
            # Its only dependency succeeded: promote and claim it in one write. None if it
            # is no longer blocked (a sweep promoted it: claim it below, as ready).
            # The row may not be written yet (its start leaves such steps out): the
            # plan in the run's context creates it in the same write.
            ctx = self.context(msg.run_id)
            row = self.store.steps.satisfy(msg.run_id, msg.step, msg.after, 1, self.lease(), now,
                                           ready_at=msg.ready_at,
                                           plan=ctx.plan(msg.step) if ctx is not None else None)
        elif msg.planned and msg.attempt == 1:
            # A root its run's start left out: its claim creates its row. None if the
            # row exists (a sweep or a stop wrote it): claimed below, as it stands.
            row = self._claim_planned(msg, now)
        if row is None:
            try:
                row = self.store.steps.claim(msg.run_id, msg.step, msg.attempt, self.lease(), now)
            except ConditionFailed:
                # A duplicate, a late message, or a step already taken; or a root its
                # start left out, named by a message that does not say so (one sent
                # before an upgrade, or by hand): its claim creates its row.
                row = None if msg.planned or msg.attempt != 1 else self._claim_planned(msg, now)
        self._ack(receipt)
        tally = Tally()
        try:
            while row is not None:
                row = self._attempt(row, tally)
        finally:
            self._count(tally)

    def _attempt(self, row: StepRecord, tally: Tally) -> StepRecord | None:
        """`execute`, in its span and with its log fields bound when either is on; its
        end logged with its duration."""
        if not (telemetry.active() or logs.active()):
            return self.execute(row, tally)
        began = time.monotonic()
        with telemetry.attempt_span(row.run_id, row.step, row.attempt, self.id), \
                logs.bound(run_id=row.run_id, step=row.step, attempt=row.attempt,
                           worker_id=self.id):
            try:
                return self.execute(row, tally)
            finally:
                log.info("attempt ended", extra={
                    "duration_ms": round((time.monotonic() - began) * 1000, 1)})

    def _claim_planned(self, msg: Dispatch, now: float) -> StepRecord | None:
        """Claim attempt 1 of a root its run's start left out, creating its row; None if
        it is not such a root or its row exists."""
        ctx = self.context(msg.run_id)
        plan = ctx.plan(msg.step) if ctx is not None else None
        if ctx is None or plan is None or plan.deps:
            return None
        return self.store.steps.claim_planned(plan, self.lease(), now,
                                              ready_at=msg.ready_at or ctx.started_at)

    def _count(self, tally: Tally) -> None:
        """Hand an attempt's terminal counts on: while the poll loop runs, folded into the
        next flush, except for runs with few sinks (written now: one of them may finish
        the run, and folding would only make it wait)."""
        if not self._batching:
            self.executor.flush(tally)
            return
        now = Tally()
        with self._lock:
            for run_id, n in tally.counts.items():
                ctx = self._contexts.get(run_id)
                if ctx is not None and 0 < ctx.sinks <= FLUSH_NOW_SINKS:
                    now.add(run_id, n)
                else:
                    self._tally.add(run_id, n)
        if now.counts:
            try:
                self.executor.flush(now)
            except OrchestratorError as exc:  # the sweeper finishes the run if this is lost
                log.warning("count failed: %s", exc)

    def _fold(self, run_id: str, join: str, dep: str, ndeps: int) -> None:
        with self._lock:
            self._joins.setdefault((run_id, join), (ndeps, set()))[1].add(dep)

    def _ack(self, receipt: Received | None) -> None:
        if receipt is None:
            return
        with self._lock:
            self._held.pop((receipt.queue, receipt.receipt), None)
            self._deletes.setdefault(receipt.queue, []).append(receipt.receipt)
            if receipt.message is not None:  # whose run a batch delete is counted for
                self._delete_runs[receipt.receipt] = receipt.message.run_id
            self._oldest_ack = min(self._oldest_ack, time.monotonic())

    @contextmanager
    def folding(self) -> Iterator[None]:
        """Fold the terminal counts and wide joins' completions of what is handled
        inside, and write them once at the end: a Lambda invocation's batch costs one
        count write per run and one per join, as a poll loop's flush does, not one per
        record. Lost with the invocation, they are the sweeper's to repair.

        Scopes may overlap (`orchestrator dev --lambda` and the cost bench run a
        mapping's four invocations at once in one process, where AWS gives each its
        own): folding goes on until the last one ends, and each writes what is folded
        when it ends. Were the first to end to stop it, the others' records would each
        count a wide join's completion in a write of its own, which no invocation on
        AWS does."""
        with self._lock:
            self._folds += 1
            self._batching = True
        try:
            yield
        finally:
            with self._lock:
                self._folds -= 1
                if not self._folds:
                    self._batching = False
            self.flush()

    def flush(self, *, force: bool = True) -> None:
        """Write the folded counts and delete the acknowledged messages: deletes go ten
        to a request, or once the oldest waited DELETE_WITHIN seconds (a claimed message
        redelivered meanwhile finds its guard false, so waiting is safe)."""
        now = time.monotonic()
        with self._lock:
            tally, self._tally = self._tally, Tally()
            joins, self._joins = self._joins, {}
            due = force or now - self._oldest_ack >= DELETE_WITHIN or any(
                len(r) >= 10 for r in self._deletes.values())
            pending: dict[str, list[str]] = {}
            if due:
                pending, self._deletes = self._deletes, {}
                self._oldest_ack = float("inf")
        for (run_id, join), (ndeps, deps) in joins.items():
            try:
                with metered(run_id):
                    self.executor.satisfy_many(run_id, join, deps, ndeps,
                                               self.context(run_id))
            except OrchestratorError as exc:  # the sweeper promotes the join if lost
                log.warning("join %s/%s: count failed: %s", run_id, join, exc)
        try:
            self.executor.flush(tally)
        except OrchestratorError as exc:  # the sweeper finishes the run if this is lost
            log.warning("count flush failed: %s", exc)
        self._renew(now)
        for url, receipts in pending.items():
            for i in range(0, len(receipts), 10):
                # A batch delete is counted for its first message's run (metering.py).
                chunk = receipts[i:i + 10]
                with self._lock:
                    runs = [self._delete_runs.pop(r, None) for r in chunk]
                try:
                    with metered(runs[0]):
                        self.queues.delete(url, chunk)
                except StoreError as exc:  # redelivery is harmless: the claim guard holds
                    log.warning("delete failed: %s", exc)

    def _renew(self, now: float) -> None:
        """Hand back the messages that waited HAND_BACK_AFTER for a thread; renew the
        invisibility of the other held ones past half their timeout."""
        visibility = self.settings.visibility_timeout
        with self._lock:
            back = [k for k, t in self._waiting.items() if now - t >= HAND_BACK_AFTER]
            for k in back:
                del self._waiting[k]
                self._held.pop(k, None)
                self._handed_back.add(k)
            stale = [k for k, t in self._held.items() if now - t >= visibility / 2]
            for k in stale:
                self._held[k] = now
        for keys, seconds in ((back, 0.0), (stale, visibility)):
            by_queue: dict[str, list[str]] = {}
            for url, receipt in keys:
                by_queue.setdefault(url, []).append(receipt)
            for url, receipts in by_queue.items():
                try:
                    self.queues.keep_invisible(url, receipts, seconds)
                except StoreError as exc:  # redelivered: the claim guard holds
                    log.warning("visibility change failed: %s", exc)

    # ---- one attempt -------------------------------------------------------------------

    def start_check(self, run_id: str) -> RunContext | None:
        """The start check (DESIGN.md, invariant 5): the run's context with its stop
        flags as they are now, read strongly consistent (all else a context holds never
        changes: only the flags are read again, or the whole run if it is not cached).
        None if the run is gone."""
        with self._lock:
            ctx: RunContext | None = self._contexts.get(run_id)
        if ctx is None:
            return self.context(run_id)
        flags = self.store.runs.run_flags(run_id, self.clock())
        if flags is None:
            return None
        stopping, created_at = flags
        if created_at != ctx.created_at:
            # Another run of this id (the one cached expired, and its row was deleted):
            # its context read whole, strongly consistent, is this start check.
            with self._lock:
                self._contexts.pop(run_id, None)
            return self.context(run_id)
        if stopping != ctx.stopping:
            ctx = replace(ctx, stopping=stopping)
            with self._lock:
                self._contexts.put(run_id, ctx)
        return ctx

    def context(self, run_id: str) -> RunContext | None:
        """The run's context, cached (its stop flags as first read: `start_check` reads
        them again)."""
        with self._lock:
            ctx: RunContext | None = self._contexts.get(run_id)
        if ctx is None:
            run = self.store.runs.get_run(run_id, self.clock())
            if run is None:
                return None
            ctx = RunContext.of(run)
            with self._lock:
                self._contexts.put(run_id, ctx)
        return ctx

    def dep_outputs(self, row: StepRecord, created_at: float = 0.0) -> dict[str, Any] | None:
        """The outputs of `row`'s dependencies, cached by run (`created_at`: which run of
        that id) and step."""
        if not row.deps:
            return None
        out: dict[str, Any] = {}
        missing = []
        with self._lock:
            for d in row.deps:
                cached = self._outputs.get((row.run_id, created_at, d), _MISSING)
                if cached is _MISSING:
                    missing.append(d)
                else:
                    out[d] = cached
        if missing:
            for name, dep in self.store.steps.get_outputs(row.run_id, missing).items():
                out[name] = self.executor.load_output(dep)
        return {d: out.get(d) for d in row.deps}

    def _not_a_call(self, row: StepRecord, ctx: RunContext, tally: Tally) -> bool:
        """Carry out what the step is instead of a call, if it is: skipped by its `if:`
        (read once its dependencies are done, right before the call), or an approval
        gate. False: call it."""
        spec = ctx.definition.specs.get(row.step) if ctx.definition is not None else None
        if spec is None or (spec.condition is None and spec.approval is None
                            and spec.lock is None and spec.fan_out is None):
            return False
        assert ctx.definition is not None
        if not holds(spec, list(ctx.definition.specs), ctx.input,
                     lambda names: self.store.steps.get_outputs(row.run_id, names),
                     self.executor.load_output):
            self.executor.succeed(row, ctx, "null", None, 0, tally, keep_one=None,
                                  skipped=CONDITION_FALSE)
            return True
        if spec.approval is not None and self.approval_steps is not None:
            self.approval_steps.advance(row, ctx, spec.approval, tally)
            return True
        if spec.lock is not None and self.locks is not None:
            return not step_lock(self.executor, self.locks, row, ctx, spec.lock, tally)
        backend = self.backends.get(row.backend)
        if spec.fan_out is not None and backend is not None:
            steps = self.dep_outputs(row, ctx.created_at)
            self.fan_out.advance(row, ctx, spec.fan_out, backend.url.rstrip("/") + row.route,
                                 backend.secret, steps, tally,
                                 room=lambda: self._room_for(ctx, (row.step,)))
            return True
        return False

    def _unlock(self, row: StepRecord, ctx: RunContext) -> None:
        """A step that took a lock (`lock:`) lets it go once it has ended."""
        spec = ctx.definition.specs.get(row.step) if ctx.definition is not None else None
        if spec is not None and spec.lock is not None and self.locks is not None:
            unlock_step(self.locks, row, ctx, spec.lock)

    def execute(self, row: StepRecord, tally: Tally) -> StepRecord | None:
        """Run one claimed attempt; return the next row to run inline, if any."""
        # The start check (DESIGN.md, invariant 5): with the lease taken, right before
        # the call, one strongly consistent read of the run's stop flags. A halt's
        # failure and a cancel set them in the write that commits them, so a step whose
        # check comes after that instant is never called, however late the stop's pass
        # over the rows. The attempt is given up as if its claim had been refused.
        ctx = self.start_check(row.run_id)
        if ctx is not None and ctx.stopping:
            gone = self.store.steps.abandon(
                row.run_id, row.step, row.attempt, row.lease_owner or "",
                "run stopped before the step started", self.clock(), unstart=row)
            if gone is not None and gone.counted:
                tally.add(row.run_id)
            return None
        backend = self.backends.get(row.backend)
        if ctx is not None and backend is not None and is_driver(row.step):
            target = Target(backend.url.rstrip("/") + row.route, backend.secret)
            self.durable.advance(row, ctx, target, tally,
                                 room=lambda: self._room_for(ctx, (row.step,)))
            return None
        if ctx is not None and self._not_a_call(row, ctx, tally):
            return None
        raw = b""
        if ctx is None:
            outcome = run_missing(row.run_id)
        elif backend is None:
            outcome = unknown_backend(row.step, row.backend)
        else:
            try:
                steps = self.dep_outputs(row, ctx.created_at)
            except (OrchestratorError, ValueError) as exc:
                outcome = inputs_unavailable(str(exc))
            else:
                call = Call(
                    url=backend.url.rstrip("/") + row.route,
                    secret=backend.secret,
                    run_id=row.run_id,
                    workflow=ctx.workflow,
                    step=row.step,
                    attempt=row.attempt,
                    timeout=row.timeout,
                    input=ctx.input,
                    steps=steps,
                    payload=row.payload,
                )
                result = self.invoker.invoke(call)
                outcome, raw = result.outcome, result.raw
        decision = after_attempt(row, outcome, self.clock(), self.rand())
        ctx = ctx or RunContext.missing(row.run_id)
        if isinstance(decision, Succeed):
            try:
                output_json, output_ref = self.executor.store_output(row, raw)
            except StoreError as exc:
                # The function answered, but its output could not be kept: the engine
                # decides this attempt like any other retryable failure.
                lost = output_not_kept(str(exc))
                retry_or_fail = after_attempt(row, lost, self.clock(), self.rand())
                assert not isinstance(retry_or_fail, Succeed)
                self.apply(row, ctx, retry_or_fail, tally)
                return None

            def remember() -> None:  # before dependants start: they read it from here
                if output_ref is None:
                    with self._lock:
                        self._outputs.put((row.run_id, ctx.created_at, row.step),
                                          decision.output)

            # The last dependant runs next on this thread, if it fits in its deadline.
            keep = self.lease() if self._room_for(ctx, row.dependants[-1:]) else None
            res = self.executor.succeed(
                row, ctx, output_json, output_ref, len(raw), tally, keep_one=keep,
                on_recorded=remember, fold=self._fold if self._batching else None,
            )
            self._unlock(row, ctx)
            return None if res is None else res[0]
        self.apply(row, ctx, decision, tally)
        if isinstance(decision, Fail):
            self._unlock(row, ctx)  # its last attempt: the lock goes on (a retry keeps it)
        return None

    def apply(self, row: StepRecord, ctx: RunContext, decision: Retry | Fail, tally: Tally) -> None:
        if isinstance(decision, Retry):
            self.executor.retry(row, decision, tally)
        else:
            self.executor.fail(row, ctx, decision, tally)

    # ---- the loop ----------------------------------------------------------------------

    def run(self, stop: threading.Event, *, threads: int | None = None, wait: int = 2) -> None:
        """Poll both queues until `stop` is set; run attempts on a thread pool."""
        n = threads or self.settings.worker_threads
        # Room for the running attempts plus one receive's worth of prefetched messages,
        # so a backlog is received ten at a time. The timer queue has a budget of its
        # own: its long-polls on an (often empty) queue must not hold dispatch room.
        budgets = {
            self.queues.dispatch_url: threading.Semaphore(n + 10),
            self.queues.timer_url: threading.Semaphore(10),
        }
        pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="step")
        self._batching = True
        queued = [0]  # received, not yet started

        def work(item: Received, slots: threading.Semaphore) -> None:
            key = (item.queue, item.receipt)
            with self._lock:
                queued[0] -= 1
                self._waiting.pop(key, None)
                handed_back = key in self._handed_back
                self._handed_back.discard(key)
            try:
                if handed_back:
                    pass  # back in the queue for any worker (this one's poller included)
                elif item.message is None:
                    self._ack(item)  # not ours: nothing to do with it
                else:
                    self.handle(item.message, item)
            except Exception:  # the message is redelivered; the rows stay the truth
                log.exception("step %s failed inside the worker", item.message)
            finally:
                slots.release()

        def poll(url: str) -> None:
            slots = budgets[url]
            while not stop.is_set():
                if not slots.acquire(timeout=0.2):
                    continue
                free = 1
                while free < 10:
                    if slots.acquire(blocking=False):
                        free += 1
                    elif queued[0] > 0 and not stop.is_set():
                        # Work is still waiting locally: nothing is lost by waiting for
                        # room for a full batch instead of receiving one at a time.
                        if slots.acquire(timeout=0.05):
                            free += 1
                    else:
                        break
                try:
                    got = self.queues.receive(url, max_messages=free, wait=wait,
                                              visibility=self.settings.visibility_timeout)
                except StoreError as exc:
                    log.warning("receive failed: %s", exc)
                    got = []
                    stop.wait(1.0)
                except Exception:  # anything else (a dropped connection): this loop goes on
                    log.exception("receive failed")
                    got = []
                    stop.wait(1.0)
                for _ in range(free - len(got)):
                    slots.release()
                if got and got[0].message is not None:
                    # A receive is counted for its first message's run (metering.py);
                    # an empty one is no run's.
                    charge(got[0].message.run_id, "sqs.ReceiveMessage")
                with self._lock:
                    queued[0] += len(got)
                    held = time.monotonic()
                    for item in got:
                        self._held[(item.queue, item.receipt)] = held
                        self._waiting[(item.queue, item.receipt)] = held
                for item in got:
                    pool.submit(work, item, slots)

        def flusher() -> None:
            while not stop.wait(FLUSH_EVERY):
                try:
                    self.flush(force=False)
                except Exception:  # what it could not write waits for the next pass
                    log.exception("flush failed")

        pollers = [
            threading.Thread(target=poll, args=(u,), name=f"poll-{i}", daemon=True)
            for i, u in enumerate((self.queues.dispatch_url, self.queues.timer_url))
        ]
        pollers.append(threading.Thread(target=flusher, name="flush", daemon=True))
        for t in pollers:
            t.start()
        stop.wait()
        for t in pollers:
            t.join(timeout=wait + 5)
        pool.shutdown(wait=True)
        self._batching = False
        try:
            self.flush()
        except Exception:  # the messages not deleted come back, and find their rows moved on
            log.exception("the last flush failed")
