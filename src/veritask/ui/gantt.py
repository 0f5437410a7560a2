"""The run's timeline as an SVG Gantt chart: one row per instance, one bar per phase.

Geometry only; the phases are ``services.durations.run_timeline``'s, the same intervals the
durations API returns (docs/state-machine.md, Durations). The scale is shared by all rows so
that bars compare; a phase still going on is drawn up to now; a phase too short to see still
gets one pixel.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from veritask.services.durations import PhaseInterval

LABEL_WIDTH: Final = 180
CHART_WIDTH: Final = 720
ROW_HEIGHT: Final = 18
AXIS_HEIGHT: Final = 22
TICKS: Final = 5


@dataclass(frozen=True)
class Row:
    """An instance to draw: its id, label, link and phases."""

    key: str
    label: str
    href: str
    state: str
    phases: tuple[PhaseInterval, ...]


@dataclass(frozen=True)
class Bar:
    phase: PhaseInterval
    x: float
    width: float
    end: datetime
    """The phase's end, or the time of the reading while it goes on."""

    @property
    def ongoing(self) -> bool:
        return self.phase.end is None


@dataclass(frozen=True)
class PlacedRow:
    row: Row
    y: int
    bars: tuple[Bar, ...]


@dataclass(frozen=True)
class Tick:
    x: float
    at: datetime
    offset: timedelta


@dataclass(frozen=True)
class Chart:
    rows: tuple[PlacedRow, ...]
    ticks: tuple[Tick, ...]
    start: datetime | None
    span: timedelta
    width: int
    height: int


def chart(rows: Sequence[Row], now: datetime) -> Chart:
    """Lay the rows out on one time scale from the earliest start to the latest end."""
    starts = [phase.start for row in rows for phase in row.phases]
    ends = [end_of(phase, now) for row in rows for phase in row.phases]
    width = LABEL_WIDTH + CHART_WIDTH
    if not starts:
        return Chart((), (), None, timedelta(0), width, AXIS_HEIGHT)
    first, last = min(starts), max(ends)
    span = max(last - first, timedelta(seconds=1))
    scale = CHART_WIDTH / span.total_seconds()

    def x_of(moment: datetime) -> float:
        return LABEL_WIDTH + (moment - first).total_seconds() * scale

    placed = tuple(
        PlacedRow(
            row,
            AXIS_HEIGHT + index * ROW_HEIGHT,
            tuple(_bar(phase, now, x_of(phase.start), scale) for phase in row.phases),
        )
        for index, row in enumerate(rows)
    )
    ticks = tuple(
        Tick(
            round(LABEL_WIDTH + CHART_WIDTH * i / TICKS, 1),
            first + span * i / TICKS,
            span * i / TICKS,
        )
        for i in range(TICKS + 1)
    )
    return Chart(placed, ticks, first, span, width, AXIS_HEIGHT + len(rows) * ROW_HEIGHT + 4)


def end_of(phase: PhaseInterval, now: datetime) -> datetime:
    """Where a phase's bar ends: its end, or now while it goes on (never before its start)."""
    return phase.end if phase.end is not None else max(now, phase.start)


def _bar(phase: PhaseInterval, now: datetime, x: float, scale: float) -> Bar:
    end = end_of(phase, now)
    width = max(1.0, (end - phase.start).total_seconds() * scale)
    return Bar(phase, round(x, 1), round(width, 1), end)
