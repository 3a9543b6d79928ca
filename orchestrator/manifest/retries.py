"""A step's retries: its `RetryPolicy` (how often, and the backoff between attempts) and
the one backoff formula (`retry_delay`) that the engine spreads with jitter."""

from __future__ import annotations

from typing import Literal, Self

from pydantic import Field, model_validator

from orchestrator.manifest.fields import Duration, ManifestModel

__all__ = ["RetryPolicy", "retry_delay"]


def retry_delay(strategy: str, delay: float, max_delay: float, retry: int) -> float:
    """The one backoff formula: seconds before retry number `retry` (1 = the first).
    linear: delay * retry; exponential: delay * 2^(retry-1); both capped at max_delay.
    (The engine spreads it with jitter: engine.attempts.backoff.)"""
    if strategy == "exponential":
        wait = delay * 2.0 ** min(max(0, retry - 1), 64)
    else:
        wait = delay * max(1, retry)
    return min(wait, max_delay)


class RetryPolicy(ManifestModel):
    """How often a step's call is retried and how long to wait in between.

    `max` and `strategy` follow the reference semantics; `delay` (the base wait) and
    `maxDelay` (the cap) are our extension so the backoff is explicit."""

    max: int = Field(default=3, ge=0, le=100, strict=True)
    strategy: Literal["linear", "exponential"] = "linear"
    delay: Duration = 1.0
    max_delay: Duration = 300.0

    @model_validator(mode="after")
    def _check_cap(self) -> Self:
        if self.max_delay < self.delay:
            raise ValueError(
                f"maxDelay ({self.max_delay:g}s) is shorter than delay ({self.delay:g}s)"
            )
        return self

    def delay_before(self, retry: int) -> float:
        """Seconds to wait before retry number `retry` (1 = the first retry)."""
        if retry < 1:
            raise ValueError(f"retry number must be >= 1, got {retry}")
        return retry_delay(self.strategy, self.delay, self.max_delay, retry)
