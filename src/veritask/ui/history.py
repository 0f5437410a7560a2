"""An instance's history as the page shows it: recorded and refused events in one list, newest
or oldest first, with the heartbeats and progress reports between two other events folded into
one row that opens ("12 heartbeats, 3 progress reports from 10:00 to 10:05")."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from markupsafe import Markup, escape

from veritask.core.events import EventKind
from veritask.ledger.vocabulary import EventOutcome
from veritask.services import views
from veritask.ui import i18n, rendering

#: Routine news from a running attempt: folded when two or more come together.
FOLDED_KINDS: Final = frozenset({EventKind.HEARTBEAT.value, EventKind.PROGRESS.value})
ORDERS: Final = ("newest", "oldest")
OUTCOMES: Final = (*(outcome.value for outcome in EventOutcome), "rejected")


@dataclass(frozen=True)
class Row:
    """One row of the history: a recorded event, a refused one, or a fold of routine ones."""

    event: views.HistoryEvent | None = None
    rejected: views.RejectedEvent | None = None
    folded: tuple[views.HistoryEvent, ...] = ()
    summary: Markup | None = None

    @property
    def fold_id(self) -> str:
        """Stable while the fold grows (live updates keep it open): its oldest event's."""
        return f"fold-{min(event.position for event in self.folded)}"


def rows(
    listing: views.InstanceEvents,
    *,
    newest_first: bool,
    fold: bool,
    t: i18n.Translator,
    when: Callable[[datetime | None], Markup],
) -> list[Row]:
    """The events and the refused events merged by when the ledger saw them; with ``fold``,
    each run of two or more applied heartbeats and progress reports is one row."""
    merged: list[views.HistoryEvent | views.RejectedEvent] = sorted(
        [*listing.events, *listing.rejected],
        key=lambda event: event.observed_at,
        reverse=newest_first,
    )
    found: list[Row] = []
    routine: list[views.HistoryEvent] = []

    def close() -> None:
        if len(routine) > 1:
            found.append(Row(folded=tuple(routine), summary=summary(routine, t=t, when=when)))
        elif routine:
            found.append(Row(event=routine[0]))
        routine.clear()

    for event in merged:
        if isinstance(event, views.RejectedEvent):
            close()
            found.append(Row(rejected=event))
        elif fold and event.kind in FOLDED_KINDS and event.outcome == EventOutcome.APPLIED:
            routine.append(event)
        else:
            close()
            found.append(Row(event=event))
    close()
    return found


def summary(
    events: list[views.HistoryEvent],
    *,
    t: i18n.Translator,
    when: Callable[[datetime | None], Markup],
) -> Markup:
    """ "12 heartbeats, 3 progress reports from T1 to T2" (the times as the page shows them)."""
    heartbeats = sum(1 for event in events if event.kind == EventKind.HEARTBEAT.value)
    progress = len(events) - heartbeats
    parts = []
    if heartbeats == 1:
        parts.append(t("history.fold_heartbeat"))
    elif heartbeats:
        parts.append(t("history.fold_heartbeats", n=heartbeats))
    if progress == 1:
        parts.append(t("history.fold_progress_one"))
    elif progress:
        parts.append(t("history.fold_progress", n=progress))
    times = [event.event_time for event in events]
    return Markup(escape(t("history.folded"))).format(
        what=rendering.listed(t, parts), start=when(min(times)), end=when(max(times))
    )
