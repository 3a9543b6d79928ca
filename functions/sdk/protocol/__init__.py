"""The wire format between the orchestrator and the functions it calls, shared by both
sides: the orchestrator builds requests and reads answers with these models, the SDK
parses requests and writes answers with them.

- `step`: one step call (`StepRequestBody`, POSTed to a step route) and the error body
  ``{"error": {"code", "message", "retryable", "details"}}`` of every failure the SDK
  reports;
- `durable`: one call of a durable workflow (`DurableRequestBody`, POSTed to
  ``/durable/<name>``) and the operations it is answered with (`DurableOp`), in version 1
  (one `DurableAnswer`) or 2 (a stream of NDJSON lines ended by an `EndOp`);
- `values`: the one rule for names (signals, hooks, events) and the cap on a value sent,
  which the orchestrator enforces and the SDK checks where a workflow declares them.

Every name of the three is importable from here.
"""

from functions.sdk.protocol.durable import (
    DURABLE_PREFIX,
    NDJSON,
    PROTOCOL_HEADER,
    PROTOCOLS,
    ApprovalOp,
    CallOp,
    CompleteOp,
    DurableAnswer,
    DurableCode,
    DurableOp,
    DurableRequestBody,
    DurableRun,
    EndOp,
    EntryStatus,
    EventOp,
    FailOp,
    HookOp,
    JournalEntry,
    LockOp,
    MismatchOp,
    NextOp,
    Op,
    ParallelOp,
    PlaceDoc,
    RecordOp,
    RetryOp,
    ScriptRef,
    SignalOp,
    SleepOp,
    SpawnOp,
    StateOp,
    WaitKind,
    WaitOp,
    parse_op,
)
from functions.sdk.protocol.step import (
    RESERVED_KEYS,
    ErrorBody,
    ErrorInfo,
    RunInfo,
    StepRequestBody,
    request_body,
)
from functions.sdk.protocol.values import (
    EVENT_NAME_RULE,
    MAX_VALUE_BYTES,
    NAME_RULE,
    name_problem,
    normal_name,
    value_bytes,
)

__all__ = [
    "DURABLE_PREFIX",
    "EVENT_NAME_RULE",
    "MAX_VALUE_BYTES",
    "NAME_RULE",
    "NDJSON",
    "PROTOCOLS",
    "PROTOCOL_HEADER",
    "RESERVED_KEYS",
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
    "ErrorBody",
    "ErrorInfo",
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
    "RunInfo",
    "ScriptRef",
    "SignalOp",
    "SleepOp",
    "SpawnOp",
    "StateOp",
    "StepRequestBody",
    "WaitKind",
    "WaitOp",
    "name_problem",
    "normal_name",
    "parse_op",
    "request_body",
    "value_bytes",
]
