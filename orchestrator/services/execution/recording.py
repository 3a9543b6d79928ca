"""An attempt's outcome is recorded while its lease lasts, even when AWS throttles.

The record of an attempt (its success, its retry, its failure) is one conditional write,
guarded by the attempt and its lease. If it does not land, the attempt is run again once
the lease has ended: its function is called a second time. A throttled write (AWS refused
it for a partition's throughput, `Throttled`, once botocore's own few retries are spent:
a hot partition of a wide fan-out, tests/bench/aws_scale.py) had no effect, so it is sent
again, backing off, for as long as the lease leaves time: the outcome the worker holds is
not thrown away for a second of throttling. Past the lease (or `TRIES` sends) it gives up
as before, and the attempt's repair takes over."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

from orchestrator.errors import Throttled

__all__ = ["FIRST_WAIT", "MAX_WAIT", "SPARE", "TRIES", "recorded", "resends"]

log = logging.getLogger(__name__)

T = TypeVar("T")

FIRST_WAIT = 0.05  # seconds before the second send; doubled each time
MAX_WAIT = 2.0
SPARE = 1.0  # seconds of the lease left unused: a send must land before it ends
TRIES = 64  # the lease's end comes first, but for a lease of hours
# Without a lease (a write made for a row nobody holds), how long to keep trying.
NO_LEASE = 10.0


_sent_again = [0]  # a count (an int under the GIL: a lost increment is only a figure)


def resends() -> int:
    """How many records this process has sent again (for tests and figures)."""
    return _sent_again[0]


def recorded(write: Callable[[], T], *, lease_until: float | None, clock: Callable[[], float],
             sleep: Callable[[float], None] = time.sleep) -> T:
    """`write()`, sent again while it is throttled and the lease leaves time."""
    deadline = (clock() + NO_LEASE if lease_until is None else lease_until) - SPARE
    wait = FIRST_WAIT
    for tries in range(1, TRIES + 1):
        try:
            return write()
        except Throttled:
            pause = wait * random.uniform(0.5, 1.0)
            if tries == TRIES or clock() + pause >= deadline:
                raise
            _sent_again[0] += 1
            log.debug("a record was throttled; sent again in %.2f s (send %d)", pause, tries + 1)
            sleep(pause)
            wait = min(wait * 2, MAX_WAIT)
    raise AssertionError("unreachable")
