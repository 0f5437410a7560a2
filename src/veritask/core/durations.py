"""Where an instance's time went, from transition times. Pure.

Every time here is an ``event_time`` (when it happened, by the actor's clock) carried by the
fold's attempt views, never a row's create or update time:

- dependency wait = the first attempt's SCHEDULED - the instance's CREATED;
- queue = RUNNING - QUEUED, per attempt;
- execution = end - RUNNING, per attempt;
- retry wait = the next attempt's SCHEDULED - the previous attempt's end;
- after a clear, dependency wait = the rerun's SCHEDULED - the clear: the cleared instance is
  decided again by its trigger rule. The time between the previous attempt's end and a clear
  made later is no phase (the instance had finished; nobody was waiting for it), never a
  retry wait.

An interval whose end has not happened yet is open (``end`` None): a timeline draws it up to
now, statistics leave it out.

The two ends of a phase are often stamped by different clocks (the platform's, a worker's on
another machine). A phase whose end is stamped before its start is never negative: it is
clamped to zero, and where the platform learned of its end after its start (the order of
``observed_at``) the stamps contradict what happened, so the phase carries the difference as
``clock_skew`` (:func:`with_clock_skew`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from datetime import datetime, timedelta
from enum import StrEnum

from veritask.core.events import EventKind, OpenReason
from veritask.core.facts import InstanceFacts, Mark
from veritask.core.fold import AttemptView, InstanceSnapshot


class Phase(StrEnum):
    """A phase of an instance's life, in the order they happen."""

    DEPENDENCY_WAIT = "dependency_wait"
    """From CREATED to the first attempt's SCHEDULED: upstream tasks, concurrency, time; after
    a clear, from the clear to the rerun's SCHEDULED (the time between the previous end and the
    clear is no phase)."""
    QUEUE = "queue"
    """From QUEUED (the engine acknowledged) to RUNNING (the worker started)."""
    EXECUTION = "execution"
    """From RUNNING to the attempt's end."""
    RETRY_WAIT = "retry_wait"
    """From an attempt's end to the next attempt's SCHEDULED, when the platform opened that
    attempt by itself (a retry, a resubmit); never a rerun after a clear."""


@dataclass(frozen=True)
class PhaseInterval:
    """One phase of one attempt (``attempt_no`` 1 for the dependency wait)."""

    phase: Phase
    attempt_no: int
    start: datetime
    end: datetime | None
    clock_skew: timedelta | None = None
    """How far the end's stamp was before the start's although the platform learned of the
    end after the start: the clocks that stamped them disagree (the end is then the start)."""

    @property
    def duration(self) -> timedelta | None:
        """None while the phase is still going on; never negative."""
        return None if self.end is None else max(self.end - self.start, timedelta())

    @property
    def clock_skew_seconds(self) -> float | None:
        return None if self.clock_skew is None else self.clock_skew.total_seconds()


def instance_phases(snapshot: InstanceSnapshot) -> list[PhaseInterval]:
    """The phases of an instance as its snapshot knows them.

    An instance decided without any attempt (skipped, upstream failed, cancelled or overridden
    while it waited) waited for its dependencies until that decision, not until now.
    """
    facts = snapshot.facts
    created_at = None if facts.created is None else facts.created.event_time
    cleared_at = {
        epoch: mark.event_time for epoch, mark in facts.decisions if mark.kind is EventKind.CLEARED
    }
    first = min((view.attempt_no for view in snapshot.attempts), default=None)
    settled_at = None
    if (first is None and snapshot.state.is_terminal) or first in cleared_at:
        # Decided before any attempt (and, for a rerun's first attempt, cleared later).
        decided = [mark.event_time for epoch, mark in facts.decisions if epoch == 0]
        settled_at = min(decided, default=None)
    return phase_intervals(
        created_at, snapshot.attempts, settled_at=settled_at, cleared_at=cleared_at
    )


def phase_intervals(
    created_at: datetime | None,
    attempts: Sequence[AttemptView],
    *,
    settled_at: datetime | None = None,
    cleared_at: Mapping[int, datetime] | None = None,
) -> list[PhaseInterval]:
    """The instance's phases, attempt by attempt, from its creation time and its attempts;
    ``settled_at`` ends the dependency wait of an instance decided without an attempt;
    ``cleared_at`` gives the time of each clear by the epoch it opened (a rerun's attempt
    opens under that number)."""
    clears = cleared_at or {}
    ordered = sorted(attempts, key=lambda view: view.attempt_no)
    found: list[PhaseInterval] = []
    if created_at is not None and ordered and ordered[0].attempt_no in clears:
        # Its first attempt is a rerun: decided without an attempt first, then cleared.
        if settled_at is not None:
            found.append(PhaseInterval(Phase.DEPENDENCY_WAIT, 1, created_at, settled_at))
    elif created_at is not None and ordered and ordered[0].scheduled_at is not None:
        found.append(
            PhaseInterval(
                Phase.DEPENDENCY_WAIT, ordered[0].attempt_no, created_at, ordered[0].scheduled_at
            )
        )
    elif created_at is not None and not ordered:
        found.append(PhaseInterval(Phase.DEPENDENCY_WAIT, 1, created_at, settled_at))
    previous: AttemptView | None = None
    for view in ordered:
        cleared = clears.get(view.attempt_no)
        if view.open_reason is OpenReason.RERUN or cleared is not None:
            # Decided again after a clear: it waited for its dependencies from the clear on.
            if cleared is not None and view.scheduled_at is not None:
                found.append(
                    PhaseInterval(
                        Phase.DEPENDENCY_WAIT, view.attempt_no, cleared, view.scheduled_at
                    )
                )
        elif previous is not None and previous.ended_at is not None and view.scheduled_at:
            found.append(
                PhaseInterval(
                    Phase.RETRY_WAIT, view.attempt_no, previous.ended_at, view.scheduled_at
                )
            )
        if view.queued_at is not None:
            queue_end = view.started_at
            if queue_end is None and view.ended_at is not None:
                queue_end = view.ended_at  # it ended without a start report: all of it queued
            found.append(PhaseInterval(Phase.QUEUE, view.attempt_no, view.queued_at, queue_end))
        if view.started_at is not None:
            found.append(
                PhaseInterval(Phase.EXECUTION, view.attempt_no, view.started_at, view.ended_at)
            )
        previous = view
    # A retry not opened yet is no phase: its retry_at is a plan, not a transition.
    return found


def totals(intervals: Iterable[PhaseInterval]) -> dict[Phase, timedelta]:
    """Time spent in each phase, over the closed intervals only."""
    found: dict[Phase, timedelta] = {}
    for interval in intervals:
        duration = interval.duration
        if duration is not None:
            found[interval.phase] = found.get(interval.phase, timedelta()) + duration
    return found


def percentile(values: Sequence[float], fraction: float) -> float:
    """The ``fraction`` (0..1) percentile by linear interpolation between closest ranks."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must be within 0..1, got {fraction}")
    ordered = sorted(values)
    position = (len(ordered) - 1) * fraction
    below, above = math.floor(position), math.ceil(position)
    if below == above:
        return ordered[below]
    return ordered[below] + (ordered[above] - ordered[below]) * (position - below)


def observed_phases(snapshot: InstanceSnapshot) -> list[PhaseInterval]:
    """:func:`instance_phases`, none negative, each with its clock skew."""
    return with_clock_skew(instance_phases(snapshot), snapshot.facts)


def with_clock_skew(
    intervals: Iterable[PhaseInterval], facts: InstanceFacts
) -> list[PhaseInterval]:
    """The intervals with every end stamped before its start moved to the start (zero long).

    When the platform observed the end after the start, the stamps contradict the order in
    which things happened: the difference is kept as ``clock_skew``. When it observed the end
    first as well, the two reports raced (a worker's start before the engine's acknowledgement
    was recorded): the phase was zero long, and no clock is blamed.
    """
    observed = _observed_at(facts)
    found: list[PhaseInterval] = []
    for interval in intervals:
        if interval.end is None or interval.end >= interval.start:
            found.append(interval)
            continue
        behind = interval.start - interval.end
        start_seen, end_seen = observed.get(interval.start), observed.get(interval.end)
        skewed = start_seen is not None and end_seen is not None and end_seen >= start_seen
        found.append(replace(interval, end=interval.start, clock_skew=behind if skewed else None))
    return found


def _observed_at(facts: InstanceFacts) -> dict[datetime, datetime]:
    """The earliest ``observed_at`` of the instance's recorded events, by their event time."""
    marks: list[Mark] = [facts.created] if facts.created is not None else []
    marks.extend(mark for _, mark in facts.decisions)
    for attempt in facts.attempts:
        for field in fields(attempt):
            value = getattr(attempt, field.name)
            if isinstance(value, Mark):
                marks.append(value)
        marks.extend(completion.mark for completion in attempt.completions)
    found: dict[datetime, datetime] = {}
    for mark in marks:
        if mark.observed_at is not None:
            known = found.get(mark.event_time)
            found[mark.event_time] = min(known or mark.observed_at, mark.observed_at)
    return found
