"""One call of a durable workflow: the journal it replays, and the operations it reports.

The orchestrator POSTs a run's journal; the workflow runs from the top. Every operation
it meets gets its place (scope, position) and its id (a hash of scope, name and how many
operations of that name came before in the scope) when the code issues it. While the
journal has a record at that place, the operation is answered from it, after checking
that the record is of the same kind and id (else the call reports a mismatch and the run
pauses). At the first place with no record, the *frontier*, the call either runs the
operation or reports what the run waits for, then stops (`Suspend`). Which step bodies a
call may run depends on the protocol version it speaks (functions/sdk/protocol/durable.py):

- version 1: one step body per call, in the scope the orchestrator targets;
- version 2: every step body it meets in the targeted scope and the scopes inside it
  (parallel branches), until its time budget is spent; each result is reported as soon
  as the body ends (`RecordOp`, a checkpoint), so the orchestrator commits it while the
  call goes on.

Values handed to workflow code are always JSON round-tripped, on the first run as on
replay, so both see the same thing."""

from __future__ import annotations

import contextvars
import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic_core import to_jsonable_python

from functions.sdk.durable.errors import ReplayMismatch, StepFailed, Suspend, WorkflowError
from functions.sdk.protocol import (
    ApprovalOp,
    CallOp,
    DurableCode,
    DurableOp,
    EventOp,
    FailOp,
    HookOp,
    JournalEntry,
    LockOp,
    MismatchOp,
    NextOp,
    ParallelOp,
    PlaceDoc,
    RecordOp,
    RetryOp,
    ScriptRef,
    SignalOp,
    SleepOp,
    SpawnOp,
    StateOp,
)
from functions.sdk.protocol.values import MAX_VALUE_BYTES, name_problem, normal_name, value_bytes

if TYPE_CHECKING:
    from functions.sdk.durable.debugging import Stops

__all__ = ["RESULT_POS", "Call", "Place", "Scope", "branch_scope", "current", "named", "op_id",
           "roundtrip", "sent"]

# A parallel branch's result is recorded in its scope at this position (after any
# operation the branch can have).
RESULT_POS = 99_999_999
# Entries a call records and then goes on past (a wait's is written by the orchestrator
# when it ends, and the call that met the wait had stopped there).
# ("script": the hash of a durable shell script's text, its run's first entry.)
RECORDED_BY_CALLS = frozenset({"step", "patch", "parallel", "result", "script"})

_CALL: contextvars.ContextVar[Call | None] = contextvars.ContextVar("durable_call", default=None)
_SCOPE: contextvars.ContextVar[Scope | None] = contextvars.ContextVar("durable_scope", default=None)


def op_id(scope: str, name: str, n: int) -> str:
    """An operation's id: stable for the n-th operation called `name` in `scope`."""
    return hashlib.sha256(f"{scope}\x1f{name}\x1f{n}".encode()).hexdigest()[:20]


def branch_scope(parent: str, pos: int, index: int) -> str:
    """The scope of branch `index` of the parallel operation at `pos` of `parent`."""
    return f"{parent}/{pos}:{index}" if parent else f"{pos}:{index}"


def sent(value: Any, what: str) -> Any:
    """A value the workflow sends to the orchestrator (a hook's metadata, a child run's
    input) as `roundtrip` gives it back; WorkflowError (code value_too_large) naming
    `what` and the cap if it is past MAX_VALUE_BYTES, which the orchestrator would
    refuse."""
    out = roundtrip(value, what)
    size = value_bytes(out)
    if size > MAX_VALUE_BYTES:
        raise WorkflowError(f"{what} is {size} bytes, over the {MAX_VALUE_BYTES}-byte"
                            f" ({MAX_VALUE_BYTES // 1024} KiB) cap on a value sent to the"
                            " orchestrator: keep large data elsewhere and pass its key",
                            code=DurableCode.VALUE_TOO_LARGE)
    return out


def named(name: Any, what: str, *, event: bool = False) -> str:
    """A signal's or an event's name as the orchestrator keeps it (Unicode NFC);
    WorkflowError (code invalid_name) naming the rule if it breaks it: nothing could
    ever send it."""
    problem = name_problem(name, event=event)
    if problem is not None:
        raise WorkflowError(f"{what} {name!r}: {problem}", code=DurableCode.INVALID_NAME)
    return normal_name(name)


def roundtrip(value: Any, what: str, limit: int | None = None) -> Any:
    """`value` as JSON gives it back; WorkflowError naming `what` if it is not JSON, or
    (code output_too_large) if it is larger than `limit` bytes."""
    try:
        text = json.dumps(to_jsonable_python(value), allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:  # pydantic raises a subclass of ValueError
        raise WorkflowError(f"{what} is not JSON: {exc}", code=DurableCode.INVALID_VALUE) from exc
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

    def entry(self, **fields: Any) -> JournalEntry:
        """The journal entry recording this operation's outcome."""
        return JournalEntry(**self.doc(), **fields)


# The operation reporting a wait, by kind.
_WAITS: dict[str, type[NextOp | SleepOp | SignalOp | EventOp | HookOp | CallOp | SpawnOp
                      | ParallelOp | RetryOp | ApprovalOp | StateOp | LockOp]] = {
    "next": NextOp, "sleep": SleepOp, "signal": SignalOp, "event": EventOp, "hook": HookOp,
    "call": CallOp, "spawn": SpawnOp, "parallel": ParallelOp, "retry": RetryOp,
    "approval": ApprovalOp, "state": StateOp, "lock": LockOp,
}


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
    journal: dict[tuple[str, int], JournalEntry]
    target: str = ""
    attempts: dict[str, int] = field(default_factory=dict)
    check: bool = False
    max_steps: int | None = None
    # The protocol version of this call's answer (functions/sdk/protocol/durable.py).
    protocol: int = 1
    # Version 1: how many step bodies the call may still run.
    budget: int = 1
    # Version 2: the monotonic time after which the call starts no step body.
    until: float | None = None
    ops: list[DurableOp] = field(default_factory=list)
    # Where operations go as they happen (version 2 streams them); None: into `ops`.
    sink: Callable[[DurableOp], None] | None = None
    # Whether the orchestrator is still there (a streamed call): once it has hung up (the
    # run was stopped), no step body starts.
    present: Callable[[], bool] | None = None
    issued: int = 0
    sizes: dict[str, int] = field(default_factory=dict)
    # Set once the call has reported a failure or a mismatch: nothing after counts.
    halted: bool = False
    # The largest value one operation may record (the orchestrator's hard cap).
    max_value: int | None = None
    # Set once this call starts something new (a step body, a wait at the frontier).
    fresh: bool = False
    # A durable shell script's run: the script the call names (other workflows: None).
    script: ScriptRef | None = None
    # Mode replay: where the call stops in the debugger (debugging.py); else None.
    debug: Stops | None = None
    # The orchestrator's time at the call, on this process's monotonic clock.
    _mono: float = field(default_factory=time.monotonic)

    @classmethod
    def of(cls, entries: list[JournalEntry], **kw: Any) -> Call:
        journal = {(e.scope, e.pos): e for e in entries}
        sizes: dict[str, int] = {}
        for scope, pos in journal:
            if pos != RESULT_POS:
                sizes[scope] = max(sizes.get(scope, 0), pos + 1)
        return cls(journal=journal, sizes=sizes, **kw)

    # -- the current call and scope ----------------------------------------------------

    def targets(self, scope_id: str) -> bool:
        """Whether this call advances `scope_id` or a scope inside it."""
        return self.target == scope_id or self.target.startswith(scope_id + "/")

    def within(self, scope_id: str) -> bool:
        """Whether `scope_id` is the targeted scope or one inside it."""
        return (not self.target or scope_id == self.target
                or scope_id.startswith(self.target + "/"))

    def may_run(self, scope: Scope) -> bool:
        """Whether a step body at `scope`'s frontier may run in this call."""
        if self.check or self.halted:
            return False
        if self.present is not None and not self.present():
            self.halted = True  # the caller hung up: nothing this call reports counts
            return False
        if self.protocol >= 2:
            return self.within(scope.id) and (self.until is None
                                              or time.monotonic() < self.until)
        return scope.id == self.target and self.budget > 0

    def spend(self) -> None:
        """A step body starts."""
        self.budget -= 1
        self.fresh = True

    def emit(self, op: DurableOp) -> None:
        if self.sink is None:
            self.ops.append(op)
        else:
            self.sink(op)

    def branch_result(self, scope_id: str) -> JournalEntry | None:
        """The entry holding a parallel branch's result: its result entry, or (version
        2) the step a one-step branch ended with."""
        rec = self.journal.get((scope_id, RESULT_POS))
        if rec is None:
            first = self.journal.get((scope_id, 0))
            if first is not None and first.ends:
                return first
        return rec

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
        on to the next operation) or when this call retries the step there (the call
        of its failed attempt ran up to it), and this call has started nothing new yet."""
        size = self.sizes.get(scope.id, 0)
        if scope.pos < size:
            return True
        if self.fresh:
            return False
        if self.attempts and scope.id == self.target:
            return True  # the retried step is this scope's next operation
        last = self.journal.get((scope.id, size - 1))
        return last is not None and last.kind in RECORDED_BY_CALLS

    # -- operations --------------------------------------------------------------------

    def place(self, scope: Scope, kind: str, name: str) -> Place:
        """Give the next operation of `scope` its place and id."""
        if not isinstance(name, str) or not name:
            raise WorkflowError(f"a {kind} needs a non-empty name, got {name!r}")
        if scope.busy is not None:
            raise self.halt(
                DurableCode.CONCURRENT_OPERATIONS,
                f"{kind} {name!r} started while {scope.busy.kind} {scope.busy.name!r} is still "
                "in flight in the same scope: run operations concurrently with ctx.parallel",
            )
        n = scope.counts.get(name, 0)
        scope.counts[name] = n + 1
        place = Place(scope.id, scope.pos, op_id(scope.id, name, n), kind, name)
        if self.debug is not None:
            self.debug.before(place)
        scope.pos += 1
        self.issued += 1
        if self.max_steps is not None and self.issued > self.max_steps:
            raise self.halt(
                DurableCode.MAX_STEPS_EXCEEDED,
                f"the run issued more than max_steps={self.max_steps} operations; raise the "
                "limit, or split the work into child runs",
            )
        return place

    def recorded(self, place: Place) -> JournalEntry | None:
        """The journal's record at `place`, checked against it (None: the frontier)."""
        rec = self.journal.get((place.scope, place.pos))
        if rec is None:
            return None
        if rec.kind != place.kind or rec.id != place.id:
            recorded = {"scope": rec.scope, "pos": rec.pos, "id": rec.id, "kind": rec.kind,
                        "name": rec.name}
            if self.debug is not None:
                self.debug.diverged(recorded, place)
            self.emit(MismatchOp(recorded=recorded, issued=PlaceDoc(**place.doc()),
                                 message=str(ReplayMismatch(recorded, place.doc()))))
            self.halted = True
            raise Suspend()
        return rec

    def outcome(self, scope: Scope, rec: JournalEntry) -> Any:
        """What a record hands back to the workflow: its value, or its failure raised."""
        scope.now = max(scope.now, float(rec.ended or rec.started or scope.now))
        scope.last_started = float(rec.started or scope.last_started)
        if rec.status == "error":
            raise StepFailed(rec.name, rec.error or {})
        return rec.value

    def record(self, scope: Scope, entry: JournalEntry) -> None:
        """Report a new entry for the orchestrator to commit, and treat it as recorded
        for the rest of this call."""
        self.journal[(entry.scope, entry.pos)] = entry
        if entry.pos != RESULT_POS:
            self.sizes[entry.scope] = max(self.sizes.get(entry.scope, 0), entry.pos + 1)
        scope.now = max(scope.now, float(entry.ended or scope.now))
        scope.last_started = float(entry.started or scope.last_started)
        self.emit(RecordOp(entry=entry))

    def halt(self, code: str, message: str) -> Suspend:
        """End the run as failed with `code` (a circuit breaker, a misuse): reported as an
        operation, and raised as a Suspend so that no `except Exception` hides it."""
        self.fail({"code": code, "message": message})
        return Suspend()

    def fail(self, error: dict[str, Any]) -> None:
        """Report the workflow's failure (once: nothing after the first counts)."""
        if not self.halted:
            self.emit(FailOp(error=error))
            self.halted = True

    def wait(self, place: Place, op: str, **fields: Any) -> Suspend:
        """Report that `place` waits (for a step to run, a timer, a signal...) and stop."""
        self.fresh = True
        self.emit(_WAITS[op](**place.doc(), **fields))
        return Suspend()


def current() -> tuple[Call, Scope]:
    """The call and scope the running workflow code belongs to."""
    call, scope = _CALL.get(), _SCOPE.get()
    if call is None or scope is None:
        raise WorkflowError(
            "durable operations run only inside a workflow served by the SDK "
            "(outside one, call the step's function directly)",
            code=DurableCode.OUTSIDE_WORKFLOW,
        )
    return call, scope
