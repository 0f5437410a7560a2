"""The run page's time scrubber: the instant the page shows, the range it moves over (the
run's creation to now, or to its last event once it ended), the event instants to step to,
and the events that arrived late for that instant (docs/ui.md, "The time scrubber").

The states come from ``explain`` (services/explanations.py): the page as of T is its *known
then* column, the events the platform had recorded by T. Nothing here folds events.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final

from veritask.core import refusals
from veritask.core.explanation import Cause
from veritask.core.states import RunExecutionState
from veritask.services import errors, explanations, views
from veritask.services.explanations import ExplainedRun
from veritask.services.platform import Platform
from veritask.ui import context

#: The most event instants the range marks as ticks; a bigger run has the step buttons only.
MOST_TICKS: Final = 400
_ENDED = frozenset(
    {RunExecutionState.SUCCESS, RunExecutionState.FAILED, RunExecutionState.CANCELLED}
)


@dataclass(frozen=True)
class Late:
    """An event that happened by the instant but was recorded after it, and its instance."""

    instance_id: str
    label: str
    cause: Cause


@dataclass(frozen=True)
class Scrubber:
    """Where the run page stands in the run's life. ``as_of`` None: live (the present)."""

    start: datetime
    end: datetime
    as_of: datetime | None
    typed: str
    """What the form's field shows: the instant, or what was typed when it was refused."""
    error: str | None
    previous: datetime | None
    next: datetime | None
    ticks: tuple[datetime, ...]
    late: tuple[Late, ...]
    told: ExplainedRun | None

    @property
    def span(self) -> int:
        """The range's length in whole seconds (at least one)."""
        return max(1, math.ceil((self.end - self.start).total_seconds()))

    def offset(self, moment: datetime | None) -> int:
        """Where ``moment`` (None: the end) stands on the range, in seconds from its start."""
        at = self.end if moment is None else moment
        return min(self.span, max(0, math.floor((at - self.start).total_seconds())))

    @property
    def late_instances(self) -> frozenset[str]:
        return frozenset(late.instance_id for late in self.late)


def scrubber(found: context.Page, detail: views.RunDetail, asked: str | None) -> Scrubber:
    """The scrubber for ``asked`` (the ``as_of`` of the address; None or empty: live). A time
    that is not one leaves the page live with the problem named; a time outside the run's
    life is moved to its nearest end."""
    platform = found.platform
    run = detail.run
    # A large run's instants are many (several per instance): read them all only when they
    # are few enough to draw as ticks, else only the two around the instant shown.
    count, last = explanations.moment_bounds(platform, run.id)
    moments = explanations.moments(platform, run.id) if count <= MOST_TICKS else None
    start = run.created_at
    end = _end(platform, run, last)
    as_of: datetime | None = None
    error = None
    if asked is not None and asked.strip():
        try:
            as_of = min(end, max(start, parse(asked, found)))
        except errors.InvalidInput as exc:
            error = str(exc)
    told = None
    if as_of is not None:
        told = explanations.explain_run(platform, run.id, as_of=as_of)
    here = end if as_of is None else as_of
    if moments is None:
        previous, following = explanations.neighbour_moments(platform, run.id, here)
    else:
        before = bisect.bisect_left(moments, here)
        after = bisect.bisect_right(moments, here)
        previous = moments[before - 1] if before > 0 else None
        following = moments[after] if after < len(moments) else None
    return Scrubber(
        start=start,
        end=end,
        as_of=as_of,
        typed=(asked or "") if error else typed(here, found),
        error=error,
        previous=previous,
        next=following if as_of is not None else None,
        ticks=moments or (),
        late=_late(told),
        told=told,
    )


def parse(text: str, found: context.Page) -> datetime:
    """An ISO 8601 date and time; one without an offset is in the viewer's time zone, as
    every time typed into the UI's forms is."""
    try:
        parsed = datetime.fromisoformat(text.strip())
    except ValueError:
        parsed = None
    if parsed is not None and parsed.tzinfo is None:
        text = parsed.replace(tzinfo=found.zone).isoformat()
    moment = explanations.moment(text)
    if moment is None:  # never: the text is not None
        raise errors.InvalidInput.about("as_of", refusals.NOT_A_MOMENT.format(value=text))
    return moment


def _end(platform: Platform, run: views.Run, last: datetime | None) -> datetime:
    """Now, or once the run ended its last recorded event (late news included)."""
    if run.execution_state in _ENDED and last is not None:
        return max(last, run.created_at)
    return max(platform.now(), run.created_at + timedelta(seconds=1))


def typed(moment: datetime, found: context.Page) -> str:
    """``moment`` as a form's field shows it: in the viewer's zone, with its offset."""
    return moment.astimezone(found.zone).isoformat(timespec="milliseconds")


def _late(told: ExplainedRun | None) -> tuple[Late, ...]:
    if told is None:
        return ()
    found: list[Late] = []
    for instance in told.instances:
        label = (
            instance.task if instance.map_index < 0 else f"{instance.task}[{instance.map_index}]"
        )
        found.extend(Late(instance.id, label, cause) for cause in instance.late)
    found.sort(key=lambda late: (late.cause.observed_at, late.cause.event_id))
    return tuple(found)


def query(moment: datetime) -> str:
    """``moment`` as the address writes it (UTC, to the microsecond)."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")
