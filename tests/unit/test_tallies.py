"""A process's counts for /metrics (adapters/tallies.py): each step duration lands in the
bucket of the first bound at or above it, a take empties the tallies, and counts a write
could not store come back for the next take."""

from __future__ import annotations

import threading

from orchestrator.adapters.tallies import DURATION_BUCKETS, Tallies, bucket_attr


def test_durations_land_in_their_bucket_and_a_take_empties_the_tallies() -> None:
    t = Tallies()
    t.run_started("a")
    t.run_finished("a", "failed")
    t.step_took("a", 0.005)  # on a bound: that bucket (le="0.005")
    t.step_took("a", 0.0051)
    t.step_took("a", 1000.0)  # past the last bound: +Inf
    taken = t.take()
    assert taken == {"a": {
        "started": 1, "finished_failed": 1, "duration_count": 3,
        "duration_sum": 0.005 + 0.0051 + 1000.0,
        bucket_attr(0): 1, bucket_attr(1): 1, bucket_attr(len(DURATION_BUCKETS)): 1}}
    assert t.take() == {}


def test_counts_given_back_are_taken_again_with_the_new_ones() -> None:
    t = Tallies()
    t.run_started("a")
    t.give_back(t.take())
    t.run_started("a")
    t.run_started("b")
    assert t.take() == {"a": {"started": 2}, "b": {"started": 1}}


def test_threads_counting_at_once_lose_nothing() -> None:
    t = Tallies()

    def count() -> None:
        for _ in range(1000):
            t.step_took("a", 0.01)

    threads = [threading.Thread(target=count) for _ in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert t.take()["a"]["duration_count"] == 8000
