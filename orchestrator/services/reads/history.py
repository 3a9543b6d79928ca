"""A run's history as one list: its row's entries and its steps' rows' entries, merged.

Each entry's `at` is kept to the millisecond (adapters/store/codec.history_entry), so
entries written within one millisecond tie, and a tie is broken by what the entry is: a
run's queueing and start come before its steps' entries, its end after them (a sole
sink's worker finishes the run a millisecond or less after the sink's success). Each
row's own entries stay in the order they were written: a write that landed late (its
process stalled after reading the clock) carries an earlier time than the entry before
it, and must not be shown before it."""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from typing import Any

from orchestrator.engine.states import RunStatus

# Where an entry goes among those of its millisecond; an entry not named here is 5.
_RANK: dict[str, int] = {
    "run.queued": 0, "run.running": 0, "run.started": 1,
    "step.reused": 2, "step.ready": 2, "step.started": 3,
    **{f"run.{s.value}": 9 for s in RunStatus if s.terminal},
}


def _key(entry: Mapping[str, Any]) -> tuple[float, int]:
    return entry.get("at", 0.0), _RANK.get(entry.get("type", ""), 5)


def merged_history(run: Iterable[Mapping[str, Any]],
                   steps: Iterable[tuple[str, Iterable[Mapping[str, Any]]]]
                   ) -> list[dict[str, Any]]:
    """The run row's entries and each (step, its row's entries), oldest first; a step's
    entries carry its name as `step`."""
    rows = [[dict(e) for e in run]]
    rows += [[{**e, "step": step} for e in entries] for step, entries in steps]
    return list(heapq.merge(*rows, key=_key))
