"""Where an event goes in its workflow's open batch (`batch: {size, timeout, key}`):
the decision services/admission/batch.py applies with guarded writes.

A batch's run is queued from its first event, with its input `{"events": [E1]}` and its
start at the first event + `timeout`. Each later event, given the batch as last read
(its input, its count of events, its start):

- joins it, when the batch is queued, holds fewer than `size` events, its timeout has
  not passed, and its input with the event stays within `cap` bytes: its input becomes
  `{"events": [E1, ..., En, E]}`, and the event that makes it `size` fills it (`full`:
  it starts now);
- otherwise finds it closed, and begins a new batch (the old one starts when full, or
  at its timeout, whichever it met).

An event as a batch holds it: `{"id", "name", "key", "data", "received_at"}`, the event
as `on[].if` sees it, in arrival order (the order their joins were written).

Pure: no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.engine.states import RunStatus
from orchestrator.strict_json import dumps

__all__ = ["Place", "batch_input", "member", "place"]

_FIELDS = ("id", "name", "key", "data", "received_at")


def member(event: Mapping[str, Any]) -> dict[str, Any]:
    """An event as its batch's input lists it."""
    return {k: event.get(k) for k in _FIELDS}


def batch_input(events: list[dict[str, Any]]) -> dict[str, Any]:
    """A batch's run's input."""
    return {"events": events}


@dataclass(frozen=True)
class Place:
    """`input`: the batch's input with the event (None: the batch is closed, begin a new
    one); `full`: this event fills it, so it starts now."""

    input: dict[str, Any] | None
    full: bool = False


CLOSED = Place(None)


def place(current: Any, status: RunStatus, count: int, admit_at: float | None, *,
          event: dict[str, Any], size: int, cap: int, now: float) -> Place:
    """Where `event` goes, given the open batch's run as read: its input, status, count
    of events and start time."""
    if status is not RunStatus.QUEUED or count >= size:
        return CLOSED
    if admit_at is None or admit_at <= now:
        return CLOSED  # its timeout passed: it starts with what it has
    events = current.get("events") if isinstance(current, Mapping) else None
    if not isinstance(events, list):
        return CLOSED  # not a batch's input (a run this key did not make)
    joined = batch_input([*events, event])
    if len(dumps(joined).encode()) > cap:
        return CLOSED  # its input would pass the cap: it starts at its timeout
    return Place(joined, full=count + 1 >= size)
