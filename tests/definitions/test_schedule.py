"""Schedules: cron in a time zone, daylight saving time, catch-up, words."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from veritask.definitions.cron import InvalidSchedule
from veritask.definitions.model import Catchup, Schedule
from veritask.definitions.schedule import (
    data_interval,
    describe_schedule,
    due_logical_times,
    fire_times,
    next_fire_time,
    previous_fire_time,
)

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")
SHANGHAI = ZoneInfo("Asia/Shanghai")


def local(
    zone: tzinfo,
    year: int,
    month: int,
    day: int,
    hour: int = 0,
    minute: int = 0,
    second: int = 0,
    *,
    fold: int = 0,
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=zone, fold=fold)


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return local(UTC, year, month, day, hour, minute, second)


def on_day(schedule: Schedule, zone: ZoneInfo, year: int, month: int, day: int) -> list[str]:
    """The fire times of one local day, as local wall times with their UTC offset."""
    start = datetime(year, month, day, tzinfo=zone)
    end = start + timedelta(days=1)
    times = fire_times(schedule, after=start - timedelta(microseconds=1), until=end)
    return [t.astimezone(zone).strftime("%H:%M%z") for t in times if t < end]


# -- basics ------------------------------------------------------------------------------------


def test_a_daily_schedule_in_shanghai_fires_at_1800_utc_all_year() -> None:
    schedule = Schedule("0 2 * * *", "Asia/Shanghai")
    times = fire_times(schedule, after=utc(2024, 1, 1), until=utc(2025, 1, 1))
    assert len(times) == 366  # 2024 is a leap year; Shanghai has no DST
    assert {(t.hour, t.minute) for t in times} == {(18, 0)}
    assert all(t.tzinfo is UTC for t in times)


def test_fire_times_are_after_exclusive_and_until_inclusive() -> None:
    schedule = Schedule("0 * * * *")
    times = fire_times(schedule, after=utc(2024, 5, 1, 10), until=utc(2024, 5, 1, 12))
    assert times == [utc(2024, 5, 1, 11), utc(2024, 5, 1, 12)]


def test_next_fire_time_is_strictly_after() -> None:
    schedule = Schedule("0 2 * * *", "Asia/Shanghai")
    assert next_fire_time(schedule, utc(2024, 5, 1, 18)) == utc(2024, 5, 2, 18)
    assert next_fire_time(schedule, utc(2024, 5, 1, 17, 59)) == utc(2024, 5, 1, 18)
    assert next_fire_time(schedule, local(SHANGHAI, 2024, 5, 2, 1)) == utc(2024, 5, 1, 18)


def test_previous_fire_time_and_the_data_interval() -> None:
    schedule = Schedule("0 2 * * *", "Asia/Shanghai")
    logical = utc(2024, 5, 2, 18)
    assert previous_fire_time(schedule, logical) == utc(2024, 5, 1, 18)
    assert data_interval(schedule, logical) == (utc(2024, 5, 1, 18), logical)


def test_naive_times_are_refused() -> None:
    with pytest.raises(InvalidSchedule, match="after must be timezone-aware"):
        next_fire_time(Schedule("0 2 * * *"), datetime(2024, 1, 1))


# -- daylight saving time ----------------------------------------------------------------------


def test_a_daily_job_in_the_spring_gap_runs_once_shifted_by_the_gap_in_berlin() -> None:
    schedule = Schedule("30 2 * * *", "Europe/Berlin")
    assert on_day(schedule, BERLIN, 2024, 3, 30) == ["02:30+0100"]
    assert on_day(schedule, BERLIN, 2024, 3, 31) == ["03:30+0200"]
    assert on_day(schedule, BERLIN, 2024, 4, 1) == ["02:30+0200"]


def test_a_daily_job_in_the_repeated_hour_runs_once_at_the_first_occurrence_in_berlin() -> None:
    schedule = Schedule("30 2 * * *", "Europe/Berlin")
    assert on_day(schedule, BERLIN, 2024, 10, 27) == ["02:30+0200"]
    assert on_day(schedule, BERLIN, 2024, 10, 28) == ["02:30+0100"]


def test_daily_jobs_across_new_york_transitions() -> None:
    gap = Schedule("30 2 * * *", "America/New_York")
    assert on_day(gap, NEW_YORK, 2024, 3, 10) == ["03:30-0400"]
    repeated = Schedule("30 1 * * *", "America/New_York")
    assert on_day(repeated, NEW_YORK, 2024, 11, 3) == ["01:30-0400"]
    assert on_day(repeated, NEW_YORK, 2024, 11, 4) == ["01:30-0500"]


def test_an_hourly_job_runs_for_each_real_hour_on_the_fall_back_day() -> None:
    schedule = Schedule("0 * * * *", "Europe/Berlin")
    day = on_day(schedule, BERLIN, 2024, 10, 27)
    assert len(day) == 25
    assert day[:5] == ["00:00+0200", "01:00+0200", "02:00+0200", "02:00+0100", "03:00+0100"]
    gaps = fire_times(schedule, after=utc(2024, 10, 26, 21), until=utc(2024, 10, 27, 4))
    assert all(b - a == timedelta(hours=1) for a, b in itertools.pairwise(gaps))


def test_an_hourly_job_runs_for_each_real_hour_on_the_spring_forward_day() -> None:
    berlin = on_day(Schedule("0 * * * *", "Europe/Berlin"), BERLIN, 2024, 3, 31)
    assert len(berlin) == 23
    assert berlin[:3] == ["00:00+0100", "01:00+0100", "03:00+0200"]
    new_york = on_day(Schedule("30 * * * *", "America/New_York"), NEW_YORK, 2024, 3, 10)
    assert new_york[:3] == ["00:30-0500", "01:30-0500", "03:30-0400"]
    assert len(new_york) == 23


def test_a_job_every_half_hour_runs_in_both_passes_of_the_repeated_hour() -> None:
    day = on_day(Schedule("*/30 * * * *", "America/New_York"), NEW_YORK, 2024, 11, 3)
    assert day[2:6] == ["01:00-0400", "01:30-0400", "01:00-0500", "01:30-0500"]
    assert len(day) == 50


def test_a_job_in_some_hours_runs_once_in_the_repeated_hour() -> None:
    day = on_day(Schedule("0 1-3 * * *", "Europe/Berlin"), BERLIN, 2024, 10, 27)
    assert day == ["01:00+0200", "02:00+0200", "03:00+0100"]


def test_the_next_run_after_the_gap_is_the_shifted_one() -> None:
    schedule = Schedule("30 2 * * *", "Europe/Berlin")
    after = local(BERLIN, 2024, 3, 31, 3, 10)
    assert next_fire_time(schedule, after) == local(BERLIN, 2024, 3, 31, 3, 30)


def test_previous_fire_time_across_the_gap() -> None:
    schedule = Schedule("30 2 * * *", "Europe/Berlin")
    assert previous_fire_time(schedule, local(BERLIN, 2024, 4, 1, 2, 30)) == local(
        BERLIN, 2024, 3, 31, 3, 30
    )


# -- catch-up ----------------------------------------------------------------------------------

DAILY = "0 2 * * *"


def test_without_catch_up_only_the_latest_due_run_is_created() -> None:
    schedule = Schedule(DAILY, "UTC", Catchup(enabled=False))
    due = due_logical_times(
        schedule, last_logical_time=utc(2024, 1, 1, 2), now=utc(2024, 1, 10, 12)
    )
    assert due == [utc(2024, 1, 10, 2)]


def test_catch_up_creates_the_most_recent_max_runs() -> None:
    schedule = Schedule(DAILY, "UTC", Catchup(enabled=True, max_runs=3))
    due = due_logical_times(
        schedule, last_logical_time=utc(2024, 1, 1, 2), now=utc(2024, 1, 10, 12)
    )
    assert due == [utc(2024, 1, 8, 2), utc(2024, 1, 9, 2), utc(2024, 1, 10, 2)]


def test_catch_up_without_a_limit_creates_every_missed_run() -> None:
    schedule = Schedule(DAILY, "UTC", Catchup(enabled=True))
    due = due_logical_times(
        schedule, last_logical_time=utc(2024, 1, 1, 2), now=utc(2024, 1, 10, 12)
    )
    assert len(due) == 9
    assert due[0] == utc(2024, 1, 2, 2)


def test_catch_up_never_returns_a_run_that_exists() -> None:
    schedule = Schedule(DAILY, "UTC", Catchup(enabled=True, max_runs=10))
    last = utc(2024, 1, 9, 2)
    due = due_logical_times(schedule, last_logical_time=last, now=utc(2024, 1, 10, 12))
    assert due == [utc(2024, 1, 10, 2)]
    assert (
        due_logical_times(schedule, last_logical_time=utc(2024, 1, 10, 2), now=utc(2024, 1, 10, 12))
        == []
    )
    assert (
        due_logical_times(schedule, last_logical_time=utc(2024, 2, 1), now=utc(2024, 1, 10)) == []
    )


def test_a_new_definition_runs_only_its_latest_fire_time() -> None:
    schedule = Schedule(DAILY, "UTC", Catchup(enabled=True, max_runs=5))
    assert due_logical_times(schedule, last_logical_time=None, now=utc(2024, 1, 10, 12)) == [
        utc(2024, 1, 10, 2)
    ]


def test_catch_up_stays_bounded_for_a_frequent_schedule_far_behind() -> None:
    schedule = Schedule("* * * * *", "Europe/Berlin", Catchup(enabled=True, max_runs=4))
    now = utc(2024, 10, 27, 1, 2, 30)
    due = due_logical_times(schedule, last_logical_time=utc(2015, 1, 1), now=now)
    assert due == [
        utc(2024, 10, 27, 0, 59),
        utc(2024, 10, 27, 1),
        utc(2024, 10, 27, 1, 1),
        utc(2024, 10, 27, 1, 2),
    ]


def test_catch_up_across_the_fall_back_hour_counts_real_runs() -> None:
    schedule = Schedule("0 * * * *", "Europe/Berlin", Catchup(enabled=True, max_runs=3))
    now = local(BERLIN, 2024, 10, 27, 3, 30, fold=0)
    due = due_logical_times(schedule, last_logical_time=utc(2024, 10, 26), now=now)
    assert [t.astimezone(BERLIN).strftime("%H:%M%z") for t in due] == [
        "02:00+0200",
        "02:00+0100",
        "03:00+0100",
    ]


ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Asia/Shanghai", "Australia/Lord_Howe"]
CRONS = ["0 2 * * *", "30 2 * * *", "0 * * * *", "*/20 * * * *", "15 1-3 * * 0", "0 0 1 * *"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(CRONS),
    st.sampled_from(ZONES),
    st.datetimes(min_value=datetime(2023, 1, 1), max_value=datetime(2025, 12, 1)),
    st.integers(min_value=1, max_value=6),
    st.integers(min_value=1, max_value=400),
)
def test_property_catch_up_is_the_tail_of_the_fire_times(
    cron: str, zone: str, start: datetime, max_runs: int, hours: int
) -> None:
    schedule = Schedule(cron, zone, Catchup(enabled=True, max_runs=max_runs))
    last = start.replace(tzinfo=UTC)
    now = last + timedelta(hours=hours)
    every = fire_times(schedule, after=last, until=now)
    assert every == sorted(set(every))
    assert due_logical_times(schedule, last_logical_time=last, now=now) == every[-max_runs:]
    following = next_fire_time(schedule, last)
    assert following == (every[0] if every else following)
    assert previous_fire_time(schedule, following) <= last


# -- words -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cron", "words"),
    [
        ("0 2 * * *", "every day at 02:00"),
        ("@daily", "every day at 00:00"),
        ("0 2,14 * * *", "every day at 02:00 and 14:00"),
        ("* * * * *", "every minute"),
        ("*/15 * * * *", "every 15 minutes"),
        ("0 * * * *", "every hour"),
        ("@hourly", "every hour"),
        ("20 * * * *", "every hour at minute 20"),
        ("0 */6 * * *", "every 6 hours at minute 0"),
        ("30 8 * * 1-5", "every weekday (Monday to Friday) at 08:30"),
        ("0 9 * * 1", "every Monday at 09:00"),
        ("0 9 * * mon,wed,fri", "every Monday, Wednesday and Friday at 09:00"),
        ("0 3 1 * *", "every month on day 1 at 03:00"),
        ("0 0 25 12 *", "every year on 25 December at 00:00"),
        ("0 0 L * *", "cron 0 0 L * *"),
        ("5 4 1-7 * 1", "cron 5 4 1-7 * 1"),
    ],
)
def test_describe_schedule(cron: str, words: str) -> None:
    assert describe_schedule(Schedule(cron, "Asia/Shanghai")) == f"{words} (Asia/Shanghai)"
