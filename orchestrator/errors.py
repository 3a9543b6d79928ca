"""The error tree: every refusal has a stable code, a retryable flag and a message
that names the run, step, field or file line it is about."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

__all__ = [
    "Code",
    "ConditionFailed",
    "Conflict",
    "Forbidden",
    "InvalidName",
    "ManifestError",
    "NotFound",
    "OrchestratorError",
    "StoreError",
    "Throttled",
    "Unauthorized",
    "Unprocessable",
    "UsageError",
    "ValueTooLarge",
    "error_doc",
    "imported_run",
]


class Code(StrEnum):
    """Every error code the orchestrator reports, in one registry: the stable code
    (clients match on it), whether what it names is retried, and what it means. Step
    and run errors are `{"code", "message", ...details}`; API errors are
    `{"error": {"code", "message"}}`. The README lists them all (a test checks it)."""

    retryable: bool | None
    meaning: str

    def __new__(cls, value: str, retryable: bool | None, meaning: str) -> Code:
        member = str.__new__(cls, value)
        member._value_ = value
        member.retryable = retryable
        member.meaning = meaning
        return member

    # A step's error (`steps[].error` in a run's view, and its history).
    HTTP_ERROR = ("http_error", None, "the function answered an error status: retried for"
                  " 5xx, 408, 409, 425 and 429, not for any other 4xx")
    TIMEOUT = "timeout", True, "the function did not answer within the step's timeout"
    CONNECTION_ERROR = "connection_error", True, "the function could not be reached"
    INVALID_OUTPUT = "invalid_output", False, "a 2xx answer whose body is not JSON"
    OUTPUT_TOO_LARGE = "output_too_large", False, "the answer is larger than the hard cap"
    OUTPUT_STORE_FAILED = "output_store_failed", True, "the output could not be stored"
    INPUTS_UNAVAILABLE = ("inputs_unavailable", True,
                          "the dependencies' outputs could not be read")
    LEASE_EXPIRED = ("lease_expired", True,
                     "the worker running the attempt stopped answering")
    JOURNAL_TOO_LARGE = ("journal_too_large", False,
                         "a durable run recorded more operations than ORCH_DURABLE_MAX_ENTRIES")
    BAD_ANSWER = ("bad_answer", True,
                  "a durable workflow's answer does not follow the protocol: retried")
    # A durable workflow's operations (functions.sdk.protocol.DurableCode: the SDK reports them).
    WORKFLOW_FAILED = ("workflow_failed", False,
                       "a durable workflow raised an exception its code did not catch")
    REPLAY_MISMATCH = ("replay_mismatch", False, "on replay the workflow issued another"
                       " operation than its journal records there (the run pauses)")
    CHILD_FAILED = "child_failed", False, "a child run of ctx.call ended without success"
    STEP_ERROR = "step_error", None, "a durable step's body raised (its retries apply)"
    STEP_TIMEOUT = "step_timeout", True, "a durable step's attempt ran past its timeout"
    MAX_STEPS_EXCEEDED = ("max_steps_exceeded", False,
                          "a durable run issued more operations than its max_steps")
    EXECUTION_TIMEOUT = ("execution_timeout", False,
                         "a durable run went past its execution_timeout")
    INVALID_VALUE = ("invalid_value", False,
                     "a durable step's or workflow's value is not JSON")
    CONCURRENT_OPERATIONS = ("concurrent_operations", False, "durable operations were in"
                             " flight at once outside ctx.parallel (asyncio.gather)")
    NESTED_OPERATION = ("nested_operation", False,
                        "a durable operation was started inside a step's body")
    TOO_MANY_BRANCHES = ("too_many_branches", False,
                         "a ctx.parallel has more branches than allowed")
    BAD_BRANCH = ("bad_branch", False,
                  "a ctx.parallel branch is not a step or async callable, or max_parallel is wrong")
    BRANCH_FAILED = "branch_failed", False, "a branch of a ctx.parallel failed"
    JOURNAL_INCOMPLETE = ("journal_incomplete", True,
                          "the journal sent lacks an entry the workflow needs (a branch's result)")
    OUTSIDE_WORKFLOW = ("outside_workflow", False,
                        "a durable operation was called outside a running workflow")
    UNKNOWN_BACKEND = "unknown_backend", False, "the step's backend is not configured"
    RUN_MISSING = "run_missing", False, "the step's run row is gone"
    SKIPPED = "skipped", False, "the step never ran: a dependency failed or the run stopped"
    FAN_OUT_FAILED = ("fan_out_failed", False,
                      "a fan_out step's items failed past its tolerate (or its items are not"
                      " a list, or over the cap)")
    CONDITION_FALSE = ("condition_false", False,
                       "the step did not run: its `if:` was false (its dependants go on)")
    # A run's error (`error` in a run's view).
    STEP_FAILED = "step_failed", False, "a step failed (`step`, `steps`, `reason`)"
    KILLED = "killed", False, "the run was cancelled (`reason`)"
    CONCURRENCY_BUSY = ("concurrency_busy", False,
                        "the run's concurrency group was busy (policy skip)")
    THROTTLED = "throttled", False, "the run was over its throttle's rate (policy drop)"
    # API refusals (`{"error": {...}}`), and the CLI's.
    BAD_REQUEST = "bad_request", False, "400: malformed request (JSON, flag, parameter)"
    INVALID_BODY = "invalid_body", False, "422: the body does not fit the request's model"
    BODY_TOO_LARGE = "body_too_large", False, "413: the request body is over 1 MiB"
    VALUE_TOO_LARGE = ("value_too_large", False, "400: a value sent (run input, signal or"
                       " hook payload, hook metadata, event data, custom event payload) is"
                       " over its 256 KiB cap; a durable operation sending one fails with it")
    INVALID_NAME = ("invalid_name", False, "400: a signal, hook or event name breaks the"
                    " naming rule; a durable wait declared with one fails with it")
    NOT_FOUND = "not_found", False, "404: no such run, workflow, schedule, webhook or route"
    METHOD_NOT_ALLOWED = "method_not_allowed", False, "405: the route takes another method"
    HTTP = "http", False, "another HTTP refusal of the routing layer"
    CONFLICT = "conflict", False, "409: the request does not fit the run's state"
    HOOK_GONE = "hook_gone", False, "410: a hook already executed (single-use) or expired"
    RUN_FINISHED = "run_finished", False, "409: the run has already finished"
    APPROVAL_ANSWERED = ("approval_answered", False,
                         "409: the approval was answered already: nothing changed")
    APPROVAL_TIMED_OUT = ("approval_timed_out", False,
                          "409: an answer after the approval's deadline: it timed out")
    FORBIDDEN = "forbidden", False, "403: the API key is not among the approval's approvers"
    RUN_NOT_FINISHED = "run_not_finished", False, "409: rerun of a run still going"
    VERSION_TAKEN = ("version_taken", False,
                     "409: a version label registered already with another URL")
    VERSION_PINNED = ("version_pinned", False,
                      "409: retire of a version open runs are pinned to")
    VERSION_GONE = ("version_gone", False, "a durable run's version is not live: the run"
                    " is paused until migrated or cancelled")
    NOTHING_TO_RERUN = "nothing_to_rerun", False, "409: rerun of a run that succeeded"
    IDEMPOTENCY_KEY_REUSED = ("idempotency_key_reused", False,
                              "422: an Idempotency-Key sent again with another body")
    MISSING_API_KEY = "missing_api_key", False, "401: no bearer key"
    BAD_API_KEY = "bad_api_key", False, "401: a wrong key or scheme"
    MISSING_SIGNATURE = "missing_signature", False, "401: a webhook delivery without one"
    BAD_SIGNATURE = "bad_signature", False, "401: no secret's signature matches the body"
    MALFORMED_SIGNATURE = "malformed_signature", False, "401: a signature header unparsable"
    STALE_TIMESTAMP = "stale_timestamp", False, "401: a delivery older than the tolerance"
    FUTURE_TIMESTAMP = ("future_timestamp", False,
                        "401: a delivery dated past the tolerance ahead")
    MISSING_DELIVERY_ID = "missing_delivery_id", False, "401: a delivery without its id"
    # Internal: what the AWS endpoint, the API or the manifest did.
    STORE_ERROR = "store_error", True, "a DynamoDB, SQS or S3 call failed"
    API_UNAVAILABLE = "api_unavailable", True, "the API could not be reached or failed (5xx)"
    BAD_RESPONSE = "bad_response", True, "the API answered something that is not its JSON"
    CONDITION_FAILED = "condition_failed", False, "a guarded write found another state"
    INVALID_MANIFEST = "invalid_manifest", False, "the manifest failed to load or lint"
    FIRE_FAILED = "fire_failed", True, "a schedule's forEach rows could not be fetched"
    ORCHESTRATOR_ERROR = "orchestrator_error", False, "an error with no more precise code"


def error_doc(code: Code, message: str, **details: Any) -> dict[str, Any]:
    """A step's or a run's error: its code, a message for humans, and details (None
    values left out)."""
    doc: dict[str, Any] = {"code": code.value, "message": message}
    doc.update({k: v for k, v in details.items() if v is not None})
    return doc


class OrchestratorError(Exception):
    """Base of every error the orchestrator raises on purpose."""

    code: str = Code.ORCHESTRATOR_ERROR
    retryable = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def to_dict(self) -> dict[str, object]:
        return {"code": self.code, "message": self.message}


class UsageError(OrchestratorError):
    """The caller asked for something malformed (bad flag, bad JSON, bad body)."""

    code = Code.BAD_REQUEST


class ValueTooLarge(UsageError):
    """A value sent through the API (or by a durable operation) is over its cap: refused
    before anything is stored (400)."""

    code = Code.VALUE_TOO_LARGE


class InvalidName(UsageError):
    """A signal, hook or event name that breaks the naming rule (400)."""

    code = Code.INVALID_NAME


class NotFound(OrchestratorError):
    code = Code.NOT_FOUND


class Unprocessable(OrchestratorError):
    """Well-formed but refused: e.g. an Idempotency-Key reused with another body (422)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class Conflict(OrchestratorError):
    """The request does not fit the current state of a run (409)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def imported_run(run_id: str, source: str, what: str) -> Conflict:
    """The refusal of `what` (a signal, a cancel...) for a run copied from another stack
    (`runs pull`): such a copy is read and replayed, never advanced."""
    return Conflict(Code.CONFLICT, f"run {run_id!r} was imported from {source}: it is a"
                    f" read-only copy here ({what} would advance it); act on it there")


class Unauthorized(OrchestratorError):
    """No credentials, or wrong ones (401)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class Forbidden(OrchestratorError):
    """Authenticated, but not allowed to do this (403)."""

    code = Code.FORBIDDEN


class ManifestError(OrchestratorError):
    """A manifest failed to load or lint; `problems` holds one line per finding,
    each formatted `file:line: field: message`."""

    code = Code.INVALID_MANIFEST

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems) or "invalid manifest")


class StoreError(OrchestratorError):
    """A DynamoDB/SQS/S3 call failed for a reason other than a guard (the cause is chained)."""

    code = Code.STORE_ERROR
    retryable = True


class Throttled(StoreError):
    """AWS refused the request for its throughput (a DynamoDB partition or table over its
    rate: ProvisionedThroughputExceededException, ThrottlingException,
    RequestLimitExceeded), or for a transaction in flight on its item
    (TransactionConflictException, a transaction's TransactionConflict), and botocore's
    own retries did not get it through: the request had no effect, and the same request
    may simply be sent again later."""


class ConditionFailed(OrchestratorError):
    """A conditional write found the row in another state than it expected.

    This is the normal outcome of a duplicate, late or reordered message: callers
    treat it as "someone else already did this" and move on. `item`: the row as the
    guard found it, when the write asked for it (ReturnValuesOnConditionCheckFailure)."""

    code = Code.CONDITION_FAILED

    def __init__(self, message: str, item: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.item = item
