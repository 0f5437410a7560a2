"""Definitions against their own events: the definition-level half of ``verify``.

A definition's stored columns are snapshots like a run's: every version is saved with a
``definition_applied`` event (its ``version``, and ``new_version`` true when the apply created
it), and every lifecycle step is a ``definition_<lifecycle>`` event with the state it moved from
and to. So the stored ``current_version`` must be the version the latest apply named, the
stored ``lifecycle`` where the last step left it (a definition starts ``active``), every stored
version must have the apply that created it, and each step must start where the one before
ended: events cannot be deleted through Veritask, so a link that does not join is an event
removed (or written) behind its back.

A definition without a current version was never applied here (a run's export replayed
carries its definition's row, not the definition's history): there is nothing to follow.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from veritask.core.jsontypes import JSONObject
from veritask.core.states import DefinitionLifecycle
from veritask.ledger import schema
from veritask.ledger.vocabulary import EventOutcome

_APPLIED = "definition_applied"
_LIFECYCLE_KINDS = frozenset(f"definition_{state.value}" for state in DefinitionLifecycle)
#: Where every definition's lifecycle starts (its first apply creates it active).
_START = DefinitionLifecycle.ACTIVE.value


class DefinitionEvent(NamedTuple):
    """One definition-level event, as the checks read it."""

    event_id: str
    kind: str
    from_state: str | None
    to_state: str | None
    evidence: JSONObject


@dataclass(frozen=True)
class DefinitionHistory:
    """A definition's stored columns, its stored versions and its own events in order."""

    definition_id: str
    name: str
    lifecycle: str
    current_version: int | None
    versions: tuple[int, ...]
    events: tuple[DefinitionEvent, ...]


@dataclass
class DefinitionCheck:
    """What the events say a definition's columns are, and what did not hold."""

    definition_id: str
    lifecycle: str
    current_version: int | None
    problems: list[str] = field(default_factory=list)
    """Stored columns that differ from the events' (``--repair`` writes the events' back)."""
    broken_links: list[str] = field(default_factory=list)
    """Events missing or not following on (nothing rebuilds a lost event)."""

    def restoring(self, history: DefinitionHistory) -> dict[str, object]:
        """The columns to write so that the stored ones are the events' again."""
        values: dict[str, object] = {}
        if self.lifecycle != history.lifecycle:
            values["lifecycle"] = self.lifecycle
        if self.current_version is not None and self.current_version != history.current_version:
            values["current_version"] = self.current_version
        return values


def definition_histories(connection: Connection) -> list[DefinitionHistory]:
    """Every definition with its versions and own events (three queries in all)."""
    d, v, e = schema.definitions.c, schema.definition_versions.c, schema.events.c
    events: dict[str, list[DefinitionEvent]] = {}
    for row in connection.execute(
        sa.select(e.subject_id, e.event_id, e.kind, e.from_state, e.to_state, e.evidence)
        .where(
            sa.text(schema.DEFINITION_EVENT_PREDICATE),
            e.outcome == EventOutcome.APPLIED.value,
        )
        .order_by(e.position)
    ):
        evidence = row.evidence if isinstance(row.evidence, dict) else {}
        events.setdefault(row.subject_id, []).append(
            DefinitionEvent(row.event_id, row.kind, row.from_state, row.to_state, evidence)
        )
    versions: dict[str, list[int]] = {}
    for definition_id, version in connection.execute(
        sa.select(v.definition_id, v.version).order_by(v.definition_id, v.version)
    ):
        versions.setdefault(definition_id, []).append(int(version))
    rows = connection.execute(
        sa.select(d.id, d.name, d.lifecycle, d.current_version).order_by(d.created_at, d.id)
    )
    return [
        DefinitionHistory(
            row.id,
            row.name,
            row.lifecycle,
            row.current_version,
            tuple(versions.get(row.id, ())),
            tuple(events.get(row.id, ())),
        )
        for row in rows
    ]


def check_definition(history: DefinitionHistory) -> DefinitionCheck | None:
    """Follow the definition's events; compare where they end with its stored columns
    (None when it was never applied here: nothing to follow)."""
    if history.current_version is None:
        return None
    broken: list[str] = []
    lifecycle = _START
    current: int | None = None
    created: set[int] = set()
    for event in history.events:
        if event.kind == _APPLIED:
            version = event.evidence.get("version")
            if not isinstance(version, int) or version not in history.versions:
                broken.append(
                    f"event {event.event_id} ({_APPLIED}) applies version {version}, "
                    "which is not stored"
                )
                continue
            current = version
            if event.evidence.get("new_version") is True:
                created.add(version)
        elif event.kind in _LIFECYCLE_KINDS and event.to_state is not None:
            if event.from_state != lifecycle:
                broken.append(
                    f"lifecycle event {event.event_id} ({event.kind}) moves it from "
                    f"{event.from_state}, but the event before left it at {lifecycle}: "
                    "an event is missing"
                )
            lifecycle = event.to_state
    broken.extend(
        f"version {version} has no {_APPLIED} event that created it: an event is missing"
        for version in history.versions
        if version not in created
    )
    problems = []
    if lifecycle != history.lifecycle:
        problems.append(f"lifecycle is {history.lifecycle}, its events say {lifecycle}")
    if current is not None and current != history.current_version:
        problems.append(f"current_version is {history.current_version}, its events say {current}")
    return DefinitionCheck(history.definition_id, lifecycle, current, problems, broken)


def restore_definition(
    connection: Connection,
    definition_id: str,
    *,
    expected: DefinitionHistory,
    values: dict[str, object],
) -> bool:
    """Write the columns the events say, only if the row is still as read; False if it moved."""
    d = schema.definitions.c
    result = connection.execute(
        schema.definitions.update()
        .where(
            d.id == definition_id,
            d.lifecycle == expected.lifecycle,
            d.current_version == expected.current_version,
        )
        .values(values)
    )
    return result.rowcount == 1
