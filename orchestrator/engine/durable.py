"""Durable workflows: what a call's answer and the clock mean for a run.

A durable run has one step row, the *driver* (`DRIVER`): it carries the lease of
whoever advances the run, its retries when a call fails, and what the run waits for
(`Waiting`) while nobody holds it. The journal is one write-once item per operation
(adapters/store/journal.py). A call's answer is a list of operations (functions/sdk/durable);
`read_answer` turns it into the entries to commit and one `Next` move, and
`resolve` decides whether a wait is over. Pure: no I/O.

First resolution wins: the outcome of a wait is the journal entry at its place, created
with a conditional put. Whoever loses the put (a timer against a signal, a duplicate)
adopts the entry that is there."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from functions.sdk.protocol import (
    ApprovalOp,
    CallOp,
    CompleteOp,
    DurableAnswer,
    DurableOp,
    EndOp,
    EventOp,
    FailOp,
    HookOp,
    LockOp,
    MismatchOp,
    NextOp,
    ParallelOp,
    RecordOp,
    RetryOp,
    SignalOp,
    SleepOp,
    SpawnOp,
    StateOp,
    WaitKind,
    WaitOp,
    parse_op,
)
from orchestrator.engine.definition import DRIVER
from orchestrator.errors import Code

if TYPE_CHECKING:  # records.py imports this module
    from orchestrator.engine.records import StepRecord

__all__ = [
    "DRIVER",
    "RESULT_POS",
    "BranchDone",
    "Complete",
    "Continue",
    "Fail",
    "JournalView",
    "Next",
    "Pause",
    "Suspend",
    "Waiting",
    "branch_index",
    "branch_scope",
    "decides",
    "first_branches",
    "first_holder",
    "in_view",
    "is_driver",
    "next_move",
    "parent_of",
    "read_answer",
    "read_op",
    "resolve",
    "row_of",
    "scope_of",
    "wait_entry",
    "wait_of",
]

# A parallel branch's result sits in its scope at this position (functions/sdk/durable).
RESULT_POS = 99_999_999


def is_driver(step: str) -> bool:
    """The root driver, or a parallel branch's (`$run/<scope>`)."""
    return step == DRIVER or step.startswith(DRIVER + "/")


def first_holder(row: StepRecord) -> bool:
    """Whether the claim that gave `row` was the first ever of a run's root driver: its
    journal is then empty, and need not be read. Only a holder of the root driver writes
    entries, and only after a claim. The row's history says so: made ready, then claimed
    once, nothing else (a wait rewrites it, a retry, an expired lease or a second claim
    adds to it). Not by the claims' times: two claims in one millisecond, or under a
    clock that stands still (a test's), carry the same. A branch's driver reads its
    parent's entries."""
    return row.step == DRIVER and [h.get("type") for h in row.history] == [
        "step.ready", "step.started"]


def scope_of(step: str) -> str:
    """The scope a driver row advances."""
    return step[len(DRIVER) + 1:] if step.startswith(DRIVER + "/") else ""


def row_of(scope: str) -> str:
    """The driver row of a scope."""
    return f"{DRIVER}/{scope}" if scope else DRIVER


def parent_of(scope: str) -> str:
    return scope.rsplit("/", 1)[0] if "/" in scope else ""


def branch_scope(parent: str, pos: int, index: int) -> str:
    """Branch `index` of the parallel operation at `pos` of `parent` (as the SDK names
    it)."""
    return f"{parent}/{pos}:{index}" if parent else f"{pos}:{index}"


def branch_index(scope: str) -> int:
    return int(scope.rsplit("/", 1)[-1].split(":", 1)[1])


def first_branches(total: int, limit: int, done: set[int]) -> tuple[list[int], int]:
    """The branches to start when a parallel operation begins (the first `limit` not
    done already: a branch whose code returned at once holds no slot), and the cursor:
    the next branch to start. Each branch's end then starts the branch at the cursor,
    so at most `limit` are in flight and a free slot never waits for a slow branch."""
    out: list[int] = []
    j = 0
    while j < total and len(out) < limit:
        if j not in done:
            out.append(j)
        j += 1
    return out, j


def in_view(scope: str, target: str) -> bool:
    """Whether entries of `scope` matter to a call advancing `target`: its ancestors,
    itself and what is inside it."""
    return (not scope or scope == target or target.startswith(scope + "/")
            or scope.startswith(target + "/") or not target)


class JournalView:
    """A run's journal as a worker holds it while it advances the run: the entries in
    the order they were committed, their places, and the parallel branches whose result
    is recorded (a result entry, or a one-step branch's step marked `ends`)."""

    def __init__(self, entries: Sequence[Mapping[str, Any]] = ()) -> None:
        self.entries: list[dict[str, Any]] = []
        self.places: dict[tuple[str, int], dict[str, Any]] = {}
        self.ended: set[str] = set()
        for entry in entries:
            self.add(entry)

    def add(self, entry: Mapping[str, Any]) -> None:
        """Add a committed entry (one at a place already held is the same: ignored)."""
        doc = dict(entry)
        place = (str(doc.get("scope", "")), int(doc["pos"]))
        if place in self.places:
            return
        self.entries.append(doc)
        self.places[place] = doc
        if place[1] == RESULT_POS or doc.get("ends"):
            self.ended.add(place[0])

    def has(self, scope: str, pos: int) -> bool:
        return (scope, pos) in self.places

    def at(self, scope: str, pos: int) -> dict[str, Any] | None:
        """The entry committed at a place, if any."""
        return self.places.get((scope, pos))

    def __len__(self) -> int:
        return len(self.entries)


@dataclass(frozen=True)
class Waiting:
    """What the driver waits for: `kind` is sleep, signal, retry (a step's next
    attempt), next (a step to run: only when the chain went to the queue) or mismatch
    (paused). `until` is when a timer ends the wait (a sleep's end, a signal's
    timeout, a retry's backoff)."""

    kind: WaitKind
    scope: str = ""
    pos: int = 0
    id: str = ""
    name: str = ""
    until: float | None = None
    since: float = 0.0
    attempt: int = 0
    detail: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"kind": self.kind.value, "scope": self.scope, "pos": self.pos,
                               "id": self.id, "name": self.name, "since": self.since}
        if self.until is not None:
            doc["until"] = self.until
        if self.attempt:
            doc["attempt"] = self.attempt
        if self.detail:
            doc["detail"] = dict(self.detail)
        return doc

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Waiting:
        until = doc.get("until")
        return cls(
            kind=WaitKind(str(doc["kind"])), scope=str(doc.get("scope", "")),
            pos=int(doc.get("pos", 0)),
            id=str(doc.get("id", "")), name=str(doc.get("name", "")),
            until=None if until is None else float(until), since=float(doc.get("since", 0.0)),
            attempt=int(doc.get("attempt", 0)), detail=dict(doc.get("detail") or {}),
        )

    def place(self) -> dict[str, Any]:
        return {"scope": self.scope, "pos": self.pos, "id": self.id,
                "kind": self.kind.value, "name": self.name}


@dataclass(frozen=True)
class Continue:
    """Call again at once (a step is next)."""


@dataclass(frozen=True)
class Suspend:
    waiting: Waiting


@dataclass(frozen=True)
class Complete:
    value: Any


@dataclass(frozen=True)
class Fail:
    error: dict[str, Any]


@dataclass(frozen=True)
class Pause:
    """A replay mismatch: the run pauses, both operations shown."""

    waiting: Waiting
    error: dict[str, Any]


@dataclass(frozen=True)
class BranchDone:
    """A parallel branch's code returned (or raised): its result entry."""

    entry: dict[str, Any]


Next = Continue | Suspend | Complete | Fail | Pause | BranchDone


class BadAnswer(ValueError):
    """The workflow's answer does not follow the protocol."""


def read_answer(answer: Any, now: float, target: str = ""
                ) -> tuple[list[dict[str, Any]], Next]:
    """A version 1 answer (one JSON object): the entries to commit, in order, and what
    follows them for the scope the call advanced (`target`). BadAnswer if the answer
    does not follow the protocol (the call then counts as failed)."""
    try:
        parsed = DurableAnswer.model_validate(answer)
    except ValidationError as exc:
        raise BadAnswer(_problem(exc)) from None
    entries: list[dict[str, Any]] = []
    rest: list[DurableOp] = []
    for op in parsed.ops:
        if isinstance(op, RecordOp):
            entries.append(op.entry.doc())
            continue
        rest.append(op)
        if decides(op, target):
            break  # what a call reports past its end does not count
    return entries, next_move(rest, now, target, parsed.deadline, entries)


def decides(op: DurableOp, target: str) -> bool:
    """Whether `op` says what comes next for the scope a call advanced (`target`)."""
    if isinstance(op, CompleteOp | FailOp | MismatchOp):
        return True
    return not isinstance(op, EndOp | RecordOp) and op.scope == target


def read_op(line: bytes) -> DurableOp:
    """One line of a version 2 answer; BadAnswer if it is not an operation."""
    try:
        return parse_op(line)
    except ValidationError as exc:
        raise BadAnswer(_problem(exc)) from None


def _problem(exc: ValidationError) -> str:
    first = exc.errors(include_url=False)[:3]
    where = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'answer'}: {e['msg']}"
                      for e in first)
    return f"the answer does not follow the protocol ({where})"


def next_move(ops: Sequence[DurableOp], now: float, target: str, deadline: float | None,
              committed: Sequence[Mapping[str, Any]] = ()) -> Next:
    """What follows a call's records for the scope it advanced (`target`), from the
    operations that are not records, in order: the first that ends the workflow, or
    that is the target's frontier. The frontiers other scopes report are information
    only. A parallel branch whose code ended (its result among `committed`) is
    `BranchDone`."""
    for op in ops:
        if isinstance(op, CompleteOp):
            return Complete(op.value)
        if isinstance(op, FailOp):
            return Fail(dict(op.error))
        if isinstance(op, MismatchOp):
            issued = op.issued
            waiting = Waiting(WaitKind.MISMATCH, issued.scope, issued.pos, issued.id,
                              issued.name, since=now,
                              detail={"recorded": dict(op.recorded),
                                      "issued": issued.model_dump()})
            return Pause(waiting, {"code": Code.REPLAY_MISMATCH, "message": op.message,
                                   "details": waiting.detail})
        if isinstance(op, EndOp | RecordOp) or op.scope != target:
            continue  # another scope's frontier, met on the way
        frontier = wait_of(op, now, deadline)
        return Continue() if frontier is None else Suspend(frontier)
    if target:
        done = next((e for e in committed if e.get("scope") == target
                     and (int(e.get("pos", -1)) == RESULT_POS or e.get("ends"))), None)
        if done is not None:
            return BranchDone(dict(done))
    raise BadAnswer("the answer ends without saying what comes next")


def wait_of(op: WaitOp, now: float, deadline: float | None) -> Waiting | None:
    """What a frontier reported at `now` waits for (None: a step to run, call again)."""
    scope, pos, oid, name = op.scope, op.pos, op.id, op.name
    cap = deadline
    if isinstance(op, NextOp):
        return None
    if isinstance(op, ParallelOp):
        return Waiting(WaitKind.PARALLEL, scope, pos, oid, name, since=now,
                       detail={"branches": op.branches, "max": op.max_parallel})
    if isinstance(op, SleepOp):
        if op.until is None and op.seconds is None:
            raise BadAnswer("a sleep gives neither seconds nor until")
        wake = float(op.until) if op.until is not None else now + float(op.seconds or 0.0)
        return Waiting(WaitKind.SLEEP, scope, pos, oid, name, until=_capped(wake, cap),
                       since=now, detail={"deadline": cap} if cap else {})
    if isinstance(op, SignalOp):
        end = None if op.timeout is None else now + op.timeout
        detail: dict[str, Any] = {"timeout": end} if end is not None else {}
        if cap is not None:
            detail["deadline"] = cap
        return Waiting(WaitKind.SIGNAL, scope, pos, oid, name, until=_capped(end, cap),
                       since=now, detail=detail)
    if isinstance(op, EventOp):
        end = None if op.timeout is None else now + op.timeout
        detail = {"event": op.event, "subject": op.subject,
                  "after": op.after if op.after is not None else now}
        if end is not None:
            detail["timeout"] = end
        if cap is not None:
            detail["deadline"] = cap
        return Waiting(WaitKind.EVENT, scope, pos, oid, name, until=_capped(end, cap),
                       since=now, detail=detail)
    if isinstance(op, HookOp):
        return Waiting(WaitKind.HOOK, scope, pos, oid, name, since=now, detail={
            "signal": op.signal, "metadata": op.metadata, "ttl": op.ttl})
    if isinstance(op, CallOp | SpawnOp):
        kind = WaitKind.CALL if isinstance(op, CallOp) else WaitKind.SPAWN
        return Waiting(kind, scope, pos, oid, name, since=now, detail={
            "workflow": op.workflow, "input": op.input})
    if isinstance(op, ApprovalOp):
        # The gate opens when the wait registers (its deadline: now + timeout).
        return Waiting(WaitKind.APPROVAL, scope, pos, oid, name,
                       until=_capped(now + op.timeout, cap), since=now,
                       detail={"prompt": op.prompt, "deadline": now + op.timeout,
                               "approvers": list(op.approvers), "link": op.link})
    if isinstance(op, LockOp):
        # Looked at again every LOCK_RECHECK seconds without a poke (a lost hand-over).
        return Waiting(WaitKind.LOCK, scope, pos, oid, name, since=now,
                       until=None if op.action == "release" else now + LOCK_RECHECK,
                       detail={"action": op.action, "key": op.key})
    if isinstance(op, StateOp):
        # Performed at once (a lookup), its answer recorded in the same write.
        return Waiting(WaitKind.STATE, scope, pos, oid, name, since=now, detail={
            "action": op.action, "entity": op.entity, "key": op.key, "value": op.value,
            "by": op.by, "ttl": op.ttl})
    assert isinstance(op, RetryOp)
    return Waiting(WaitKind.RETRY, scope, pos, oid, name, until=now + op.after, since=now,
                   attempt=op.attempt, detail={"error": op.error})


def _capped(until: float | None, deadline: float | None) -> float | None:
    """A wait ends by the run's execution deadline at the latest (the call then fails
    the run)."""
    if deadline is None:
        return until
    return deadline if until is None else min(until, deadline)


# The waits whose lookup can be refused (a name, a value the workflow sent).
REFUSABLE = frozenset({"signal", "event", "hook", "call", "spawn", "state", "lock"})

# How often a run waiting in a lock's line looks again without a poke.
LOCK_RECHECK = 30.0


def wait_entry(waiting: Waiting, now: float, *, status: str = "ok", value: Any = None,
               **extra: Any) -> dict[str, Any]:
    """The journal entry that ends `waiting`."""
    return {**waiting.place(), "status": status, "value": value, "started": waiting.since,
            "ended": round(now, 3), **extra}


@dataclass(frozen=True)
class Resolved:
    """A wait is over: its entry (None for a retry's backoff, which records nothing)."""

    entry: dict[str, Any] | None


def resolve(waiting: Waiting, now: float, found: Mapping[str, Any] | None = None
            ) -> Resolved | None:
    """Whether `waiting` is over at `now`, given what it waits for if it came: the
    oldest signal queued for it, or the earliest event in its window. None: it still
    waits. A lookup the orchestrator refused (`found["refused"]`: the error, a name
    that breaks the rule or a value over the cap) ends the wait as failed: the workflow
    gets the error where it awaited the operation, as a step's failure."""
    due = waiting.until is not None and now >= waiting.until
    if found is not None and found.get("refused") is not None and waiting.kind in REFUSABLE:
        return Resolved(wait_entry(waiting, now, status="error", error=dict(found["refused"])))
    if waiting.kind == "retry":
        return Resolved(None) if due else None
    if waiting.kind == "next":
        return Resolved(None)
    if waiting.kind == "spawn":
        # `found`: the child run started.
        return None if found is None else Resolved(wait_entry(
            waiting, now, value={"run_id": found.get("run_id")}))
    if waiting.kind == "call":
        # `found`: the child, once it has ended (run_id, status, output, error).
        if found is None:
            return None
        if found.get("status") == "success":
            return Resolved(wait_entry(waiting, now, value=found.get("output"),
                                       child=found.get("run_id")))
        error = {"code": Code.CHILD_FAILED, "message": f"child run {found.get('run_id')} ended "
                 f"{found.get('status')}", "details": {"run_id": found.get("run_id"),
                                                        "status": found.get("status"),
                                                        "error": found.get("error")}}
        return Resolved(wait_entry(waiting, now, status="error", error=error,
                                   child=found.get("run_id")))
    if waiting.kind == "parallel":
        # `found`: the parallel operation's aggregate; over when every branch is done.
        if found is not None and len(found.get("done") or ()) >= int(waiting.detail["branches"]):
            return Resolved(None)
        return None
    if waiting.kind == "lock":
        # `found`: the lock is held (acquire) or was let go (release).
        return None if found is None else Resolved(wait_entry(waiting, now))
    if waiting.kind == "state":
        # `found`: the entry the operation was recorded with (with the cell's write).
        return None if found is None else Resolved(dict(found["committed"]))
    if waiting.kind == "approval":
        # `found`: the gate's outcome once it has one (the caller times an open gate
        # out past its deadline: the gate's record decides, not this clock).
        if found is None:
            return None
        value = {k: found.get(k) for k in ("approved", "timed_out", "by", "at", "comment")}
        return Resolved(wait_entry(waiting, now, value=value))
    if waiting.kind == "sleep":
        return Resolved(wait_entry(waiting, now)) if due else None
    if waiting.kind == "signal":
        if found is not None:
            return Resolved(wait_entry(waiting, now, value=found.get("payload"),
                                       signal=found.get("id")))
        if due:
            return Resolved(wait_entry(waiting, now, status="timeout"))
        return None
    if waiting.kind == "hook":
        # Created (stored) by the caller before this: the entry keeps no token.
        if found is None:
            return None
        value = {k: found.get(k) for k in ("signal", "expires_at", "metadata", "hook")}
        return Resolved(wait_entry(waiting, now, value=value))
    if waiting.kind == "event":
        if found is not None:
            value = {k: found.get(k) for k in ("name", "key", "id", "data", "received_at")}
            return Resolved(wait_entry(waiting, now, value=value, event=found.get("id")))
        if due:
            return Resolved(wait_entry(waiting, now, status="timeout"))
        return None
    return None  # a mismatch waits for an operator
