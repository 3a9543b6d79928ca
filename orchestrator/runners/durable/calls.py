"""The exchange with the SDK: one call of a durable workflow, its body (the run, its
journal, the scope it advances), and its answer read as it arrives: a version 2 stream
of checkpoints, each committed in order as it comes (the first that finds another
outcome at its place ends the exchange, and the next call replays what is committed), or
a version 1 answer whole. While a call runs, the run is looked at for a stop at least
every STOP_CHECK_EVERY seconds, its first checkpoint awaited included: a stop hangs up."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from functions.sdk.protocol import DurableOp, EndOp, JournalEntry, RecordOp, RetryOp, WaitKind
from functions.sdk.protocol.durable import DurableRequestBody, DurableRun, ScriptRef
from orchestrator import telemetry
from orchestrator.adapters.invoker import Call, Invoker, Result, StreamCut
from orchestrator.adapters.store import Store
from orchestrator.engine.attempts import Outcome, OutcomeKind
from orchestrator.engine.context import RunContext
from orchestrator.engine.durable import (
    BadAnswer,
    Continue,
    Next,
    Pause,
    next_move,
    read_answer,
    read_op,
    wait_of,
)
from orchestrator.engine.durable_moves import new_entries
from orchestrator.engine.durable_scopes import JournalView, in_view, scope_of
from orchestrator.engine.durable_waits import Waiting
from orchestrator.engine.records import StepRecord
from orchestrator.errors import Code, error_doc
from orchestrator.runners.durable.exchange import END, IDLE, Exchange, Item, Lines
from orchestrator.services.durable.hooks import Hooks
from orchestrator.services.execution.executor import Executor
from orchestrator.services.execution.recording import recorded
from orchestrator.services.execution.tally import Tally
from orchestrator.services.scripts.texts import script_url
from orchestrator.settings import Settings
from orchestrator.strict_json import dumps

__all__ = ["CALL_BUDGET", "STOP_CHECK_EVERY", "Calls", "Target", "Turn"]

# How often a call (and a chain of calls) looks at its driver row for a stop.
STOP_CHECK_EVERY = 1.0
# The share of a call's timeout during which a version 2 call may start step bodies: the
# rest is for the last one to end before the timeout (and the lease) does.
CALL_BUDGET = 0.5


@dataclass(frozen=True)
class Target:
    url: str
    secret: str | None


class Calls:
    """`stopped(row)`: whether the run is stopping or the lease lost (one read);
    `give_up(row, tally, now)`: end the driver of a stopping run."""

    def __init__(self, executor: Executor, invoker: Invoker, *, clock: Callable[[], float],
                 hooks: Hooks | None, stopped: Callable[[StepRecord], bool],
                 give_up: Callable[[StepRecord, Tally, float], None]) -> None:
        self.executor = executor
        self.store: Store = executor.store
        self.settings: Settings = executor.settings
        self.invoker = invoker
        self.clock = clock
        self.hooks = hooks
        self.stopped = stopped
        self.give_up = give_up

    def _body(self, row: StepRecord, ctx: RunContext, view: JournalView,
              attempts: dict[str, int]) -> dict[str, Any]:
        """The call's body: the protocol's request (functions/sdk/protocol/durable.py,
        validated as the SDK will read it), with the journal's entries as committed."""
        scope = scope_of(row.step)
        v2 = self.settings.durable_protocol >= 2
        request = DurableRequestBody(
            run=DurableRun(run_id=row.run_id, workflow=ctx.served, started_at=ctx.started_at,
                           now=self.clock(), attempt=row.attempt, subject=ctx.subject,
                           max_value=self.settings.output_hard_cap),
            input=ctx.input, target=scope, attempts=attempts)
        script = getattr(ctx.definition, "script", None)
        if script:
            # A script's run replays on the text it started on: the host fetches it by
            # hash from the blob store (services/scripts/texts.py).
            request.script = ScriptRef(name=str(script["name"]), sha256=str(script["sha256"]),
                                       url=script_url(self.executor.blobs, script["sha256"]))
        if v2:
            request.protocol = self.settings.durable_protocol
            # The call starts no step body past its budget (an HTTP timeout ends it later).
            request.budget = max(0.5, row.timeout * CALL_BUDGET)
        body = request.model_dump(mode="json", exclude_unset=True)
        # The entries as committed (each was a protocol entry when it was recorded): not
        # validated again on every call, which would cost a long run's replay dearly.
        body["journal"] = [self._shown(row.run_id, e) for e in view.entries
                           if in_view(str(e.get("scope", "")), scope)]
        return body

    def call(self, row: StepRecord, ctx: RunContext, target: Target, view: JournalView,
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
            if self.stopped(row):
                exchange.stop()
                self.give_up(row, tally, self.clock())
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
            stored = recorded(partial(self.store.journal.put_entry, row.run_id, entry,
                                      self.clock()), lease_until=row.lease_until,
                              clock=self.clock)
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
                    if self.stopped(row):
                        self.give_up(row, tally, checked)
                        return Turn(gone=True, checked=checked)
                if isinstance(item, StreamCut):
                    return Turn(failure=item.outcome, committed=committed, checked=checked)
                if isinstance(item, Result) or item is END:
                    return Turn(failure=_bad(f"workflow {ctx.served}: the answer ended before"
                                             " its end line"), committed=committed,
                                checked=checked)
                if isinstance(item, Lines):
                    entries: list[JournalEntry] = []
                    for line in item.lines:
                        try:
                            op = read_op(line)
                        except BadAnswer as exc:
                            return Turn(failure=_bad(f"workflow {ctx.served}: {exc}"),
                                        committed=committed, checked=checked)
                        if isinstance(op, RecordOp):
                            entries.append(op.entry)
                        elif isinstance(op, EndOp):
                            end = op
                        else:
                            ops.append(op)
                    # The protocol's entries, as parsed, are what the store commits.
                    entries, clash = new_entries(view, entries)
                    # Write-once puts: one throttled (no effect) is sent again while the
                    # lease lasts, not left for a replay to run its steps again.
                    pairs = recorded(partial(self.store.journal.commit_entries, row.run_id,
                                             entries, self.clock()),
                                     lease_until=row.lease_until, clock=self.clock)
                    if clash is not None and len(pairs) == len(entries) \
                            and all(ours == got for ours, got in pairs):
                        # The call sent another entry for a place it sent before: the
                        # next call replays what is committed.
                        pairs.append((clash[0].doc(), clash[1]))
                    for ours, got in pairs:
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
            exchange.stop(hang_up=end is None)

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



def _place(entry: dict[str, Any]) -> dict[str, Any]:
    return {k: entry.get(k) for k in ("scope", "pos", "id", "kind", "name")}


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
