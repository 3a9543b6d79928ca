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

__all__ = ["LOCK_RECHECK", "REFUSABLE", "Committed", "Found", "Held", "Lookup", "Refused",
           "Resolved", "Waiting", "resolve", "wait_entry"]

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


@dataclass(frozen=True)
class Found:
    """What a wait looked up, once it came: the signal taken, the event in its window,
    the hook created, the child started or ended, the parallel's aggregate, the gate's
    outcome."""

    doc: Mapping[str, Any]


@dataclass(frozen=True)
class Held:
    """A lock's wait: the lock is held (acquire), or was let go (release)."""


@dataclass(frozen=True)
class Committed:
    """A state cell's operation, performed: its entry, written with the cell."""

    entry: Mapping[str, Any]


@dataclass(frozen=True)
class Refused:
    """A name or a value of the wait the orchestrator refuses (an SDK that checks them
    never sends one): the error the workflow gets where it awaited the operation."""

    error: Mapping[str, Any]


# What a wait's lookups came back with; None: nothing yet.
Lookup = Found | Held | Committed | Refused | None


def resolve(waiting: Waiting, now: float, found: Lookup = None) -> Resolved | None:
    """Whether `waiting` is over at `now`, given what its lookups found. None: it still
    waits. A refused lookup ends the wait as failed: the workflow gets the error where
    it awaited the operation, as a step's failure."""
    due = waiting.until is not None and now >= waiting.until
    if isinstance(found, Refused) and waiting.kind in REFUSABLE:
        return Resolved(wait_entry(waiting, now, status="error", error=dict(found.error)))
    doc = found.doc if isinstance(found, Found) else None
    match waiting.kind:
        case WaitKind.RETRY:
            return Resolved(None) if due else None
        case WaitKind.NEXT:
            return Resolved(None)
        case WaitKind.SPAWN:
            # The child run, started.
            return None if doc is None else Resolved(wait_entry(
                waiting, now, value={"run_id": doc.get("run_id")}))
        case WaitKind.CALL:
            return None if doc is None else Resolved(_child_ended(waiting, now, doc))
        case WaitKind.PARALLEL:
            # The operation's aggregate: over when every branch is done.
            over = doc is not None and len(doc.get("done") or ()) >= int(
                waiting.detail["branches"])
            return Resolved(None) if over else None
        case WaitKind.LOCK:
            return Resolved(wait_entry(waiting, now)) if isinstance(found, Held) else None
        case WaitKind.STATE:
            return Resolved(dict(found.entry)) if isinstance(found, Committed) else None
        case WaitKind.APPROVAL:
            # The gate's outcome once it has one (the caller times an open gate out past
            # its deadline: the gate's record decides, not this clock).
            if doc is None:
                return None
            value = {k: doc.get(k) for k in ("approved", "timed_out", "by", "at", "comment")}
            return Resolved(wait_entry(waiting, now, value=value))
        case WaitKind.SLEEP:
            return Resolved(wait_entry(waiting, now)) if due else None
        case WaitKind.SIGNAL:
            if doc is not None:
                return Resolved(wait_entry(waiting, now, value=doc.get("payload"),
                                           signal=doc.get("id")))
            return Resolved(wait_entry(waiting, now, status="timeout")) if due else None
        case WaitKind.HOOK:
            # Created (stored) by the caller before this: the entry keeps no token.
            if doc is None:
                return None
            value = {k: doc.get(k) for k in ("signal", "expires_at", "metadata", "hook")}
            return Resolved(wait_entry(waiting, now, value=value))
        case WaitKind.EVENT:
            if doc is not None:
                value = {k: doc.get(k) for k in ("name", "key", "id", "data", "received_at")}
                return Resolved(wait_entry(waiting, now, value=value, event=doc.get("id")))
            return Resolved(wait_entry(waiting, now, status="timeout")) if due else None
        case _:
            return None  # a mismatch waits for an operator


def _child_ended(waiting: Waiting, now: float, doc: Mapping[str, Any]) -> dict[str, Any]:
    """A call's child, ended (run_id, status, output, error): its entry."""
    if doc.get("status") == "success":
        return wait_entry(waiting, now, value=doc.get("output"), child=doc.get("run_id"))
    error = {"code": Code.CHILD_FAILED, "message": f"child run {doc.get('run_id')} ended "
             f"{doc.get('status')}", "details": {"run_id": doc.get("run_id"),
                                                 "status": doc.get("status"),
                                                 "error": doc.get("error")}}
    return wait_entry(waiting, now, status="error", error=error, child=doc.get("run_id"))
