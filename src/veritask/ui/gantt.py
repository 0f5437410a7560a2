"""The run's timeline as an SVG Gantt chart: one row per instance, one bar per phase.

Geometry only; the phases come from ``ui.timeline``. The scale is shared by all rows so that
bars compare; a phase too short to see still gets one pixel.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from veritask.ui.timeline import Phase

LABEL_WIDTH: Final = 180
CHART_WIDTH: Final = 720
ROW_HEIGHT: Final = 18
AXIS_HEIGHT: Final = 22
TICKS: Final = 5


@dataclass(frozen=True)
class Row:
    """An instance to draw: its label, link and phases."""

    label: str
    href: str
    state: str
    phases: tuple[Phase, ...]


@dataclass(frozen=True)
class Bar:
    phase: Phase
    x: float
    width: float


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


def chart(rows: Sequence[Row]) -> Chart:
    """Lay the rows out on one time scale from the earliest start to the latest end."""
    starts = [phase.start for row in rows for phase in row.phases]
    ends = [phase.end for row in rows for phase in row.phases]
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
            tuple(
                Bar(
                    phase,
                    round(x_of(phase.start), 1),
                    round(max(1.0, (phase.end - phase.start).total_seconds() * scale), 1),
                )
                for phase in row.phases
            ),
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
