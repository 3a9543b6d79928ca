"""What a durable run waits for (`Waiting`, kept on its driver row while nobody holds it)
and when a wait is over (`resolve`): the journal entry that ends it (`wait_entry`), or
nothing yet. Pure: no I/O.

First resolution wins: the outcome of a wait is the journal entry at its place, created
with a conditional put. Whoever loses the put (a timer against a signal, a duplicate)
adopts the entry that is there."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from functions.sdk.protocol import WaitKind
from orchestrator.errors import Code

__all__ = ["LOCK_RECHECK", "REFUSABLE", "Resolved", "Waiting", "resolve", "wait_entry"]

# The waits whose lookup can be refused (a name, a value the workflow sent).
REFUSABLE = frozenset({"signal", "event", "hook", "call", "spawn", "state", "lock"})

# How often a run waiting in a lock's line looks again without a poke.
LOCK_RECHECK = 30.0


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
