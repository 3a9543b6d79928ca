"""Limits that protect a backend (`backends.<name>.limits`): at most `concurrency`
calls in flight and at most `rate` calls started per period, across every run, step
kind and worker. Pure: the decisions; services/coordination/backend_limits.py applies
them with conditional writes on one control item per backend (adapters/store/
backend_limits.py).

- **A call may start** when the backend's item has room (fewer holders than
  `concurrency`), its rate slot has come (`tat`, the theoretical arrival time of the
  next start, is not in the future: starts are spaced `period / count` apart) and no
  `429` asked to hold off (`not_before`). Taking the slot is one conditional write
  that checks all three.
- **A call that may not start** (`verdict`) waits for its rate slot or its `429`'s
  end (a timer at that time), or for a slot to be freed (a hand-over from the call
  that frees it, and a recheck after `RECHECK` in case that call's process died).
- **A holder that vanished** (its process died mid-call) holds its slot until its
  lease (`lease_until`: the call's timeout plus a margin) passes; whoever finds the
  backend full drops the expired holders.
- **A `429` with `Retry-After`** holds every call to the backend off until then
  (`hold_off`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from orchestrator.engine.attempts import Outcome, OutcomeKind
from orchestrator.manifest.durations import format_duration

__all__ = ["RECHECK", "BackendLimit", "LimitKind", "Limits", "Room", "Wait", "hold_off",
           "verdict"]

# How long a call refused for want of a free slot waits at most before it looks again:
# the hand-over wakes it as soon as a slot is freed, so this only bounds what a hand-over
# lost with its process costs (as a lock's line does). Every waiter looks this often, so
# a long line costs its backend's control item a wake per waiter per RECHECK.
RECHECK = 30.0
# A wait this close to its end is not worth a timer: look again at once.
NEAR = 0.005


class LimitKind(StrEnum):
    CONCURRENCY = "concurrency"
    RATE = "rate"
    # A 429's Retry-After holds the backend off.
    RETRY_AFTER = "retry_after"


@dataclass(frozen=True)
class Limits:
    """A backend's limits, as its manifest declares them (either may be None)."""

    backend: str
    concurrency: int | None = None
    rate_count: int | None = None
    rate_period: float | None = None

    @property
    def interval(self) -> float | None:
        """Seconds between two starts under the rate (None: no rate)."""
        if self.rate_count is None or self.rate_period is None:
            return None
        return self.rate_period / self.rate_count

    @property
    def rate_text(self) -> str:
        if self.rate_count is None or self.rate_period is None:
            return ""
        return f"{self.rate_count}/{format_duration(self.rate_period)}"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.concurrency is not None:
            out["concurrency"] = self.concurrency
        if self.rate_count is not None:
            out["rate"] = self.rate_text
        return out


@dataclass(frozen=True)
class BackendLimit:
    """The backend's item as read: who holds a slot (holder -> lease end), when the
    next start may be (`tat`) and when a 429 lets calls start again (`not_before`)."""

    holders: Mapping[str, float]
    tat: float = 0.0
    not_before: float = 0.0
    exists: bool = True


@dataclass(frozen=True)
class Wait:
    """The call may not start: wait until `until` for `limit`; `expired`: holders whose
    lease has passed, to drop first (then try again at once)."""

    limit: LimitKind
    until: float
    expired: tuple[str, ...] = ()


@dataclass(frozen=True)
class Room:
    """The item said no, but there is room now (it changed under the write, or it
    held only expired holders, named in `expired`): try again."""

    expired: tuple[str, ...] = ()


def verdict(limits: Limits, item: BackendLimit, now: float) -> Wait | Room:
    """Why a call found no room, from the item read after its write was refused."""
    if item.not_before > now + NEAR and item.not_before >= item.tat:
        return Wait(LimitKind.RETRY_AFTER, item.not_before)
    if item.tat > now + NEAR:
        return Wait(LimitKind.RATE, item.tat)
    if limits.concurrency is not None and len(item.holders) >= limits.concurrency:
        expired = tuple(h for h, until in item.holders.items() if until <= now)
        if len(item.holders) - len(expired) >= limits.concurrency:
            soonest = min(item.holders.values(), default=now + RECHECK)
            return Wait(LimitKind.CONCURRENCY, min(now + RECHECK, max(soonest, now)))
        return Room(expired)
    return Room()


def hold_off(outcome: Outcome | None, now: float) -> float | None:
    """Until when a call's answer asks every call to its backend to wait: a `429` with a
    `Retry-After` (seconds or an HTTP date, already parsed into `retry_after`)."""
    if outcome is None or outcome.kind is not OutcomeKind.RETRYABLE:
        return None
    if (outcome.error or {}).get("status") != 429 or outcome.retry_after is None:
        return None
    return now + outcome.retry_after
