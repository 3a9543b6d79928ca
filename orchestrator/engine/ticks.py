"""When a schedule fires: pure arithmetic on unix seconds, no clock and no I/O.

`next_tick(schedule, after)` is the first fire time strictly after `after`;
`ticks_between(schedule, start, end)` lists the fires in `(start, end]` (tests and the
`schedules list` preview); `describe(schedule)` is the one-line label the CLI prints.
Times in and out are unix seconds (float, UTC epoch); the caller owns the clock.

**every** ticks are aligned to the unix epoch: a schedule with `every: 3600` fires at
every multiple of 3600 seconds since 1970-01-01T00:00Z, so every scheduler process, and
the same process after a restart, computes the same ticks without sharing state. The
timezone plays no part.

**cron** expressions are evaluated by `cronsim` in the schedule's IANA timezone. We use
cronsim rather than writing our own matcher or taking croniter because it is small,
typed and actively kept, it is the evaluator behind healthchecks.io (so its edge cases
are exercised by many real crontabs), and it deliberately copies Debian cron on DST
changes. Debian's cron(8) rule is: "jobs that run at a particular time" (neither the
minute nor the hour field starts with `*`) are moved so that they run once a day through
a clock change; jobs with a wildcard minute or hour follow the clock as it is. What that
means here, checked against cronsim 2.8 in `tests/unit/test_ticks.py`:

- Autumn, a local hour happens twice. A fixed-time job whose time falls in the repeated
  hour fires once, at the *first* occurrence (summer time, `fold=0`): `30 2 * * *` in
  Europe/Berlin on 2026-10-25 fires at 02:30+02:00 (00:30Z) and not at 02:30+01:00
  (01:30Z); `30 1 * * *` in America/New_York on 2026-11-01 fires at 01:30-04:00 (05:30Z).
- Spring, a local hour is skipped. A fixed-time job whose local time does not exist that
  day still fires once, right after the jump, at the first valid local minute (as
  Debian/Vixie cron runs skipped jobs soon after the change): `30 2 * * *` in
  Europe/Berlin on 2026-03-29 fires at 03:00+02:00 (01:00Z); in America/New_York on
  2026-03-08 at 03:00-04:00 (07:00Z). Several skipped times of one schedule
  (`0,30 2 * * *`) collapse into that one fire.
- Wildcard jobs keep firing on real time. `0 * * * *` fires every real hour: 25 times
  on the autumn day (02:00 twice, an hour apart) and 23 times on the spring day (no
  02:00); `*/15 * * * *` fires 100 and 92 times. A wildcard-minute job inside one hour,
  such as `*/15 2 * * *`, therefore runs in both copies of the repeated hour and not at
  all on the spring day, as in Debian cron.
- Six-field expressions (with seconds) are not Debian cron, and cronsim evaluates them
  on real time with no DST adjustment.

cronsim iterates from the start second exclusive, but in the autumn case it can answer a
time *before* the start: from 02:15+01:00 (the second pass) it returns 02:30+02:00, the
first pass, which has already happened. `next_tick` skips any such answer, so the
contract is strictly after, and a job that fired in the first pass does not fire again.

**Missed fires.** The scheduler (elsewhere) follows this policy: after downtime a
schedule does not replay the ticks it missed; it fires the next tick that is due, as
long as it is no more than the grace window late, and otherwise resumes at the next
future tick.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import datetime
from zoneinfo import ZoneInfo

from cronsim import CronSim

from orchestrator.manifest.durations import format_duration
from orchestrator.manifest.models import Schedule

__all__ = ["describe", "next_tick", "ticks_between"]


def next_tick(schedule: Schedule, after: float) -> float:
    """The first time `schedule` fires strictly after `after` (unix seconds).

    `ValueError` if `after` is not finite or the cron expression has no fire time in the
    50 years cronsim searches."""
    for tick in _ticks(schedule, after):
        return tick
    raise ValueError(f"{describe(schedule)} never fires after {after!r}")


def ticks_between(schedule: Schedule, start: float, end: float, limit: int = 1000) -> list[float]:
    """The fire times in `(start, end]`, in order, at most `limit` of them."""
    if limit < 0:
        raise ValueError(f"limit must be zero or more, not {limit}")
    found: list[float] = []
    if limit == 0 or end <= start:
        return found
    for tick in _ticks(schedule, start):
        if tick > end:
            break
        found.append(tick)
        if len(found) == limit:
            break
    return found


def describe(schedule: Schedule) -> str:
    """`cron '30 2 * * *' in Europe/Berlin` or `every 1h`."""
    if schedule.every is not None:
        return f"every {format_duration(schedule.every)}"
    return f"cron {schedule.cron!r} in {schedule.timezone}"


def _ticks(schedule: Schedule, after: float) -> Iterator[float]:
    """Fire times strictly after `after`, strictly increasing, without end (for cron,
    until cronsim gives up)."""
    if not math.isfinite(after):
        raise ValueError(f"cannot compute ticks after {after!r}")
    if schedule.every is not None:
        return _every_ticks(schedule.every, after)
    if schedule.cron is not None:
        return _cron_ticks(schedule.cron, ZoneInfo(schedule.timezone), after)
    raise ValueError("schedule has neither cron nor every")


def _every_ticks(every: float, after: float) -> Iterator[float]:
    # The first k with k * every > after. Division and product round, so the estimate
    # can be one off either way for fractional intervals; settle it on the products
    # themselves, since those are the ticks we hand out.
    k = math.floor(after / every) + 1
    while k * every <= after:
        k += 1
    while (k - 1) * every > after:
        k -= 1
    while True:
        yield k * every
        k += 1


def _cron_ticks(expr: str, zone: ZoneInfo, after: float) -> Iterator[float]:
    # cron ticks fall on whole seconds. Starting from the whole second at or before
    # `after` avoids datetime's rounding to microseconds (x.9999999 would round up to
    # x+1 and skip a tick at x+1); cronsim drops sub-seconds and moves past its start.
    start = datetime.fromtimestamp(math.floor(after), zone)
    last = after
    for moment in CronSim(expr, start):
        # An aware datetime with fold set (zoneinfo), so timestamp() picks the right
        # pass through a repeated hour. Anything not past the last answer is cronsim's
        # first-pass answer from inside the second pass (see the module docstring).
        tick = moment.timestamp()
        if tick > last:
            yield tick
            last = tick
