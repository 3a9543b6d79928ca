"""The failures a step (an HTTP step function or a durable workflow's step) raises on
purpose: terminal (never retried) or retryable (with an optional `retry_after`)."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["RetryableError", "TerminalError", "_DeliberateFailure"]


class _DeliberateFailure(Exception):
    status_code = 500
    retryable = True

    def __init__(self, message: str, code: str, details: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.details = details


class TerminalError(_DeliberateFailure):
    """The step failed and trying again cannot help (bad input, missing record...).
    Answered with 422; the orchestrator fails the step without retrying."""

    status_code = 422
    retryable = False

    def __init__(self, message: str, code: str = "terminal", details: Any = None) -> None:
        super().__init__(message, code, details)


class RetryableError(_DeliberateFailure):
    """The step failed for a passing reason (upstream down, rate limited...).
    Answered with 503 and, if `retry_after` is given, a Retry-After header in whole
    seconds (rounded up) that the orchestrator honours instead of its backoff."""

    status_code = 503
    retryable = True

    def __init__(
        self,
        message: str,
        retry_after: float | None = None,
        code: str = "retryable",
        details: Any = None,
    ) -> None:
        if retry_after is not None and not (retry_after >= 0 and math.isfinite(retry_after)):
            raise ValueError(f"retry_after must be a finite number >= 0, got {retry_after!r}")
        super().__init__(message, code, details)
        self.retry_after = retry_after
