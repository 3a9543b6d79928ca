"""What a trigger's admission answers: one typed result, rendered the same way by every
answer that reports it (`POST /runs`, a webhook delivery, an event's runs)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from orchestrator.engine.records import RunRecord
from orchestrator.engine.states import RunStatus
from orchestrator.errors import StoreError

__all__ = ["Outcome", "Started", "repeat_of", "taken"]


class Outcome(StrEnum):
    """How a trigger was taken."""

    # A new run, started now.
    CREATED = "created"
    # A new run, queued for its throttle, concurrency group or debounce period.
    QUEUED = "queued"
    # A new run, refused at once (a throttle's `drop`, a group's `skip`): it ended skipped.
    SKIPPED = "skipped"
    # This trigger was seen before (the same Idempotency-Key, event id, delivery id or
    # run id): answered with the run it made then; nothing moved.
    DUPLICATE = "duplicate"
    # A new trigger that joined a debounced burst already queued: its run (whose input
    # is now this trigger's, and whose start moved) is the burst's.
    DEBOUNCED = "debounced"
    # An event that joined a batch already queued (a workflow's `batch:`): its run is
    # the batch's, whose input now lists this event too.
    BATCHED = "batched"


@dataclass(frozen=True)
class Started:
    run: RunRecord
    outcome: Outcome

    @classmethod
    def new(cls, run: RunRecord) -> Started:
        """A run this trigger created, as its status now says."""
        if run.status is RunStatus.QUEUED:
            return cls(run, Outcome.QUEUED)
        if run.status is RunStatus.SKIPPED:
            return cls(run, Outcome.SKIPPED)
        return cls(run, Outcome.CREATED)

    @property
    def created(self) -> bool:
        """Whether this trigger made a new run."""
        return bool(taken(self.outcome)["created"])

    def fields(self) -> dict[str, Any]:
        """The answer's fields about how the trigger was taken (every answer the same)."""
        return taken(self.outcome)


def taken(outcome: Outcome) -> dict[str, Any]:
    """How a trigger was taken, as every answer says it (without the run at hand: a
    repeat answered from its first delivery)."""
    return {"created": outcome in (Outcome.CREATED, Outcome.QUEUED, Outcome.SKIPPED),
            "duplicate": outcome is Outcome.DUPLICATE,
            "debounced": outcome is Outcome.DEBOUNCED, "outcome": outcome.value}


def repeat_of(run: RunRecord | None, run_id: str, what: str) -> Started:
    """The answer to a repeat of a trigger (`what`: "event", "trigger") that joined run
    `run_id` (`run`: as read now); StoreError if the run has expired since."""
    if run is None:
        raise StoreError(f"run {run_id!r}, which this {what} joined, has expired")
    return Started(run, Outcome.DUPLICATE)
