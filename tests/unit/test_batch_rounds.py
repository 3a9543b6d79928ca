"""The pauses between the sendings of a batch request's unprocessed part
(adapters/store/tables.py): none before the first, then doubling up to the cap,
jittered, BATCH_TRIES sendings in all."""

from __future__ import annotations

from orchestrator.adapters.store.tables import (
    BATCH_PAUSE,
    BATCH_PAUSE_CAP,
    BATCH_TRIES,
    batch_rounds,
)


def test_a_batch_is_sent_again_after_a_growing_pause() -> None:
    pauses: list[float] = []
    rounds = batch_rounds(pauses.append, rand=lambda: 1.0)
    assert next(rounds) == 0 and pauses == []  # the first sending waits for nothing
    assert list(rounds) == list(range(1, BATCH_TRIES))
    assert pauses[:4] == [BATCH_PAUSE, 2 * BATCH_PAUSE, 4 * BATCH_PAUSE, 8 * BATCH_PAUSE]
    assert max(pauses) == BATCH_PAUSE_CAP and pauses == sorted(pauses)
    # Jitter: half of each pause is fixed, half random.
    low: list[float] = []
    list(batch_rounds(low.append, rand=lambda: 0.0))
    assert low == [p / 2 for p in pauses]


def test_a_batch_answered_whole_does_not_pause() -> None:
    pauses: list[float] = []
    for _ in batch_rounds(pauses.append):
        break
    assert pauses == []
