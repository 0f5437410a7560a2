"""Runs against their own events: the run-level half of ``verify``.

A run's two states are snapshots like an instance's: every change is a run event
(``run_created`` and ``run_state_changed`` for the execution state, ``publication_changed``
for the publication state, each with the state it moved from and to), so the stored columns
must be where the latest event of each kind left them. Each event must also start where the
one before it ended: events cannot be deleted through Veritask, so a link that does not
join is an event removed (or written) behind its back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from veritask.core.states import InstanceState, PublicationState
from veritask.ledger import schema
from veritask.ledger.vocabulary import EventOutcome, SubjectType

#: Where a run's publication state starts (which one depends on its definition's publish
#: section, which no event records).
PUBLICATION_STARTS = frozenset({PublicationState.NOT_REQUIRED, PublicationState.PENDING})

_EXECUTION_KINDS = ("run_created", "run_state_changed")
_PUBLICATION_KIND = "publication_changed"

#: The publication state a run of (definition id, version) starts in, when the caller knows.
PublicationStart = Callable[[str, int], PublicationState | None]


class RunEvent(NamedTuple):
    """One run-level event, as the chain check reads it."""

    event_id: str
    kind: str
    from_state: str | None
    to_state: str | None
    reason: str | None


@dataclass(frozen=True)
class RunHistory:
    """A run's stored states and its run-level events in recorded order."""

    run_id: str
    definition_id: str
    definition_version: int
    version: int
    execution_state: str
    execution_reason: str | None
    publication_state: str
    publication_reason: str | None
    events: tuple[RunEvent, ...]


class Restored(NamedTuple):
    """A state and its reason as the run's events say."""

    state: str
    reason: str | None


@dataclass
class RunCheck:
    """What the events say a run's states are, and what did not hold."""

    run_id: str
    execution: Restored | None
    publication: Restored | None
    problems: list[str] = field(default_factory=list)
    """Stored states that differ from the events' (``--repair`` writes the events' back)."""
    broken_links: list[str] = field(default_factory=list)
    """Events that do not follow on from the one before (nothing rebuilds a lost event)."""

    def restoring(self, history: RunHistory) -> dict[str, object]:
        """The columns to write so that the stored states are the events' again."""
        values: dict[str, object] = {}
        if self.execution is not None and self.execution.state != history.execution_state:
            values.update(
                execution_state=self.execution.state, execution_reason=self.execution.reason
            )
        if self.publication is not None and self.publication.state != history.publication_state:
            values.update(
                publication_state=self.publication.state,
                publication_reason=self.publication.reason,
            )
        return values


def run_histories(connection: Connection) -> list[RunHistory]:
    """Every run with its run-level events (two queries, whatever the number of runs)."""
    r, e = schema.runs.c, schema.events.c
    events: dict[str, list[RunEvent]] = {}
    for row in connection.execute(
        sa.select(e.subject_id, e.event_id, e.kind, e.from_state, e.to_state, e.reason)
        .where(
            e.subject_type == SubjectType.RUN.value,
            e.outcome == EventOutcome.APPLIED.value,
            e.kind.in_([*_EXECUTION_KINDS, _PUBLICATION_KIND]),
        )
        .order_by(e.position)
    ):
        events.setdefault(row.subject_id, []).append(
            RunEvent(row.event_id, row.kind, row.from_state, row.to_state, row.reason)
        )
    rows = connection.execute(
        sa.select(
            r.id,
            r.definition_id,
            r.definition_version,
            r.version,
            r.execution_state,
            r.execution_reason,
            r.publication_state,
            r.publication_reason,
        ).order_by(r.created_at, r.id)
    )
    return [RunHistory(*row[:8], events=tuple(events.get(row.id, ()))) for row in rows]


def instance_states_of_runs(
    connection: Connection, *, run_id: str | None = None
) -> dict[str, list[tuple[str, int, InstanceState]]]:
    """For each run (or only ``run_id``), its instances' stored states as (task key, map
    index, state)."""
    t = schema.task_instances.c
    found: dict[str, list[tuple[str, int, InstanceState]]] = {}
    query = sa.select(t.run_id, t.task_key, t.map_index, t.state).order_by(
        t.run_id, t.task_key, t.map_index
    )
    if run_id is not None:
        query = query.where(t.run_id == run_id)
    for owner, task_key, map_index, state in connection.execute(query):
        found.setdefault(owner, []).append((task_key, map_index, InstanceState(state)))
    return found


def check_run(history: RunHistory, publication_start: PublicationState | None) -> RunCheck:
    """Follow the run's event chains; compare where they end with the stored states."""
    execution_events = [ev for ev in history.events if ev.kind in _EXECUTION_KINDS]
    publication_events = [ev for ev in history.events if ev.kind == _PUBLICATION_KIND]
    problems: list[str] = []
    broken: list[str] = []
    if not execution_events or execution_events[0].kind != "run_created":
        broken.append("its execution events do not start with run_created: an event is missing")
    execution = _follow(execution_events, "execution", start=None, problems=broken)
    if execution is not None and execution.state != history.execution_state:
        problems.append(
            f"execution_state is {history.execution_state}, its events say {execution.state}"
        )
    start = publication_start.value if publication_start is not None else None
    publication = _follow(publication_events, "publication", start=start, problems=broken)
    if publication is None:
        # No event moved it, and no one told us where this run's publication started.
        if history.publication_state not in PUBLICATION_STARTS:
            problems.append(
                f"publication_state is {history.publication_state}, but no event ever moved "
                f"it from where a run starts ({' or '.join(sorted(PUBLICATION_STARTS))})"
            )
    elif publication.state != history.publication_state:
        problems.append(
            f"publication_state is {history.publication_state}, its events say {publication.state}"
        )
    return RunCheck(history.run_id, execution, publication, problems, broken)


def _follow(
    events: Iterable[RunEvent], axis: str, *, start: str | None, problems: list[str]
) -> Restored | None:
    """Where a chain of events leaves the state; each link that does not join is a problem."""
    current = None if start is None else Restored(start, None)
    for event in events:
        if (
            event.kind != "run_created"
            and current is not None
            and event.from_state != current.state
        ):
            problems.append(
                f"{axis} event {event.event_id} ({event.kind}) moves it from "
                f"{event.from_state}, but the event before left it at {current.state}: "
                "an event is missing"
            )
        if event.to_state is not None:
            current = Restored(event.to_state, event.reason)
    return current


def restore_run_states(
    connection: Connection, run_id: str, *, version: int, values: dict[str, object]
) -> bool:
    """Write the states the run's events say, with compare-and-set; False if it moved since."""
    r = schema.runs.c
    result = connection.execute(
        schema.runs.update()
        .where(r.id == run_id, r.version == version)
        .values({**values, "version": r.version + 1})
    )
    return result.rowcount == 1
