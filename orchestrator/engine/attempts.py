"""One attempt's outcome and what it changes on its row: the function contract's
classification of an HTTP answer, the one backoff formula, succeed / retry / fail.

Pure: nothing here does I/O."""

from __future__ import annotations

import email.utils
import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from orchestrator.engine.records import StepRecord
from orchestrator.errors import Code, error_doc
from orchestrator.manifest.retries import retry_delay
from orchestrator.strict_json import dumps

__all__ = [
    "EARLY_WAIT",
    "MAX_RETRY_AFTER",
    "RETRYABLE_4XX",
    "Decision",
    "Fail",
    "Outcome",
    "OutcomeKind",
    "Retry",
    "Succeed",
    "after_attempt",
    "backoff",
    "classify_response",
    "inputs_unavailable",
    "output_not_kept",
    "parse_retry_after",
    "run_missing",
    "timer_hop",
    "unknown_backend",
    "wait_before",
]

# Status codes in 4xx that mean "try again later", not "your request is wrong".
RETRYABLE_4XX = frozenset({408, 409, 425, 429})


MAX_RETRY_AFTER = 24 * 3600.0

# A timer message due this soon is waited out by the worker that received it; one due
# later is sent on (SQS delays at most 15 minutes, in whole seconds).
EARLY_WAIT = 1.0


class OutcomeKind(StrEnum):
    SUCCESS = "success"
    RETRYABLE = "retryable"
    PERMANENT = "permanent"


@dataclass(frozen=True)
class Outcome:
    kind: OutcomeKind
    output: Any = None
    error: dict[str, Any] | None = None
    retry_after: float | None = None


def parse_retry_after(value: str | None, now: float) -> float | None:
    """`Retry-After` is either delta-seconds or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - now
    if math.isnan(seconds) or seconds < 0:
        return 0.0
    return min(seconds, MAX_RETRY_AFTER)


def as_text(value: Any) -> str:
    """A function's error, as a message: text as it is, anything else as its JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("message"), str):
        return str(value["message"])
    return dumps(value)


def _error_reason(body: Any) -> Any:
    if isinstance(body, dict) and "error" in body:
        return body["error"]
    return body


def classify_response(
    status: int, body: Any, *, retry_after: str | None, now: float, body_is_json: bool
) -> Outcome:
    """The function contract: 2xx+JSON is success, 4xx is permanent except 408/409/425/429,
    5xx is retryable; Retry-After is honoured."""
    if 200 <= status < 300:
        if not body_is_json:
            return Outcome(
                OutcomeKind.PERMANENT,
                error=error_doc(Code.INVALID_OUTPUT, "2xx response body is not JSON",
                                status=status),
            )
        return Outcome(OutcomeKind.SUCCESS, output=body)
    reason = _error_reason(body)
    err = {
        "code": Code.HTTP_ERROR.value, "message": as_text(reason)[:500],
        "status": status, "reason": reason,
    }
    if 400 <= status < 500 and status not in RETRYABLE_4XX:
        return Outcome(OutcomeKind.PERMANENT, error=err)
    return Outcome(
        OutcomeKind.RETRYABLE, error=err, retry_after=parse_retry_after(retry_after, now)
    )


def backoff(strategy: str, base: float, cap: float, attempt: int, rand: float) -> float:
    """Delay before attempt `attempt + 1`, after `attempt` failed: the manifest's one
    formula (manifest.workflows.retry_delay), then "equal jitter" (half fixed, half
    random) so that the retries of a fan-out spread out."""
    d = retry_delay(strategy, base, cap, attempt)
    return d / 2 + d / 2 * max(0.0, min(1.0, rand))


@dataclass(frozen=True)
class Succeed:
    output: Any


@dataclass(frozen=True)
class Retry:
    next_attempt: int
    due_at: float
    error: dict[str, Any]


@dataclass(frozen=True)
class Fail:
    error: dict[str, Any]


Decision = Succeed | Retry | Fail


def after_attempt(step: StepRecord, outcome: Outcome, now: float, rand: float) -> Decision:
    """What one finished attempt changes on its own row."""
    if outcome.kind is OutcomeKind.SUCCESS:
        return Succeed(outcome.output)
    error = dict(outcome.error or {})
    error.setdefault("attempt", step.attempt)
    if outcome.kind is OutcomeKind.RETRYABLE and step.attempt < step.max_attempts:
        if outcome.retry_after is not None:
            delay = outcome.retry_after
        else:
            delay = backoff(
                step.retry_strategy, step.retry_delay, step.retry_max_delay, step.attempt, rand
            )
        return Retry(step.attempt + 1, now + delay, error)
    if outcome.kind is OutcomeKind.RETRYABLE:
        error["exhausted"] = True
    return Fail(error)


def timer_hop(due_at: float | None, now: float) -> bool:
    """Whether a message due at `due_at` is sent on as a timer rather than handled now
    (a long timer hops from delayed message to delayed message; see wait_before)."""
    return due_at is not None and due_at > now + EARLY_WAIT


def wait_before(due_at: float | None, now: float) -> float:
    """How long a worker waits for a message due within EARLY_WAIT: its attempt starts
    at its due time, not when its message came (0 for one due already)."""
    return 0.0 if due_at is None or due_at <= now else min(due_at - now, EARLY_WAIT)


# The outcomes of attempts the worker decides without a call.

def run_missing(run_id: str) -> Outcome:
    return Outcome(OutcomeKind.PERMANENT,
                   error=error_doc(Code.RUN_MISSING, f"run {run_id} is gone"))


def unknown_backend(step: str, backend: str) -> Outcome:
    return Outcome(OutcomeKind.PERMANENT, error=error_doc(
        Code.UNKNOWN_BACKEND, f"step {step}: backend {backend!r} is not configured"))


def command_failed(step: str, why: str) -> Outcome:
    """A `run:` step's command could not be rendered (a hole that fails to evaluate on
    this run's values): the same input fails the same way, so it is not retried."""
    return Outcome(OutcomeKind.PERMANENT, error=error_doc(
        Code.INVALID_VALUE, f"step {step}: its run: command: {why}"))


def inputs_unavailable(why: str) -> Outcome:
    """Its dependencies' outputs could not be read (the blob store failed): try again."""
    return Outcome(OutcomeKind.RETRYABLE, error=error_doc(Code.INPUTS_UNAVAILABLE, why))


def output_not_kept(why: str) -> Outcome:
    """The function answered, but its output could not be kept: tried again, as any
    retryable failure."""
    return Outcome(OutcomeKind.RETRYABLE, error=error_doc(Code.OUTPUT_STORE_FAILED, why),
                   retry_after=1.0)
