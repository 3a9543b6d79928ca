"""A wide join's count items (adapters/store/join_counts.py) stay under 1 KB, the most
a write unit covers, with the longest run id and step name the orchestrator allows, so a
count costs one unit per chunk however wide the join; and a count starts with the
chunks, and the head, its places complete."""

from __future__ import annotations

import pytest

from orchestrator.adapters.store.join_counts import CHUNK, COUNTS, count_items
from tests.bench.capacity import item_size

LONGEST_NAME = "s" * 128  # manifest NAME_PATTERN: 128 characters at most
LONGEST_RUN_ID = f"{LONGEST_NAME}-1767225600000-abcdef"  # RunService.new_run_id


def test_a_full_chunk_with_the_longest_names_is_under_one_kilobyte() -> None:
    items = count_items(LONGEST_RUN_ID, LONGEST_NAME, range(10 * CHUNK), 10 * CHUNK,
                        1767225600.5)
    assert len(items) == 11  # ten chunks, and the head naming them all complete
    assert max(item_size(i) for i in items) < 1024


def test_a_count_names_its_chunks_and_marks_the_complete_ones() -> None:
    ndeps = 2 * CHUNK + 3
    items = count_items("r", "join", [0, CHUNK + 1, *range(2 * CHUNK, ndeps)], ndeps, 9.0)
    keys = {i["step"]["S"]: i["satisfied"]["NS"] for i in items}
    assert keys == {f"{COUNTS}join#0": ["0"], f"{COUNTS}join#1": ["1"],
                    f"{COUNTS}join#2": ["0", "1", "2"], f"{COUNTS}join#": ["2"]}
    one_chunk = count_items("r", "join", range(12), 12, 9.0)
    assert [i["step"]["S"] for i in one_chunk] == [f"{COUNTS}join#0"]  # no head needed
    with pytest.raises(ValueError):
        count_items("r", "join", [12], 12, 9.0)
