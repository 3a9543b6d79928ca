"""An attempt's record is sent again while AWS throttles it and its lease leaves time
(orchestrator/services/execution/recording.py): an injected clock and sleep."""

from __future__ import annotations

import pytest

from orchestrator.errors import StoreError, Throttled
from orchestrator.services.execution.recording import SPARE, TRIES, recorded


class Time:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def flaky(throttles: int, error: Exception | None = None) -> tuple[list[int], object]:
    sent: list[int] = []

    def write() -> str:
        sent.append(1)
        if len(sent) <= throttles:
            raise error or Throttled("put: ProvisionedThroughputExceededException")
        return "landed"

    return sent, write


def test_a_throttled_record_is_sent_again_backing_off_until_it_lands() -> None:
    t = Time()
    sent, write = flaky(5)
    assert recorded(write, lease_until=t.now + 60, clock=t.clock, sleep=t.sleep) == "landed"
    assert len(sent) == 6
    assert len(t.slept) == 5
    assert all(b > a * 0.9 for a, b in zip(t.slept, t.slept[1:], strict=False))


def test_it_gives_up_before_the_lease_ends() -> None:
    t = Time()
    sent, write = flaky(1000)
    with pytest.raises(Throttled):
        recorded(write, lease_until=t.now + 3.0, clock=t.clock, sleep=t.sleep)
    assert t.now < 100.0 + 3.0 - SPARE + 1e-9  # never sleeps past the lease's spare second
    assert 1 < len(sent) < TRIES


def test_it_gives_up_after_its_tries_and_never_retries_other_errors() -> None:
    t = Time()
    sent, write = flaky(1000)
    with pytest.raises(Throttled):
        recorded(write, lease_until=t.now + 10_000, clock=t.clock, sleep=t.sleep)
    assert len(sent) == TRIES
    other, write2 = flaky(1, StoreError("put: InternalServerError"))
    with pytest.raises(StoreError):
        recorded(write2, lease_until=t.now + 60, clock=t.clock, sleep=t.sleep)
    assert len(other) == 1
