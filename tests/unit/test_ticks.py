"""Schedule ticks: injected unix times, DST changes in Europe and America, no clock."""

from __future__ import annotations

import itertools
import math
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest

from orchestrator.engine.ticks import describe, next_tick, ticks_between
from orchestrator.manifest.models import Schedule

BERLIN = "Europe/Berlin"
NEW_YORK = "America/New_York"
# 2026 DST changes: Europe on the last Sundays of March and October at 01:00Z,
# the US on the second Sunday of March and the first Sunday of November at 02:00 local.
BERLIN_SPRING, BERLIN_AUTUMN = date(2026, 3, 29), date(2026, 10, 25)
NY_SPRING, NY_AUTUMN = date(2026, 3, 8), date(2026, 11, 1)


def cron(expr: str, tz: str = "UTC") -> Schedule:
    return Schedule(cron=expr, timezone=tz)


def every(seconds: float, tz: str = "UTC") -> Schedule:
    return Schedule(every=seconds, timezone=tz)


def utc(*parts: int) -> float:
    return datetime(*parts, tzinfo=UTC).timestamp()  # type: ignore[misc]


def midnight(day: date, tz: str) -> float:
    return datetime.combine(day, time(), tzinfo=ZoneInfo(tz)).timestamp()


def fires_on(schedule: Schedule, day: date) -> list[float]:
    """The fires whose local date is `day` (local midnight included)."""
    start = midnight(day, schedule.timezone) - 1
    end = midnight(day + timedelta(days=1), schedule.timezone) - 1
    return ticks_between(schedule, start, end)


def local(tick: float, tz: str) -> str:
    return datetime.fromtimestamp(tick, ZoneInfo(tz)).isoformat()


# --- cron across DST changes -------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "tz", "day", "expected"),
    [
        # Repeated hour: once, in the first (summer-time) pass.
        ("30 2 * * *", BERLIN, BERLIN_AUTUMN, "2026-10-25T02:30:00+02:00"),
        ("30 1 * * *", NEW_YORK, NY_AUTUMN, "2026-11-01T01:30:00-04:00"),
        # Skipped hour: once, right after the jump.
        ("30 2 * * *", BERLIN, BERLIN_SPRING, "2026-03-29T03:00:00+02:00"),
        ("30 2 * * *", NEW_YORK, NY_SPRING, "2026-03-08T03:00:00-04:00"),
    ],
    ids=["berlin-autumn", "new-york-autumn", "berlin-spring", "new-york-spring"],
)
def test_daily_job_fires_once_on_dst_change_day(
    expr: str, tz: str, day: date, expected: str
) -> None:
    fires = fires_on(cron(expr, tz), day)
    assert [local(t, tz) for t in fires] == [expected]


def test_daily_job_fire_times_in_utc() -> None:
    assert fires_on(cron("30 2 * * *", BERLIN), BERLIN_AUTUMN) == [utc(2026, 10, 25, 0, 30)]
    assert fires_on(cron("30 2 * * *", BERLIN), BERLIN_SPRING) == [utc(2026, 3, 29, 1, 0)]
    assert fires_on(cron("30 1 * * *", NEW_YORK), NY_AUTUMN) == [utc(2026, 11, 1, 5, 30)]
    assert fires_on(cron("30 2 * * *", NEW_YORK), NY_SPRING) == [utc(2026, 3, 8, 7, 0)]


def test_daily_job_days_around_dst_change_keep_local_time() -> None:
    schedule = cron("30 2 * * *", BERLIN)
    fires = ticks_between(schedule, utc(2026, 10, 23, 12), utc(2026, 10, 27, 12))
    assert [local(t, BERLIN) for t in fires] == [
        "2026-10-24T02:30:00+02:00",
        "2026-10-25T02:30:00+02:00",
        "2026-10-26T02:30:00+01:00",
        "2026-10-27T02:30:00+01:00",
    ]


def test_restart_inside_second_pass_of_repeated_hour_does_not_fire_again() -> None:
    # 01:15Z is 02:15+01:00, the second pass; cronsim alone answers 02:30+02:00 (00:30Z),
    # which is in the past and already fired.
    schedule = cron("30 2 * * *", BERLIN)
    for after in (utc(2026, 10, 25, 0, 30), utc(2026, 10, 25, 1, 15), utc(2026, 10, 25, 1, 30)):
        assert local(next_tick(schedule, after), BERLIN) == "2026-10-26T02:30:00+01:00"
    ny = cron("30 1 * * *", NEW_YORK)
    assert local(next_tick(ny, utc(2026, 11, 1, 6, 15)), NEW_YORK) == "2026-11-02T01:30:00-05:00"


def test_next_tick_just_before_the_repeated_hour_picks_first_pass() -> None:
    schedule = cron("30 2 * * *", BERLIN)
    assert next_tick(schedule, utc(2026, 10, 25, 0, 29, 59)) == utc(2026, 10, 25, 0, 30)


def test_several_skipped_times_collapse_into_one_fire() -> None:
    fires = fires_on(cron("0,30 2 * * *", BERLIN), BERLIN_SPRING)
    assert [local(t, BERLIN) for t in fires] == ["2026-03-29T03:00:00+02:00"]


@pytest.mark.parametrize(
    ("expr", "tz", "autumn", "spring", "autumn_count", "spring_count", "step"),
    [
        ("0 * * * *", BERLIN, BERLIN_AUTUMN, BERLIN_SPRING, 25, 23, 3600),
        ("0 * * * *", NEW_YORK, NY_AUTUMN, NY_SPRING, 25, 23, 3600),
        ("*/15 * * * *", BERLIN, BERLIN_AUTUMN, BERLIN_SPRING, 100, 92, 900),
        # A wildcard minute makes this a wildcard job: both passes, and none in spring.
        ("*/15 2 * * *", BERLIN, BERLIN_AUTUMN, BERLIN_SPRING, 8, 0, 900),
    ],
    ids=["hourly-berlin", "hourly-new-york", "quarterly-berlin", "wildcard-minute-in-2h"],
)
def test_wildcard_jobs_follow_real_time_through_dst(
    expr: str,
    tz: str,
    autumn: date,
    spring: date,
    autumn_count: int,
    spring_count: int,
    step: float,
) -> None:
    schedule = cron(expr, tz)
    for day, count in ((autumn, autumn_count), (spring, spring_count)):
        fires = fires_on(schedule, day)
        assert len(fires) == count
        # Evenly spaced in real time: no doubled or lost interval around the change.
        assert {b - a for a, b in itertools.pairwise(fires)} <= {step}


def test_hourly_fires_twice_at_local_two_in_autumn_and_skips_it_in_spring() -> None:
    schedule = cron("0 * * * *", BERLIN)
    autumn = [local(t, BERLIN) for t in fires_on(schedule, BERLIN_AUTUMN)]
    assert autumn[1:5] == [
        "2026-10-25T01:00:00+02:00",
        "2026-10-25T02:00:00+02:00",
        "2026-10-25T02:00:00+01:00",
        "2026-10-25T03:00:00+01:00",
    ]
    spring = [local(t, BERLIN) for t in fires_on(schedule, BERLIN_SPRING)]
    assert spring[1:3] == ["2026-03-29T01:00:00+01:00", "2026-03-29T03:00:00+02:00"]


def test_six_field_cron_gets_no_dst_adjustment() -> None:
    schedule = cron("0 30 2 * * *", BERLIN)
    assert fires_on(schedule, BERLIN_AUTUMN) == [utc(2026, 10, 25, 0, 30), utc(2026, 10, 25, 1, 30)]
    assert fires_on(schedule, BERLIN_SPRING) == []


# --- cron in UTC, day of week, strictly after -------------------------------------------


def test_utc_cron_is_strictly_after() -> None:
    schedule = cron("0 6 * * *")
    assert next_tick(schedule, utc(2026, 1, 1, 5, 59, 59)) == utc(2026, 1, 1, 6)
    assert next_tick(schedule, utc(2026, 1, 1, 6)) == utc(2026, 1, 2, 6)
    assert next_tick(schedule, utc(2026, 1, 1, 6) + 0.5) == utc(2026, 1, 2, 6)


def test_cron_after_a_hair_below_a_tick_returns_that_tick() -> None:
    # One float ulp below; datetime would round it up to the tick itself.
    tick = utc(2026, 1, 1, 6)
    assert next_tick(cron("0 6 * * *"), math.nextafter(tick, 0.0)) == tick
    assert next_tick(cron("0 6 * * *"), tick - 0.25) == tick


def test_day_of_week_cron_fires_on_mondays_only() -> None:
    schedule = cron("0 6 * * 1")
    # 2026-01-07 is a Wednesday.
    assert next_tick(schedule, utc(2026, 1, 7)) == utc(2026, 1, 12, 6)
    fires = ticks_between(schedule, utc(2026, 1, 1), utc(2026, 2, 1))
    assert [datetime.fromtimestamp(t, UTC).day for t in fires] == [5, 12, 19, 26]
    assert {datetime.fromtimestamp(t, UTC).weekday() for t in fires} == {0}


def test_day_of_week_cron_keeps_local_time_across_spring_change() -> None:
    schedule = cron("0 6 * * 1", BERLIN)
    fires = ticks_between(schedule, utc(2026, 3, 20), utc(2026, 4, 1))
    assert fires == [utc(2026, 3, 23, 5), utc(2026, 3, 30, 4)]


# --- every ---------------------------------------------------------------------------------


def test_every_hour_is_aligned_to_the_epoch_and_strictly_after() -> None:
    schedule = every(3600)
    assert next_tick(schedule, utc(2026, 5, 1, 10, 17, 3)) == utc(2026, 5, 1, 11)
    assert next_tick(schedule, utc(2026, 5, 1, 11)) == utc(2026, 5, 1, 12)
    assert next_tick(schedule, utc(2026, 5, 1, 11) - 0.001) == utc(2026, 5, 1, 11)


def test_every_ignores_timezone() -> None:
    after = utc(2026, 10, 25, 0, 59, 30)
    expected = ticks_between(every(3600), after, after + 6 * 3600)
    assert ticks_between(every(3600, BERLIN), after, after + 6 * 3600) == expected
    assert len(expected) == 6
    assert all(t % 3600 == 0 for t in expected)


def test_every_ninety_seconds() -> None:
    schedule = every(90)
    assert ticks_between(schedule, 0, 360) == [90, 180, 270, 360]
    # 2026-01-01T00:00Z is 1_767_225_600, a multiple of 90; so is +90.
    assert next_tick(schedule, utc(2026, 1, 1)) == utc(2026, 1, 1, 0, 1, 30)
    assert next_tick(schedule, utc(2026, 1, 1, 0, 1)) == utc(2026, 1, 1, 0, 1, 30)
    assert next_tick(schedule, utc(2026, 1, 1, 0, 1, 30)) == utc(2026, 1, 1, 0, 3)


@pytest.mark.parametrize("seconds", [0.1, 0.7, 1.5])
def test_fractional_every_is_the_first_multiple_strictly_after(seconds: float) -> None:
    schedule = every(seconds)
    for i in range(2000):
        for after in (i / 10, i * 0.1):
            tick = next_tick(schedule, after)
            k = round(tick / seconds)
            assert tick == k * seconds
            assert tick > after
            assert (k - 1) * seconds <= after


# --- ticks_between and describe ------------------------------------------------------------


def test_ticks_between_is_open_at_start_closed_at_end() -> None:
    schedule = every(60)
    assert ticks_between(schedule, 60, 180) == [120, 180]
    assert ticks_between(schedule, 60, 60) == []
    assert ticks_between(schedule, 180, 60) == []


def test_ticks_between_limit() -> None:
    minutely = cron("* * * * *")
    day = (utc(2026, 1, 1), utc(2026, 1, 2))
    assert ticks_between(minutely, *day, limit=3) == [
        utc(2026, 1, 1, 0, 1),
        utc(2026, 1, 1, 0, 2),
        utc(2026, 1, 1, 0, 3),
    ]
    default = ticks_between(minutely, *day)
    assert len(default) == 1000
    assert default[-1] == utc(2026, 1, 1) + 1000 * 60
    assert ticks_between(minutely, *day, limit=0) == []
    assert len(ticks_between(every(60), *day, limit=2000)) == 1440
    with pytest.raises(ValueError, match="limit"):
        ticks_between(minutely, *day, limit=-1)


def test_non_finite_after_is_refused() -> None:
    with pytest.raises(ValueError, match="nan"):
        next_tick(every(60), math.nan)
    with pytest.raises(ValueError, match="inf"):
        next_tick(cron("0 6 * * *"), math.inf)


def test_describe() -> None:
    assert describe(cron("30 2 * * *", BERLIN)) == "cron '30 2 * * *' in Europe/Berlin"
    assert describe(cron("0 6 * * 1")) == "cron '0 6 * * 1' in UTC"
    assert describe(every(3600)) == "every 1h"
    assert describe(every(90, BERLIN)) == "every 1m30s"
