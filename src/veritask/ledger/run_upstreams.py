"""Publications that start runs (``trigger: {on_published: …}``): which definitions wait
for them, which publications no run answers yet, and which runs a run was started by.

A publication is answered when a run of the downstream definition names it in
``run_upstreams`` (``when: any``), or when the downstream has a run of kind ``published`` of
its logical time (``when: all``). Both are written in the transaction that creates the run,
so a scheduler that reads "unanswered" and loses the race to create it finds the run by its
idempotency key instead.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from veritask.core import states
from veritask.core.jsontypes import JSONValue
from veritask.ledger import schema

_d = schema.definitions.c
_v = schema.definition_versions.c
_r = schema.runs.c
_u = schema.run_upstreams.c

#: The most publications one pass reads for one downstream definition; the rest wait for the
#: next pass, oldest first.
BATCH = 100


@dataclass(frozen=True)
class TriggeredDefinition:
    """An active definition whose current version is started by publications."""

    id: str
    name: str
    current_version: int
    since: datetime
    """When it was last applied or enabled: older publications start none of its runs."""
    trigger: JSONValue


@dataclass(frozen=True)
class Publication:
    """A PUBLISHED run of an upstream definition."""

    run_id: str
    definition: str
    logical_time: datetime


def triggered_definitions(connection: Connection) -> list[TriggeredDefinition]:
    """Every active definition whose current version has a ``trigger``; only that part of
    the spec is read, every pass."""
    rows = connection.execute(
        sa.select(
            _d.id, _d.name, _d.current_version, _d.updated_at, _v.spec["trigger"].label("trigger")
        )
        .join(
            schema.definition_versions,
            sa.and_(_v.definition_id == _d.id, _v.version == _d.current_version),
        )
        .where(_d.lifecycle == states.DefinitionLifecycle.ACTIVE.value)
    )
    return [TriggeredDefinition(*row) for row in rows if row.trigger is not None]


def _published_by(upstreams: Collection[str]) -> list[sa.ColumnElement[bool]]:
    """The runs of the live upstreams that are PUBLISHED for a logical time."""
    return [
        _d.name.in_(list(upstreams)),
        _d.lifecycle.in_([lifecycle.value for lifecycle in schema.NAME_HOLDING_LIFECYCLES]),
        _r.publication_state == states.PublicationState.PUBLISHED.value,
        _r.logical_time.is_not(None),
    ]


def unanswered_publications(
    connection: Connection, *, downstream_id: str, upstreams: Collection[str], since: datetime
) -> list[Publication]:
    """The upstreams' runs PUBLISHED at or after ``since`` that no run of the downstream
    names yet (``when: any``), oldest publication first."""
    down = schema.runs.alias("down")
    answered = sa.exists().where(
        _u.upstream_run_id == _r.id,
        down.c.id == _u.run_id,
        down.c.definition_id == downstream_id,
    )
    rows = connection.execute(
        sa.select(_r.id, _d.name, _r.logical_time)
        .join(schema.definitions, _d.id == _r.definition_id)
        .where(*_published_by(upstreams), _r.updated_observed_at >= since, ~answered)
        .order_by(_r.updated_observed_at, _r.id)
        .limit(BATCH)
    )
    return [Publication(*row) for row in rows]


def completed_logical_times(
    connection: Connection, *, downstream_id: str, upstreams: Collection[str], since: datetime
) -> list[datetime]:
    """The logical times for which every upstream has a PUBLISHED run, one of them published
    at or after ``since``, and the downstream no ``published`` run yet (``when: all``),
    oldest completion first.

    Counted in one statement: a logical time that some upstream never publishes is not read
    again at every pass, and cannot hold back the complete ones behind it.
    """
    recent = (
        sa.select(_r.logical_time)
        .join(schema.definitions, _d.id == _r.definition_id)
        .where(*_published_by(upstreams), _r.updated_observed_at >= since)
    )
    down = schema.runs.alias("down")
    answered = sa.exists().where(
        down.c.definition_id == downstream_id,
        down.c.trigger_kind == states.TriggerKind.PUBLISHED.value,
        down.c.logical_time == _r.logical_time,
    )
    completed_at = sa.func.max(_r.updated_observed_at)
    rows = connection.execute(
        sa.select(_r.logical_time)
        .join(schema.definitions, _d.id == _r.definition_id)
        .where(*_published_by(upstreams), _r.logical_time.in_(recent), ~answered)
        .group_by(_r.logical_time)
        .having(sa.func.count(sa.distinct(_d.name)) == len(set(upstreams)))
        .order_by(completed_at, _r.logical_time)
        .limit(BATCH)
    )
    return [row.logical_time for row in rows]


def newest_publications(
    connection: Connection, *, upstreams: Collection[str], logical_time: datetime
) -> dict[str, str]:
    """Upstream name -> its newest run of ``logical_time`` that is PUBLISHED (those with one)."""
    rows = connection.execute(
        sa.select(_d.name, _r.id)
        .join(schema.definitions, _d.id == _r.definition_id)
        .where(
            _d.name.in_(list(upstreams)),
            _d.lifecycle.in_([lifecycle.value for lifecycle in schema.NAME_HOLDING_LIFECYCLES]),
            _r.publication_state == states.PublicationState.PUBLISHED.value,
            _r.logical_time == logical_time,
        )
        .order_by(_r.updated_observed_at, _r.id)
    )
    return {row.name: row.id for row in rows}  # the newest comes last, so it wins


@dataclass(frozen=True)
class UpstreamRun:
    """A run whose publication started another; its definition's name, if it still has a row."""

    run_id: str
    definition: str | None


def upstream_runs(connection: Connection, run_id: str) -> list[UpstreamRun]:
    """The runs whose publication started ``run_id``, by definition name then id."""
    rows = connection.execute(
        sa.select(_u.upstream_run_id, _d.name)
        .select_from(schema.run_upstreams)
        .outerjoin(schema.runs, _r.id == _u.upstream_run_id)
        .outerjoin(schema.definitions, _d.id == _r.definition_id)
        .where(_u.run_id == run_id)
    )
    found = [UpstreamRun(row.upstream_run_id, row.name) for row in rows]
    return sorted(found, key=lambda u: (u.definition or "", u.run_id))
