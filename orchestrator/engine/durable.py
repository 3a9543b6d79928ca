"""Durable workflows: what a call's answer and the clock mean for a run.

A durable run has one step row, the *driver* (`DRIVER`): it carries the lease of
whoever advances the run, its retries when a call fails, and what the run waits for
(`Waiting`) while nobody holds it. The journal is one write-once item per operation
(adapters/store/journal.py). A call's answer is a list of operations (functions/durable);
`read_answer` turns it into the entries to commit and one `Next` move, and
`resolve` decides whether a wait is over. Pure: no I/O.

First resolution wins: the outcome of a wait is the journal entry at its place, created
with a conditional put. Whoever loses the put (a timer against a signal, a duplicate)
adopts the entry that is there."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DRIVER",
    "RESULT_POS",
    "BranchDone",
    "Complete",
    "Continue",
    "Fail",
    "Next",
    "Pause",
    "Suspend",
    "Waiting",
    "branch_index",
    "branch_scope",
    "first_branches",
    "in_view",
    "is_driver",
    "parent_of",
    "read_answer",
    "resolve",
    "row_of",
    "scope_of",
    "wait_entry",
]

DRIVER = "$run"
# A parallel branch's result sits in its scope at this position (functions/durable).
RESULT_POS = 99_999_999
WAIT_KINDS = ("sleep", "signal", "event", "hook", "parallel", "call", "spawn", "retry", "next",
              "mismatch")
# A call that asks for more than this many entries at once is refused as malformed.
MAX_OPS_PER_CALL = 1000


def is_driver(step: str) -> bool:
    """The root driver, or a parallel branch's (`$run/<scope>`)."""
    return step == DRIVER or step.startswith(DRIVER + "/")


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


@dataclass(frozen=True)
class Waiting:
    """What the driver waits for: `kind` is sleep, signal, retry (a step's next
    attempt), next (a step to run: only when the chain went to the queue) or mismatch
    (paused). `until` is when a timer ends the wait (a sleep's end, a signal's
    timeout, a retry's backoff)."""

    kind: str
    scope: str = ""
    pos: int = 0
    id: str = ""
    name: str = ""
    until: float | None = None
    since: float = 0.0
    attempt: int = 0
    detail: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"kind": self.kind, "scope": self.scope, "pos": self.pos,
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
            kind=str(doc["kind"]), scope=str(doc.get("scope", "")), pos=int(doc.get("pos", 0)),
            id=str(doc.get("id", "")), name=str(doc.get("name", "")),
            until=None if until is None else float(until), since=float(doc.get("since", 0.0)),
            attempt=int(doc.get("attempt", 0)), detail=dict(doc.get("detail") or {}),
        )

    def place(self) -> dict[str, Any]:
        return {"scope": self.scope, "pos": self.pos, "id": self.id,
                "kind": self.kind, "name": self.name}


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


def _place(op: Mapping[str, Any]) -> tuple[str, int, str, str]:
    try:
        return str(op.get("scope", "")), int(op["pos"]), str(op["id"]), str(op["name"])
    except (KeyError, TypeError, ValueError) as exc:
        raise BadAnswer(f"operation {op!r} lacks its place (pos, id, name)") from exc


def read_answer(answer: Any, now: float, target: str = ""
                ) -> tuple[list[dict[str, Any]], Next]:
    """The entries to commit, in order, and what follows them for the scope the call
    advanced (`target`): the frontiers other scopes report are only information. A
    parallel branch whose code returned is `BranchDone`. BadAnswer if the answer does
    not follow the protocol (the call then counts as failed)."""
    if not isinstance(answer, Mapping) or not isinstance(answer.get("ops"), list):
        raise BadAnswer("the answer is not an object with an 'ops' list")
    ops: Sequence[Any] = answer["ops"]
    if len(ops) > MAX_OPS_PER_CALL:
        raise BadAnswer(f"the answer has {len(ops)} operations (at most {MAX_OPS_PER_CALL})")
    deadline = answer.get("deadline")
    entries: list[dict[str, Any]] = []
    for op in ops:
        if not isinstance(op, Mapping):
            raise BadAnswer(f"operation {op!r} is not an object")
        kind = op.get("op")
        if kind == "record":
            entry = op.get("entry")
            if not isinstance(entry, Mapping):
                raise BadAnswer("a record operation has no entry")
            _place(entry)
            entries.append(dict(entry))
            continue
        if kind == "complete":
            return entries, Complete(op.get("value"))
        if kind == "fail":
            error = op.get("error")
            return entries, Fail(dict(error) if isinstance(error, Mapping)
                                 else {"code": "workflow_failed", "message": str(error)})
        if kind == "mismatch":
            recorded, issued = op.get("recorded") or {}, op.get("issued") or {}
            scope, pos, oid, name = _place(issued)
            message = str(op.get("message") or "replay mismatch")
            waiting = Waiting("mismatch", scope, pos, oid, name, since=now,
                              detail={"recorded": dict(recorded), "issued": dict(issued)})
            return entries, Pause(waiting, {"code": "replay_mismatch", "message": message,
                                            "details": waiting.detail})
        scope, pos, oid, name = _place(op)
        if scope != target:
            continue  # another scope's frontier, met on the way
        if kind == "next":
            return entries, Continue()
        if kind == "parallel":
            branches, limit = int(_num(op, "branches")), int(_num(op, "max_parallel"))
            if branches < 1 or limit < 1:
                raise BadAnswer("a parallel operation needs branches and max_parallel >= 1")
            return entries, Suspend(Waiting("parallel", scope, pos, oid, name, since=now,
                                            detail={"branches": branches, "max": limit}))
        cap: float | None = float(deadline) if isinstance(deadline, int | float) else None
        if kind == "sleep":
            until = op.get("until")
            wake = float(until) if until is not None else now + _num(op, "seconds")
            return entries, Suspend(Waiting("sleep", scope, pos, oid, name,
                                            until=_capped(wake, cap), since=now,
                                            detail={"deadline": cap} if cap else {}))
        if kind == "signal":
            timeout = op.get("timeout")
            end: float | None = None if timeout is None else now + _num(op, "timeout")
            detail: dict[str, Any] = {"timeout": end} if end is not None else {}
            if cap is not None:
                detail["deadline"] = cap
            return entries, Suspend(Waiting("signal", scope, pos, oid, name,
                                            until=_capped(end, cap), since=now, detail=detail))
        if kind == "event":
            timeout = op.get("timeout")
            end = None if timeout is None else now + _num(op, "timeout")
            subject = op.get("subject")
            event = op.get("event")
            if not isinstance(event, str) or not event:
                raise BadAnswer("an event wait names no event")
            detail = {"event": event, "subject": None if subject is None else str(subject),
                      "after": _num(op, "after") if op.get("after") is not None else now}
            if end is not None:
                detail["timeout"] = end
            if cap is not None:
                detail["deadline"] = cap
            return entries, Suspend(Waiting("event", scope, pos, oid, name,
                                            until=_capped(end, cap), since=now, detail=detail))
        if kind == "hook":
            signal = op.get("signal")
            if not isinstance(signal, str) or not signal:
                raise BadAnswer("a hook names no signal")
            ttl = op.get("ttl")
            return entries, Suspend(Waiting("hook", scope, pos, oid, name, since=now, detail={
                "signal": signal, "metadata": op.get("metadata"),
                "ttl": None if ttl is None else _num(op, "ttl")}))
        if kind in ("call", "spawn"):
            workflow = op.get("workflow")
            if not isinstance(workflow, str) or not workflow:
                raise BadAnswer(f"a {kind} names no workflow")
            return entries, Suspend(Waiting(kind, scope, pos, oid, name, since=now, detail={
                "workflow": workflow, "input": op.get("input")}))
        if kind == "retry":
            attempt = int(_num(op, "attempt"))
            detail = {"error": op.get("error")}
            return entries, Suspend(Waiting("retry", scope, pos, oid, name,
                                            until=now + _num(op, "after"), since=now,
                                            attempt=attempt, detail=detail))
        raise BadAnswer(f"unknown operation {kind!r}")
    if target:
        done = next((e for e in entries if e.get("scope") == target
                     and int(e.get("pos", -1)) == RESULT_POS), None)
        if done is not None:
            return entries, BranchDone(done)
    raise BadAnswer("the answer ends without saying what comes next")


def _num(op: Mapping[str, Any], key: str) -> float:
    value = op.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise BadAnswer(f"operation {op.get('op')!r}: {key} must be a number >= 0, got {value!r}")
    return float(value)


def _capped(until: float | None, deadline: float | None) -> float | None:
    """A wait ends by the run's execution deadline at the latest (the call then fails
    the run)."""
    if deadline is None:
        return until
    return deadline if until is None else min(until, deadline)


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
    waits."""
    due = waiting.until is not None and now >= waiting.until
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
        error = {"code": "child_failed", "message": f"child run {found.get('run_id')} ended "
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
