"""What this process saw happen, counted in memory until its next heartbeat writes it to
the stack's counters (adapters/store/stack_counts.py, read by `GET /metrics`).

Many processes (and Lambda containers) do the work while one API process answers
`/metrics`, so the counts must be the whole stack's: each process adds its own to
shared items, once a beat (services/health/heartbeat.py), not once an event. A step
costs no request for its metrics; a process that dies loses at most the counts of its
last beat (a Lambda container reaped while frozen: those since its last beat).

- runs started: a run's row created (the store's `create_run*`), queued or running;
- runs finished, by status: a run's terminal write that landed (`finish_run`,
  `finish_queued`);
- step durations: a call step's attempt whose function answered (or timed out), from
  its start check to its recorded outcome (the worker), counted in the histogram's
  buckets `DURATION_BUCKETS` (each bucket holds the attempts up to its bound and above
  the previous one; the reader sums them up)."""

from __future__ import annotations

import bisect
import threading

__all__ = ["DURATION_BUCKETS", "Counts", "Tallies", "bucket_attr"]

# The upper bounds (seconds) of the step duration histogram's buckets; `+Inf` is last.
DURATION_BUCKETS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)

# A workflow's counts: attribute -> amount (`started`, `finished_<status>`,
# `duration_sum`, `duration_count`, `duration_le_<i>`: bucket i, `len(DURATION_BUCKETS)`
# for +Inf).
Counts = dict[str, float]


def bucket_attr(i: int) -> str:
    """The attribute counting the step durations of bucket `i` (not cumulative)."""
    return f"duration_le_{i}"


class Tallies:
    """Counts by workflow, added to by any thread, taken whole by the heartbeat."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, Counts] = {}

    def _add(self, workflow: str, **amounts: float) -> None:
        with self._lock:
            counts = self._counts.setdefault(workflow, {})
            for attr, amount in amounts.items():
                counts[attr] = counts.get(attr, 0) + amount

    def run_started(self, workflow: str) -> None:
        self._add(workflow, started=1)

    def run_finished(self, workflow: str, status: str) -> None:
        self._add(workflow, **{f"finished_{status}": 1})

    def step_took(self, workflow: str, seconds: float) -> None:
        i = bisect.bisect_left(DURATION_BUCKETS, seconds)
        self._add(workflow, duration_sum=max(0.0, seconds), duration_count=1,
                  **{bucket_attr(i): 1})

    def take(self) -> dict[str, Counts]:
        """Everything counted since the last take (and nothing left behind)."""
        with self._lock:
            taken, self._counts = self._counts, {}
        return {wf: dict(c) for wf, c in taken.items() if c}

    def give_back(self, taken: dict[str, Counts]) -> None:
        """Counts a write could not store, kept for the next take."""
        for workflow, counts in taken.items():
            self._add(workflow, **counts)
