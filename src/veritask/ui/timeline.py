"""An instance's phases from its events' ``event_time`` — never a row's create/update time.

design.md 5.8: dependency wait = SCHEDULED − CREATED; queue time = RUNNING − QUEUED;
execution = end − RUNNING; retry wait = next SCHEDULED − previous end. The time between
opening an attempt (SCHEDULED) and the engine's acknowledgement (QUEUED) is shown as its own
phase, submission, so that no time is hidden in another one.

This module stands alone on purpose: the observability branch is writing
``services/durations.py`` (``run_timeline``) with the same rules, and at merge the Gantt chart
can read that instead of calling :func:`phases_by_instance`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Final

from veritask.core.states import InstanceState
from veritask.services import views

APPLIED: Final = "applied"
_RUNNING_KINDS = frozenset({"started", "heartbeat", "progress"})
_ENDS = frozenset({state.value for state in InstanceState if state.is_terminal} | {"UP_FOR_RETRY"})


class PhaseKind(StrEnum):
    """What an instance was doing during a phase."""

    DEPENDENCY_WAIT = "dependency_wait"
    """Created, waiting for upstream tasks, concurrency or time (CREATED → SCHEDULED)."""
    SUBMISSION = "submission"
    """Attempt opened, not yet acknowledged by the engine (SCHEDULED → QUEUED)."""
    QUEUE = "queue"
    """Acknowledged by the engine, not yet started (QUEUED → RUNNING)."""
    EXECUTION = "execution"
    """Running until the attempt ended (RUNNING → end)."""
    RETRY_WAIT = "retry_wait"
    """Between one attempt's end and the next one's opening."""


@dataclass(frozen=True)
class Phase:
    kind: PhaseKind
    attempt_no: int | None
    start: datetime
    end: datetime
    ongoing: bool
    """Not over yet: ``end`` is the time of the reading."""


@dataclass
class _Marks:
    opened: datetime | None = None
    queued: datetime | None = None
    running: datetime | None = None
    ended: datetime | None = None


def phases_by_instance(
    events: Iterable[views.HistoryEvent], now: datetime
) -> dict[str, tuple[Phase, ...]]:
    """Each instance's phases from the run's history (instances without events are absent)."""
    grouped: dict[str, list[views.HistoryEvent]] = defaultdict(list)
    for event in events:
        if event.instance_id is not None:
            grouped[event.instance_id].append(event)
    return {key: instance_phases(found, now) for key, found in grouped.items()}


def instance_phases(events: Iterable[views.HistoryEvent], now: datetime) -> tuple[Phase, ...]:
    """One instance's phases, in time order. Only applied events mark a transition: a stale
    or conflicting report is a fact about an attempt, not a change of the instance."""
    created: datetime | None = None
    finished: datetime | None = None
    attempts: dict[int, _Marks] = defaultdict(_Marks)
    for event in sorted(events, key=lambda e: (e.event_time, e.position)):
        if event.outcome != APPLIED:
            continue
        if event.kind == "instance_created":
            created = created or event.event_time
            continue
        number = event.attempt_no or 0
        if number < 1:
            if event.to_state in _ENDS and finished is None:
                finished = event.event_time  # skipped, upstream failed, overridden
            continue
        marks = attempts[number]
        if event.kind == "attempt_opened":
            marks.opened = marks.opened or event.event_time
        elif event.kind == "submit_acknowledged":
            marks.queued = marks.queued or event.event_time
        elif event.kind in _RUNNING_KINDS:
            marks.running = marks.running or event.event_time
        if event.to_state in _ENDS and marks.ended is None:
            marks.ended = event.event_time
    found: list[Phase] = []
    numbers = sorted(attempts)
    first_open = attempts[numbers[0]].opened if numbers else None
    if created is not None:
        until = first_open or finished
        found.append(_phase(PhaseKind.DEPENDENCY_WAIT, None, created, until, now))
    previous_end: datetime | None = None
    for number in numbers:
        marks = attempts[number]
        if previous_end is not None and marks.opened is not None:
            found.append(_phase(PhaseKind.RETRY_WAIT, number, previous_end, marks.opened, now))
        steps = [
            (PhaseKind.SUBMISSION, marks.opened),
            (PhaseKind.QUEUE, marks.queued),
            (PhaseKind.EXECUTION, marks.running),
        ]
        present = [(kind, start) for kind, start in steps if start is not None]
        for index, (kind, start) in enumerate(present):
            following = present[index + 1][1] if index + 1 < len(present) else marks.ended
            found.append(_phase(kind, number, start, following, now))
        previous_end = marks.ended
    return tuple(phase for phase in found if phase.end >= phase.start)


def _phase(
    kind: PhaseKind, attempt_no: int | None, start: datetime, end: datetime | None, now: datetime
) -> Phase:
    return Phase(kind, attempt_no, start, end or max(now, start), end is None)
