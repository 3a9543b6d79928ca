"""One call of a durable workflow: the journal it replays, and the operations it reports.

The orchestrator POSTs a run's journal; the workflow runs from the top. Every operation
it meets gets its place (scope, position) and its id (a hash of scope, name and how many
operations of that name came before in the scope) when the code issues it. While the
journal has a record at that place, the operation is answered from it, after checking
that the record is of the same kind and id (else the call reports a mismatch and the run
pauses). At the first place with no record, the *frontier*, the call either runs the
operation (one step body per call, and only in the scope the orchestrator targets) or
reports what the run waits for, then stops (`Suspend`).

Values handed to workflow code are always JSON round-tripped, on the first run as on
replay, so both see the same thing."""

from __future__ import annotations

import contextvars
import hashlib
import json
import time
from dataclasses import dataclass, field
from typing import Any

from pydantic_core import to_jsonable_python

from functions.durable.errors import ReplayMismatch, StepFailed, Suspend, WorkflowError

__all__ = ["RESULT_POS", "Call", "Place", "Scope", "branch_scope", "current", "op_id",
           "roundtrip"]

# A parallel branch's result is recorded in its scope at this position (after any
# operation the branch can have).
RESULT_POS = 99_999_999
# Entries a call records and then goes on past (a wait's is written by the orchestrator
# when it ends, and the call that met the wait had stopped there).
RECORDED_BY_CALLS = frozenset({"step", "patch", "parallel", "result"})

_CALL: contextvars.ContextVar[Call | None] = contextvars.ContextVar("durable_call", default=None)
_SCOPE: contextvars.ContextVar[Scope | None] = contextvars.ContextVar("durable_scope", default=None)


def op_id(scope: str, name: str, n: int) -> str:
    """An operation's id: stable for the n-th operation called `name` in `scope`."""
    return hashlib.sha256(f"{scope}\x1f{name}\x1f{n}".encode()).hexdigest()[:20]


def branch_scope(parent: str, pos: int, index: int) -> str:
    """The scope of branch `index` of the parallel operation at `pos` of `parent`."""
    return f"{parent}/{pos}:{index}" if parent else f"{pos}:{index}"


def roundtrip(value: Any, what: str, limit: int | None = None) -> Any:
    """`value` as JSON gives it back; WorkflowError naming `what` if it is not JSON, or
    (code output_too_large) if it is larger than `limit` bytes."""
    try:
        text = json.dumps(to_jsonable_python(value), allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:  # pydantic raises a subclass of ValueError
        raise WorkflowError(f"{what} is not JSON: {exc}", code="invalid_value") from exc
    if limit is not None and len(text.encode()) > limit:
        raise WorkflowError(f"{what} is {len(text.encode())} bytes, over the {limit}-byte cap"
                            " on one value: keep large data elsewhere and pass its key",
                            code="output_too_large")
    return json.loads(text)


@dataclass(frozen=True)
class Place:
    """Where an operation sits and what it is."""

    scope: str
    pos: int
    id: str
    kind: str
    name: str

    def doc(self) -> dict[str, Any]:
        return {"scope": self.scope, "pos": self.pos, "id": self.id, "kind": self.kind,
                "name": self.name}


@dataclass
class Scope:
    """A sequence of operations: the workflow's top, or one parallel branch."""

    id: str
    pos: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    # Time as the workflow sees it here: when the last operation met so far ended, and
    # when it started (an event wait's window opens there).
    now: float = 0.0
    last_started: float = 0.0
    # The operation in flight in this scope (two at once are refused).
    busy: Place | None = None


@dataclass
class Call:
    """The state of one call: what it was given and what it reports."""

    run_id: str
    workflow: str
    started_at: float
    now: float
    # The subject of the event that started the run, if one did.
    subject: str | None
    journal: dict[tuple[str, int], dict[str, Any]]
    target: str = ""
    attempts: dict[str, int] = field(default_factory=dict)
    check: bool = False
    max_steps: int | None = None
    budget: int = 1
    ops: list[dict[str, Any]] = field(default_factory=list)
    issued: int = 0
    sizes: dict[str, int] = field(default_factory=dict)
    # Set once the call has reported a failure or a mismatch: nothing after counts.
    halted: bool = False
    # The largest value one operation may record (the orchestrator's hard cap).
    max_value: int | None = None
    # Set once this call starts something new (a step body, a wait at the frontier).
    fresh: bool = False
    # The orchestrator's time at the call, on this process's monotonic clock.
    _mono: float = field(default_factory=time.monotonic)

    @classmethod
    def of(cls, entries: list[dict[str, Any]], **kw: Any) -> Call:
        journal = {(str(e.get("scope", "")), int(e["pos"])): e for e in entries}
        sizes: dict[str, int] = {}
        for scope, pos in journal:
            if pos != RESULT_POS:
                sizes[scope] = max(sizes.get(scope, 0), pos + 1)
        return cls(journal=journal, sizes=sizes, **kw)

    # -- the current call and scope ----------------------------------------------------

    def targets(self, scope_id: str) -> bool:
        """Whether this call advances `scope_id` or a scope inside it."""
        return self.target == scope_id or self.target.startswith(scope_id + "/")

    def enter(self, scope: Scope) -> tuple[contextvars.Token[Call | None],
                                           contextvars.Token[Scope | None]]:
        return _CALL.set(self), _SCOPE.set(scope)

    @staticmethod
    def leave(tokens: tuple[contextvars.Token[Call | None],
                            contextvars.Token[Scope | None]]) -> None:
        _SCOPE.reset(tokens[1])
        _CALL.reset(tokens[0])

    def clock(self) -> float:
        """The time on the orchestrator's clock (its `now` at the call, plus what has
        passed since): what entries record, so a test's fake clock applies to them."""
        return round(self.now + (time.monotonic() - self._mono), 3)

    def replaying(self, scope: Scope) -> bool:
        """Whether the code running now ran in an earlier call: before the last recorded
        operation, or after it when a call recorded it and went on (a step's call runs
        on to the next operation) and this call has started nothing new yet."""
        size = self.sizes.get(scope.id, 0)
        if scope.pos < size:
            return True
        if self.fresh:
            return False
        last = self.journal.get((scope.id, size - 1))
        return last is not None and last.get("kind") in RECORDED_BY_CALLS

    # -- operations --------------------------------------------------------------------

    def place(self, scope: Scope, kind: str, name: str) -> Place:
        """Give the next operation of `scope` its place and id."""
        if not isinstance(name, str) or not name:
            raise WorkflowError(f"a {kind} needs a non-empty name, got {name!r}")
        if scope.busy is not None:
            raise self.halt(
                "concurrent_operations",
                f"{kind} {name!r} started while {scope.busy.kind} {scope.busy.name!r} is still "
                "in flight in the same scope: run operations concurrently with ctx.parallel",
            )
        n = scope.counts.get(name, 0)
        scope.counts[name] = n + 1
        place = Place(scope.id, scope.pos, op_id(scope.id, name, n), kind, name)
        scope.pos += 1
        self.issued += 1
        if self.max_steps is not None and self.issued > self.max_steps:
            raise self.halt(
                "max_steps_exceeded",
                f"the run issued more than max_steps={self.max_steps} operations; raise the "
                "limit, or split the work into child runs",
            )
        return place

    def recorded(self, place: Place) -> dict[str, Any] | None:
        """The journal's record at `place`, checked against it (None: the frontier)."""
        rec = self.journal.get((place.scope, place.pos))
        if rec is None:
            return None
        if rec.get("kind") != place.kind or rec.get("id") != place.id:
            recorded = {k: rec.get(k) for k in ("scope", "pos", "id", "kind", "name")}
            self.ops.append({"op": "mismatch", "recorded": recorded, "issued": place.doc(),
                             "message": str(ReplayMismatch(recorded, place.doc()))})
            self.halted = True
            raise Suspend()
        return rec

    def outcome(self, scope: Scope, rec: dict[str, Any]) -> Any:
        """What a record hands back to the workflow: its value, or its failure raised."""
        scope.now = max(scope.now, float(rec.get("ended") or rec.get("started") or scope.now))
        scope.last_started = float(rec.get("started") or scope.last_started)
        if rec.get("status") == "error":
            raise StepFailed(str(rec.get("name")), rec.get("error") or {})
        return rec.get("value")

    def record(self, scope: Scope, entry: dict[str, Any]) -> None:
        """Report a new entry for the orchestrator to commit, and treat it as recorded
        for the rest of this call."""
        key = (entry["scope"], entry["pos"])
        self.journal[key] = entry
        if entry["pos"] != RESULT_POS:
            self.sizes[entry["scope"]] = max(self.sizes.get(entry["scope"], 0), entry["pos"] + 1)
        scope.now = max(scope.now, float(entry.get("ended") or scope.now))
        scope.last_started = float(entry.get("started") or scope.last_started)
        self.ops.append({"op": "record", "entry": entry})

    def halt(self, code: str, message: str) -> Suspend:
        """End the run as failed with `code` (a circuit breaker, a misuse): reported as an
        operation, and raised as a Suspend so that no `except Exception` hides it."""
        if not self.halted:
            self.ops.append({"op": "fail", "error": {"code": code, "message": message}})
            self.halted = True
        return Suspend()

    def wait(self, place: Place, op: str, **fields: Any) -> Suspend:
        """Report that `place` waits (for a step to run, a timer, a signal...) and stop."""
        self.fresh = True
        self.ops.append({"op": op, **place.doc(), **fields})
        return Suspend()


def current() -> tuple[Call, Scope]:
    """The call and scope the running workflow code belongs to."""
    call, scope = _CALL.get(), _SCOPE.get()
    if call is None or scope is None:
        raise WorkflowError(
            "durable operations run only inside a workflow served by the SDK "
            "(outside one, call the step's function directly)",
            code="outside_workflow",
        )
    return call, scope
