"""When a schedule fires: cron read in a time zone, daylight saving time, catch-up.

**Logical time and data interval.** A run's logical time is the moment its schedule fires
(UTC inside), and its data interval is ``[previous fire time, this fire time)``. A daily
``0 2 * * *`` run that fires on Tuesday at 02:00 has logical time Tuesday 02:00 and covers
Monday 02:00 to Tuesday 02:00. Airflow 2's default (cron data-interval timetable) names the
same run by the *start* of its interval (``logical_date`` = Monday 02:00) and runs it at the
end; Veritask names a run by when it fires, like Airflow's ``CronTriggerTimetable``, so the
logical time is never a moment in the past of the run's own trigger, and ``{{ logical_date }}``
is the day the run happens.

**Daylight saving time.** The cron fields are matched against the wall clock of the zone:

* a wall time that does not exist (the spring-forward gap) fires once, shifted forward by
  the gap: a daily 02:30 job in Europe/Berlin runs at 03:30 CEST on the last Sunday of March;
  an hourly job does not run twice, because the shifted 02:00 is the real 03:00;
* a wall time that happens twice (the fall-back hour) fires at its first occurrence only,
  unless the hour field matches every hour (``*``, ``*/1``, ``0-23``): then it fires in both
  passes, so an hourly job runs for each real hour of a 25-hour day.

Times passed in must be timezone-aware; times returned are aware and in UTC.
"""

from __future__ import annotations

import heapq
import zoneinfo
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from cronsim import CronSim

from veritask.definitions.cron import CronExpr, InvalidSchedule, load_zone, parse_cron
from veritask.definitions.model import Schedule

_ONE_SECOND = timedelta(seconds=1)
_DAYS = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")
_MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)


def fire_times(schedule: Schedule, *, after: datetime, until: datetime) -> list[datetime]:
    """Every fire time ``t`` with ``after < t <= until``, in order."""
    _aware(after, "after")
    _aware(until, "until")
    result = []
    for moment in _forward(schedule, after):
        if moment > until:
            break
        result.append(moment)
    return result


def next_fire_time(schedule: Schedule, after: datetime) -> datetime:
    """The first fire time strictly after ``after``."""
    _aware(after, "after")
    return next(_forward(schedule, after))


def previous_fire_time(schedule: Schedule, before: datetime) -> datetime:
    """The last fire time strictly before ``before``."""
    _aware(before, "before")
    latest = _latest(schedule, until=before - timedelta(microseconds=1), count=1, floor=None)
    if not latest:
        raise InvalidSchedule(f"{schedule.cron!r} never fired before {before.isoformat()}")
    return latest[0]


def data_interval(schedule: Schedule, logical_time: datetime) -> tuple[datetime, datetime]:
    """``[previous fire time, logical_time)``: the data a run at ``logical_time`` covers."""
    _aware(logical_time, "logical_time")
    return previous_fire_time(schedule, logical_time), logical_time.astimezone(UTC)


def due_logical_times(
    schedule: Schedule, *, last_logical_time: datetime | None, now: datetime
) -> list[datetime]:
    """The logical times of the runs to create now, oldest first.

    Fire times after ``last_logical_time`` (the newest run the definition already has) and up
    to ``now``. With catch-up off, only the latest of them; with catch-up on, all of them, or
    the most recent ``max_runs``. With no run yet (``last_logical_time`` None) only the latest
    fire time up to ``now`` is due: a new definition does not run its past. A scheduler that
    wants the runs missed since the definition was applied passes the apply time as
    ``last_logical_time``.
    """
    _aware(now, "now")
    if last_logical_time is not None:
        _aware(last_logical_time, "last_logical_time")
        if last_logical_time >= now:
            return []
    catchup = schedule.catchup
    if last_logical_time is not None and catchup.enabled and catchup.max_runs is None:
        return fire_times(schedule, after=last_logical_time, until=now)
    count = catchup.max_runs if last_logical_time is not None and catchup.enabled else 1
    return _latest(schedule, until=now, count=count or 1, floor=last_logical_time)


# -- iteration ---------------------------------------------------------------------------------


def _forward(schedule: Schedule, after: datetime) -> Iterator[datetime]:
    """Fire times strictly after ``after``, in order, without end.

    The cron expression is walked in wall-clock (naive local) time and each wall time becomes
    zero, one or two instants. Gap-shifted instants can come out of order, so they wait in a
    heap until no later wall time can produce an earlier instant (see :func:`_lower`).
    """
    expr = parse_cron(schedule.cron)
    zone = load_zone(schedule.timezone)
    after = after.astimezone(UTC)
    start = after.astimezone(zone).replace(tzinfo=None) - _lookback(zone, after) - _ONE_SECOND
    heap: list[datetime] = []
    last = after
    for wall in CronSim(expr.expression, start):
        for moment in _instants(expr, zone, wall):
            if moment > last:
                heapq.heappush(heap, moment)
        bound = _lower(zone, wall)
        while heap and heap[0] <= bound:
            moment = heapq.heappop(heap)
            if moment > last:
                last = moment
                yield moment


def _latest(
    schedule: Schedule, *, until: datetime, count: int, floor: datetime | None
) -> list[datetime]:
    """The most recent ``count`` fire times ``t`` with ``floor < t <= until``.

    Walks the cron expression backwards to find how far back ``count`` fire times reach, then
    lists that window forwards (exact); if gaps or repeated hours made the window short,
    looks further back.
    """
    expr = parse_cron(schedule.cron)
    zone = load_zone(schedule.timezone)
    until = until.astimezone(UTC)
    reach = count
    while True:
        back = CronSim(
            expr.expression, until.astimezone(zone).replace(tzinfo=None) + _ONE_SECOND, True
        )
        try:
            wall = next(back)
            for _ in range(reach - 1):
                wall = next(back)
            start = _lower(zone, wall) - _ONE_SECOND
        except (StopIteration, OverflowError, ValueError):
            start = datetime.min.replace(tzinfo=UTC) + timedelta(days=2)
        exhaustive = floor is not None and start <= floor
        if exhaustive and floor is not None:
            start = floor
        times = fire_times(schedule, after=start, until=until)
        if len(times) >= count or exhaustive or reach > 1 << 20:
            return times[-count:] if count else []
        reach *= 2


def _instants(expr: CronExpr, zone: zoneinfo.ZoneInfo, wall: datetime) -> list[datetime]:
    """The instants at which wall time ``wall`` fires (see the module docstring)."""
    first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    second = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    if first == second:
        return [first]
    if first.astimezone(zone).replace(tzinfo=None) != wall:
        # In the gap: fold=0 reads the wall time with the offset from before the jump, which
        # is the wall time shifted forward by the gap.
        return [first]
    return [first, second] if expr.every_hour else [first]


def _lower(zone: zoneinfo.ZoneInfo, wall: datetime) -> datetime:
    """A bound below every instant of every wall time at or after ``wall``.

    For an existing wall time its earlier instant; for a wall time in a gap its fold=1
    reading, which falls before the jump, and so before anything after it.
    """
    return min(
        wall.replace(tzinfo=zone, fold=0).astimezone(UTC),
        wall.replace(tzinfo=zone, fold=1).astimezone(UTC),
    )


def _lookback(zone: zoneinfo.ZoneInfo, moment: datetime) -> timedelta:
    """How far before ``moment``'s wall time a gap-shifted wall time can land after it.

    That is the size of a spring-forward jump in the day before ``moment``: the offset now
    minus the smallest offset of the last 25 hours (sampled hourly; no zone changes its offset
    twice within an hour).
    """
    now_offset = moment.astimezone(zone).utcoffset() or timedelta(0)
    earlier = [
        (moment - timedelta(hours=h)).astimezone(zone).utcoffset() or timedelta(0)
        for h in range(1, 26)
    ]
    return max(timedelta(0), now_offset - min(earlier))


def _aware(value: datetime, name: str) -> None:
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidSchedule(f"{name} must be timezone-aware, got {value.isoformat()}")


# -- words -------------------------------------------------------------------------------------


class SchedulePattern(StrEnum):
    """Which common pattern a schedule follows; :class:`ScheduleWords` holds its values."""

    EVERY_MINUTE = "every_minute"
    EVERY_N_MINUTES = "every_n_minutes"
    """``every``: the step in minutes."""
    EVERY_HOUR = "every_hour"
    EVERY_HOUR_AT_MINUTE = "every_hour_at_minute"
    """``minute``."""
    EVERY_N_HOURS_AT_MINUTE = "every_n_hours_at_minute"
    """``every``: the step in hours; ``minute``."""
    EVERY_DAY = "every_day"
    """``times``."""
    WEEKDAYS = "weekdays"
    """Monday to Friday at ``times``."""
    WEEKEND = "weekend"
    """Saturday and Sunday at ``times``."""
    ON_DAYS = "on_days"
    """The ``weekdays`` named (0 Sunday … 6 Saturday) at ``times``."""
    MONTHLY = "monthly"
    """On ``day`` of every month at ``times``."""
    YEARLY = "yearly"
    """On ``day`` of ``month`` (1-12) every year at ``times``."""
    CRON = "cron"
    """None of the above: the ``cron`` string itself."""


@dataclass(frozen=True)
class ScheduleWords:
    """A schedule in words as data: its pattern and values, for any language to phrase.

    :func:`describe_schedule` phrases it in English (what the API and the CLI print); the web
    UI phrases the same data in the viewer's language from its catalogs.
    """

    pattern: SchedulePattern
    timezone: str
    times: tuple[str, ...] = ()
    """Wall-clock times ``HH:MM`` in the schedule's zone, in order."""
    every: int | None = None
    minute: int | None = None
    weekdays: tuple[int, ...] = ()
    day: int | None = None
    month: int | None = None
    cron: str | None = None


def schedule_words(schedule: Schedule) -> ScheduleWords:
    """The schedule's pattern and values (the CRON pattern when no common one fits)."""
    expr = parse_cron(schedule.cron)
    found = _pattern(expr.fields)
    if found is None:
        return ScheduleWords(SchedulePattern.CRON, schedule.timezone, cron=schedule.cron.strip())
    return replace(found, timezone=schedule.timezone)


def describe_schedule(schedule: Schedule) -> str:
    """The schedule in words for the common patterns ("every day at 02:00 (Asia/Shanghai)");
    otherwise the cron string with its time zone."""
    return english(schedule_words(schedule))


def english(words: ScheduleWords) -> str:
    """:class:`ScheduleWords` as the English phrase, with the time zone in parentheses."""
    times = _and(list(words.times))
    phrases = {
        SchedulePattern.EVERY_MINUTE: "every minute",
        SchedulePattern.EVERY_N_MINUTES: f"every {words.every} minutes",
        SchedulePattern.EVERY_HOUR: "every hour",
        SchedulePattern.EVERY_HOUR_AT_MINUTE: f"every hour at minute {words.minute}",
        SchedulePattern.EVERY_N_HOURS_AT_MINUTE: (
            f"every {words.every} hours at minute {words.minute}"
        ),
        SchedulePattern.EVERY_DAY: f"every day at {times}",
        SchedulePattern.WEEKDAYS: f"every weekday (Monday to Friday) at {times}",
        SchedulePattern.WEEKEND: f"every Saturday and Sunday at {times}",
        SchedulePattern.ON_DAYS: f"every {_and([_DAYS[d] for d in words.weekdays])} at {times}",
        SchedulePattern.MONTHLY: f"every month on day {words.day} at {times}",
        SchedulePattern.YEARLY: (
            f"every year on {words.day} {_MONTHS[(words.month or 1) - 1]} at {times}"
        ),
        SchedulePattern.CRON: f"cron {words.cron}",
    }
    return f"{phrases[words.pattern]} ({words.timezone})"


def _and(items: list[str]) -> str:
    if not items:
        return ""  # the pattern has no such list: its phrase does not use it
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + f" and {items[-1]}"


def _pattern(fields: tuple[str, str, str, str, str]) -> ScheduleWords | None:
    """The common pattern of the cron fields, without a time zone yet; None if none fits."""
    minute, hour, dom, month, dow = fields
    if (dom, month, dow) == ("*", "*", "*"):
        if hour == "*" and minute == "*":
            return _words(SchedulePattern.EVERY_MINUTE)
        if hour == "*" and minute.startswith("*/") and minute[2:].isdigit():
            return _words(SchedulePattern.EVERY_N_MINUTES, every=int(minute[2:]))
        if hour == "*" and minute.isdigit():
            if minute == "0":
                return _words(SchedulePattern.EVERY_HOUR)
            return _words(SchedulePattern.EVERY_HOUR_AT_MINUTE, minute=int(minute))
        if hour.startswith("*/") and hour[2:].isdigit() and minute.isdigit():
            return _words(
                SchedulePattern.EVERY_N_HOURS_AT_MINUTE, every=int(hour[2:]), minute=int(minute)
            )
    times = _clock(minute, hour)
    if times is None:
        return None
    if (dom, month) == ("*", "*"):
        if dow == "*":
            return _words(SchedulePattern.EVERY_DAY, times=times)
        if dow == "1-5":
            return _words(SchedulePattern.WEEKDAYS, times=times)
        if dow in ("0,6", "6,0", "SAT,SUN", "SUN,SAT"):
            return _words(SchedulePattern.WEEKEND, times=times)
        days = _weekdays(dow)
        return None if days is None else _words(SchedulePattern.ON_DAYS, times=times, weekdays=days)
    if dow != "*" or not dom.isdigit() or not 1 <= int(dom) <= 31:
        return None
    if month == "*":
        return _words(SchedulePattern.MONTHLY, times=times, day=int(dom))
    if month.isdigit() and 1 <= int(month) <= 12:
        return _words(SchedulePattern.YEARLY, times=times, day=int(dom), month=int(month))
    return None


def _words(pattern: SchedulePattern, **values: Any) -> ScheduleWords:
    return ScheduleWords(pattern, "", **values)


def _clock(minute: str, hour: str) -> tuple[str, ...] | None:
    if not minute.isdigit() or int(minute) > 59:
        return None
    hours = hour.split(",")
    if not all(h.isdigit() and int(h) <= 23 for h in hours):
        return None
    return tuple(f"{int(h):02d}:{int(minute):02d}" for h in sorted(hours, key=int))


def _weekdays(dow: str) -> tuple[int, ...] | None:
    """The named days (0 Sunday … 6 Saturday) of a list such as ``1,3`` or ``MON,WED``."""
    names = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
    days = []
    for part in dow.split(","):
        if part.isdigit() and int(part) <= 7:
            days.append(int(part) % 7)
        elif part in names:
            days.append(names.index(part))
        else:
            return None
    return tuple(days)
