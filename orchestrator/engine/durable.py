"""Durable workflows: what a call's answer and the clock mean for a run.

A durable run has one step row, the *driver* (`DRIVER`): it carries the lease of
whoever advances the run, its retries when a call fails, and what the run waits for
(`Waiting`) while nobody holds it. The journal is one write-once item per operation
(adapters/store/journal.py). A call's answer is a list of operations (functions/sdk/durable);
`read_answer` turns it into the entries to commit and one `Next` move (a frontier's
wait: `wait_of`). Pure: no I/O.

What a run waits for, and when a wait is over, is durable_waits.py's; its scopes and
journal as a worker holds them, durable_scopes.py's."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

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
from orchestrator.engine.durable_scopes import (
    RESULT_POS,
)
from orchestrator.engine.durable_waits import LOCK_RECHECK, Waiting
from orchestrator.errors import Code

__all__ = [
    "BadAnswer",
    "BranchDone",
    "Complete",
    "Continue",
    "Fail",
    "Next",
    "Pause",
    "Suspend",
    "decides",
    "next_move",
    "read_answer",
    "read_op",
    "wait_of",
]


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
        child: dict[str, Any] = {"workflow": op.workflow, "input": op.input}
        if isinstance(op, SpawnOp) and op.notify is not None:
            child["notify"] = op.notify
        return Waiting(kind, scope, pos, oid, name, since=now, detail=child)
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
