"""The wire format of a durable workflow's call, shared by the orchestrator and the SDK.

A call (`DurableRequestBody`, POSTed to ``/durable/<name>``) carries the run's journal and
is answered with operations (`DurableOp`, one model per `Op`), in one of two versions:

- **1**: one JSON object `DurableAnswer` ``{"ops": [...], "deadline": ...}``; a call runs at
  most one step body.
- **2** (asked for with ``"protocol": 2`` and ``Accept: application/x-ndjson``): a stream
  of NDJSON lines, one `DurableOp` each, as they happen, ended by an `EndOp`. A call runs
  every operation it can until its `budget` of seconds is spent, and each `RecordOp` is
  a checkpoint the orchestrator commits as it arrives. An SDK that knows only version 1
  ignores the field and answers version 1: the answer's media type says which it is.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

__all__ = [
    "DURABLE_PREFIX",
    "NDJSON",
    "PROTOCOLS",
    "PROTOCOL_HEADER",
    "ApprovalOp",
    "CallOp",
    "CompleteOp",
    "DurableAnswer",
    "DurableCode",
    "DurableOp",
    "DurableRequestBody",
    "DurableRun",
    "EndOp",
    "EntryStatus",
    "EventOp",
    "FailOp",
    "HookOp",
    "JournalEntry",
    "LockOp",
    "MismatchOp",
    "NextOp",
    "Op",
    "ParallelOp",
    "PlaceDoc",
    "RecordOp",
    "RetryOp",
    "ScriptRef",
    "SignalOp",
    "SleepOp",
    "SpawnOp",
    "StateOp",
    "WaitKind",
    "WaitOp",
    "parse_op",
]

# A durable workflow `name` is served at POST DURABLE_PREFIX + name.
DURABLE_PREFIX = "/durable/"
# The durable protocol versions this SDK speaks, oldest first.
PROTOCOLS = (1, 2)
# The media type of a version 2 answer.
NDJSON = "application/x-ndjson"
# The response header naming the version an answer is in.
PROTOCOL_HEADER = "X-Durable-Protocol"


class DurableRun(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    run_id: str = Field(min_length=1, description="The run this call advances.")
    workflow: str = Field(default="", description="The workflow's name.")
    started_at: float = Field(description="When the run started (Unix seconds).")
    now: float = Field(description="The orchestrator's time at the call (Unix seconds).")
    attempt: int = Field(default=1, ge=1, description="Attempt of this call (it was retried).")
    subject: str | None = Field(default=None,
                                description="The subject of the event that started the run.")
    max_value: int | None = Field(default=None, ge=1,
                                  description="The largest value (bytes of JSON) one"
                                  " operation may record: past it, output_too_large.")


class DurableRequestBody(BaseModel):
    """The JSON body POSTed to a durable workflow: its run's journal, for one call."""

    model_config = ConfigDict(extra="ignore", title="DurableRequest")

    run: DurableRun
    input: Any = Field(default=None, description="The run's input.")
    journal: list[JournalEntry] = Field(
        default_factory=list,
        description="Every recorded operation: scope, pos, id, kind, name, status, value/error.",
    )
    journal_ref: dict[str, Any] | None = Field(
        default=None,
        description="Instead of `journal`, where to GET it ({url}: a presigned URL), for a"
        " journal too large to send inline.",
    )
    target: str = Field(default="", description="The scope that may run a step body.")
    attempts: dict[str, int] = Field(
        default_factory=dict, description="Failed attempts so far of the frontier's steps, by id.",
    )
    mode: str = Field(default="run", pattern="^(run|check|replay)$",
                      description="run: advance; check: replay only, run nothing; replay:"
                      " as check, and stop in the debugger (breakpoint()) of the process"
                      " serving the call, before `break_at` or at the first mismatch.")
    break_at: str | None = Field(
        default=None, min_length=1, max_length=512,
        description="Mode replay: the name (or id) of the operation before which the"
        " replay stops in the debugger; none: it stops only at a mismatch.")
    protocol: int = Field(default=1, ge=1,
                          description="The newest protocol version the orchestrator speaks:"
                          " 2 asks for a stream of checkpoints (if the SDK speaks it).")
    budget: float | None = Field(default=None, gt=0,
                                 description="Version 2: seconds during which the call may"
                                 " start step bodies; past them it reports `next`.")
    script: ScriptRef | None = Field(
        default=None,
        description="A durable shell script's run: which script, by the hash of its text,"
        " and where to GET the text (a script host runs it; other SDKs ignore it).",
    )


class ScriptRef(BaseModel):
    """The script a durable shell script's run was started with: its text is stored with
    the run (the blob store), so the run replays on the text it started on. A host that
    holds no text of that hash fetches it from `url` (a presigned GET), or takes `text`
    when the orchestrator sent it inline, and checks the hash before running it."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    name: str = Field(min_length=1, max_length=128, description="The script's name.")
    sha256: str = Field(pattern="^[0-9a-f]{64}$", description="Hex SHA-256 of the text.")
    url: str | None = Field(default=None, description="A presigned GET URL of the text.")
    text: str | None = Field(default=None, description="The text itself, when small.")


# -- the durable answer: operations -------------------------------------------------------


class Op(StrEnum):
    """What one operation of an answer says."""

    RECORD = "record"  # a journal entry to commit (a checkpoint)
    COMPLETE = "complete"  # the workflow returned
    FAIL = "fail"  # the workflow failed (an error escaped it, a circuit breaker)
    MISMATCH = "mismatch"  # replay met a different operation than the journal's
    NEXT = "next"  # a step to run at this place: call again
    SLEEP = "sleep"
    SIGNAL = "signal"
    EVENT = "event"
    HOOK = "hook"
    CALL = "call"  # a child run, waited for
    SPAWN = "spawn"  # a child run, not waited for
    PARALLEL = "parallel"  # branches to advance on their own
    RETRY = "retry"  # a step's attempt failed: its next one after a backoff
    END = "end"  # version 2: the stream is complete
    APPROVAL = "approval"  # a gate a person answers (or its timeout)
    STATE = "state"  # an operation on a durable state cell, performed and recorded at once
    LOCK = "lock"  # take a lock (wait in line for it) or release it


class WaitKind(StrEnum):
    """What a durable run (or one of its parallel branches) waits for."""

    SLEEP = "sleep"
    SIGNAL = "signal"
    EVENT = "event"
    HOOK = "hook"
    PARALLEL = "parallel"
    CALL = "call"
    SPAWN = "spawn"
    RETRY = "retry"
    NEXT = "next"
    MISMATCH = "mismatch"
    APPROVAL = "approval"
    STATE = "state"
    LOCK = "lock"


class DurableCode(StrEnum):
    """The error codes a durable workflow's SDK reports (orchestrator.errors.Code holds
    each of them too)."""

    WORKFLOW_FAILED = "workflow_failed"
    REPLAY_MISMATCH = "replay_mismatch"
    CHILD_FAILED = "child_failed"
    STEP_ERROR = "step_error"
    STEP_TIMEOUT = "step_timeout"
    MAX_STEPS_EXCEEDED = "max_steps_exceeded"
    EXECUTION_TIMEOUT = "execution_timeout"
    INVALID_VALUE = "invalid_value"
    CONCURRENT_OPERATIONS = "concurrent_operations"
    NESTED_OPERATION = "nested_operation"
    TOO_MANY_BRANCHES = "too_many_branches"
    BAD_BRANCH = "bad_branch"
    BRANCH_FAILED = "branch_failed"
    JOURNAL_INCOMPLETE = "journal_incomplete"
    OUTSIDE_WORKFLOW = "outside_workflow"
    # The operation sends a value past MAX_VALUE_BYTES, or names a signal or event
    # against the rule (protocol/values.py): raised where the workflow declares it.
    VALUE_TOO_LARGE = "value_too_large"
    INVALID_NAME = "invalid_name"


EntryStatus = Literal["ok", "error", "timeout"]


class PlaceDoc(BaseModel):
    """Where an operation sits: its scope (the workflow's top is ""; a parallel branch
    has its own), its position there, its id (a hash of scope, name and how many
    operations of that name came before), its kind and name."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    scope: str = ""
    pos: int = Field(ge=0)
    id: str = Field(min_length=1)
    kind: str = ""
    name: str


class JournalEntry(PlaceDoc):
    """One recorded operation, written once. Kinds add fields of their own (a signal's
    id, a child's run id), kept as they come."""

    model_config = ConfigDict(frozen=True, extra="allow")

    status: EntryStatus = "ok"
    value: Any = None
    error: dict[str, Any] | None = None
    attempts: int | None = None
    started: float | None = None
    ended: float | None = None
    # Version 2: this step's outcome is also its parallel branch's result (a branch
    # that is one step records no result entry of its own).
    ends: bool | None = None

    def doc(self) -> dict[str, Any]:
        """The entry as stored and sent back (unset fields left out)."""
        return self.model_dump(exclude_none=True)


class RecordOp(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")
    op: Literal[Op.RECORD] = Op.RECORD
    entry: JournalEntry


class CompleteOp(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")
    op: Literal[Op.COMPLETE] = Op.COMPLETE
    value: Any = None


class FailOp(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")
    op: Literal[Op.FAIL] = Op.FAIL
    error: dict[str, Any] = Field(description="{code, message, step?, details?}")


class MismatchOp(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")
    op: Literal[Op.MISMATCH] = Op.MISMATCH
    recorded: dict[str, Any] = Field(default_factory=dict)
    issued: PlaceDoc
    message: str = "replay mismatch"


class _WaitBase(PlaceDoc):
    model_config = ConfigDict(frozen=True, extra="ignore")


class NextOp(_WaitBase):
    op: Literal[Op.NEXT] = Op.NEXT


class SleepOp(_WaitBase):
    op: Literal[Op.SLEEP] = Op.SLEEP
    seconds: float | None = Field(default=None, ge=0)
    until: float | None = None


class SignalOp(_WaitBase):
    op: Literal[Op.SIGNAL] = Op.SIGNAL
    timeout: float | None = Field(default=None, ge=0)


class EventOp(_WaitBase):
    op: Literal[Op.EVENT] = Op.EVENT
    event: str = Field(min_length=1)
    subject: str | None = None
    timeout: float | None = Field(default=None, ge=0)
    after: float | None = Field(default=None, ge=0)


class HookOp(_WaitBase):
    op: Literal[Op.HOOK] = Op.HOOK
    signal: str = Field(min_length=1)
    metadata: Any = None
    ttl: float | None = Field(default=None, ge=0)


class CallOp(_WaitBase):
    op: Literal[Op.CALL] = Op.CALL
    workflow: str = Field(min_length=1)
    input: Any = None


class SpawnOp(_WaitBase):
    op: Literal[Op.SPAWN] = Op.SPAWN
    workflow: str = Field(min_length=1)
    input: Any = None
    # When the child ends, send this run the signal `notify` with the child's outcome
    # {run_id, status, output, error} (once: its id is the child's run id), so a later
    # wait for that signal collects it (a script's `activity wait`).
    notify: str | None = Field(default=None, min_length=1, max_length=128)


class ParallelOp(_WaitBase):
    op: Literal[Op.PARALLEL] = Op.PARALLEL
    branches: int = Field(ge=1)
    max_parallel: int = Field(ge=1)


class RetryOp(_WaitBase):
    op: Literal[Op.RETRY] = Op.RETRY
    attempt: int = Field(ge=1)
    error: dict[str, Any] | None = None
    after: float = Field(ge=0)
    started: float | None = None
    ended: float | None = None


class ApprovalOp(_WaitBase):
    """Ask a person: the orchestrator opens gate `name` (in the inbox, answerable by
    `approvers`, or anyone with an API key) and records `{approved, timed_out, by, at,
    comment}` once it is answered or `timeout` seconds pass. A rejection cancels the
    run."""

    op: Literal[Op.APPROVAL] = Op.APPROVAL
    prompt: str = Field(default="", max_length=2000)
    timeout: float = Field(gt=0, le=100 * 365 * 86400)
    approvers: list[str] = Field(default_factory=list, max_length=100)
    link: bool = False


class StateOp(_WaitBase):
    """An operation on the state cell (`entity`, `key`): `add` (claim it once: whether
    this run won), `incr` (by `by`: the new number), `get` (the value, or null), `set`
    (`value`, for `ttl` seconds), `delete` (whether there was one). The orchestrator
    performs it and records the answer in the same write: a replay reads the answer."""

    op: Literal[Op.STATE] = Op.STATE
    action: Literal["add", "incr", "get", "set", "delete"]
    entity: str = Field(min_length=1, max_length=128)
    key: str = Field(min_length=1, max_length=512)
    value: Any = None
    by: int | float = 1
    ttl: float | None = Field(default=None, gt=0, le=100 * 365 * 86400)


class LockOp(_WaitBase):
    """`acquire`: wait in line for the lock `key` (holding nothing) until this run holds
    it; `release`: free it for the next in line. A run that ends releases what it holds."""

    op: Literal[Op.LOCK] = Op.LOCK
    action: Literal["acquire", "release"]
    key: str = Field(min_length=1, max_length=128)


class EndOp(BaseModel):
    """Version 2: the last line of a complete stream (a stream cut before it is a call
    that failed; what it committed stands)."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    op: Literal[Op.END] = Op.END
    deadline: float | None = Field(default=None, description="The run's execution deadline.")


WaitOp = (NextOp | SleepOp | SignalOp | EventOp | HookOp | CallOp | SpawnOp | ParallelOp
          | RetryOp | ApprovalOp | StateOp | LockOp)
DurableOp = Annotated[
    RecordOp | CompleteOp | FailOp | MismatchOp | NextOp | SleepOp | SignalOp | EventOp
    | HookOp | CallOp | SpawnOp | ParallelOp | RetryOp | EndOp | ApprovalOp | StateOp
    | LockOp,
    Field(discriminator="op"),
]
_OP: TypeAdapter[DurableOp] = TypeAdapter(DurableOp)


class DurableAnswer(BaseModel):
    """A version 1 answer: every operation at once."""

    model_config = ConfigDict(extra="ignore", title="DurableAnswer")

    ops: list[DurableOp] = Field(max_length=1000)
    deadline: float | None = Field(default=None, description="The run's execution deadline.")
    stops: list[dict[str, Any]] | None = Field(
        default=None, description="Mode replay: where the replay stopped in the debugger"
        " ({reason: break | mismatch, scope, pos, id, kind, name}).")


DurableRequestBody.model_rebuild()


def parse_op(line: bytes | str) -> DurableOp:
    """One line of a version 2 stream (pydantic's ValidationError if it is not one)."""
    return _OP.validate_json(line)
