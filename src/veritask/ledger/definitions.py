"""Definitions and their immutable versions (docs/definitions.md).

Applying a definition saves a version identified by its content hash: applying the same
content again returns the version that holds it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from veritask.core import states
from veritask.core.jsontypes import JSONObject, JSONValue
from veritask.ledger import dialects, errors, runs, schema
from veritask.ledger.rows import DefinitionVersionRow

#: Two applies of different content to one definition race for the next version number; the
#: loser re-reads and takes the one after. More rounds than this means something is wrong.
_VERSION_RACE_ROUNDS: Final = 8

_definitions = schema.definitions.c
_versions = schema.definition_versions.c


@dataclass(frozen=True)
class DefinitionHeading:
    """A definition's name, id, lifecycle and current version, without its spec."""

    id: str
    current_version: int
    lifecycle: str
    name: str


@dataclass(frozen=True)
class ActiveSchedule:
    """An active definition and its current version's schedule (None: it has none)."""

    id: str
    name: str
    created_at: datetime
    current_version: int
    schedule: JSONValue


def holder_first() -> tuple[sa.ColumnElement[int], sa.ColumnElement[datetime]]:
    """The order that makes a name's current definition come first: the one that holds the
    name (active, disabled, deleting), else the newest of the deleted ones."""
    d = _definitions
    holds = sa.case(
        (d.lifecycle.in_([s.value for s in schema.NAME_HOLDING_LIFECYCLES]), 0), else_=1
    )
    return holds, d.created_at.desc()


def definition_heading(connection: Connection, name: str) -> DefinitionHeading | None:
    """The definition called ``name`` (:func:`holder_first`), without its spec."""
    d = _definitions
    row = connection.execute(
        sa.select(d.id, d.current_version, d.lifecycle, d.name)
        .where(d.name == name)
        .order_by(*holder_first())
        .limit(1)
    ).first()
    if row is None:
        return None
    return DefinitionHeading(row.id, row.current_version, row.lifecycle, row.name)


def lifecycles_by_id(connection: Connection, definition_ids: Collection[str]) -> dict[str, str]:
    """The lifecycle of each of these definitions, by id."""
    if not definition_ids:
        return {}
    d = _definitions
    rows = connection.execute(
        sa.select(d.id, d.lifecycle).where(d.id.in_(sorted(set(definition_ids))))
    ).all()
    return {row.id: row.lifecycle for row in rows}


def version_spec(connection: Connection, definition_id: str, version: int) -> JSONObject:
    """The stored spec of one version of a definition (it must exist)."""
    spec: JSONObject = connection.execute(
        sa.select(_versions.spec).where(
            _versions.definition_id == definition_id, _versions.version == version
        )
    ).scalar_one()
    return spec


def active_schedules(connection: Connection) -> list[ActiveSchedule]:
    """Every active definition with its current version's schedule.

    Only the schedule is read, for every active definition every second: a whole spec
    (thousands of tasks) is read and parsed once per process, and only if it has one.
    """
    d, v = _definitions, _versions
    rows = connection.execute(
        sa.select(
            d.id, d.name, d.created_at, d.current_version, v.spec["schedule"].label("schedule")
        )
        .join(
            schema.definition_versions,
            sa.and_(v.definition_id == d.id, v.version == d.current_version),
        )
        .where(d.lifecycle == states.DefinitionLifecycle.ACTIVE.value)
    )
    return [ActiveSchedule(*row) for row in rows]


def save_definition_version(
    connection: Connection,
    *,
    name: str,
    spec: Mapping[str, JSONValue],
    source: str,
    content_hash: str,
    owner: str | None = None,
    now: datetime | None = None,
) -> tuple[str, int, bool]:
    """Save ``spec`` as a version of definition ``name`` and make it the current version.

    Returns ``(definition_id, version, created)``: the definition is created on its first
    apply, and a content hash that a version already holds returns that version with
    ``created=False`` (it still becomes current: applying old content reverts to it). The
    lifecycle is left alone; refusing applies to a deleted definition is the caller's rule.
    """
    now = now or datetime.now(UTC)
    definition_id = _ensure_definition(connection, name=name, owner=owner, now=now)
    versions = schema.definition_versions.c
    for _ in range(_VERSION_RACE_ROUNDS):
        existing = connection.execute(
            sa.select(versions.version).where(
                versions.definition_id == definition_id, versions.content_hash == content_hash
            )
        ).scalar_one_or_none()
        if existing is not None:
            version, created = int(existing), False
            break
        latest = connection.execute(
            sa.select(sa.func.max(versions.version)).where(versions.definition_id == definition_id)
        ).scalar_one_or_none()
        version = int(latest or 0) + 1
        # No conflict target: losing on (id, version) or on (id, content_hash) both mean
        # "someone else saved first" and the next round re-reads.
        created = dialects.insert_ignoring_conflict(
            connection,
            schema.definition_versions,
            {
                "definition_id": definition_id,
                "version": version,
                "content_hash": content_hash,
                "spec": dict(spec),
                "source": source,
                "created_at": now,
            },
            conflict_columns=[],
        )
        if created:
            break
    else:
        raise errors.LedgerBusy(f"could not save a version of {name!r}: too many racing applies")
    definition_values: dict[str, object] = {"current_version": version, "updated_at": now}
    if owner is not None:
        definition_values["owner"] = owner
    connection.execute(
        schema.definitions.update()
        .where(schema.definitions.c.id == definition_id)
        .values(definition_values)
    )
    return definition_id, version, created


def move_lifecycle(
    connection: Connection, definition_id: str, *, current: str, target: str, now: datetime
) -> bool:
    """Compare-and-set the definition's lifecycle from ``current`` to ``target``; False if it
    was not ``current`` (another writer moved it)."""
    d = schema.definitions.c
    moved = connection.execute(
        schema.definitions.update()
        .where(d.id == definition_id, d.lifecycle == current)
        .values(lifecycle=target, updated_at=now)
    ).rowcount
    return bool(moved == 1)


def versions_of(connection: Connection, definition_id: str) -> list[DefinitionVersionRow]:
    """Every version of the definition, the first first."""
    v = schema.definition_versions.c
    rows = connection.execute(
        sa.select(schema.definition_versions)
        .where(v.definition_id == definition_id)
        .order_by(v.version)
    )
    return [DefinitionVersionRow.from_row(row) for row in rows]


def current_specs(connection: Connection) -> dict[str, JSONValue]:
    """The spec of every definition's current version, by definition id."""
    d, v = schema.definitions.c, schema.definition_versions.c
    rows = connection.execute(
        sa.select(d.id, v.spec).join(
            schema.definition_versions,
            sa.and_(v.definition_id == d.id, v.version == d.current_version),
        )
    ).all()
    return {row.id: row.spec for row in rows}


def live_specs_by_name(connection: Connection) -> dict[str, JSONValue]:
    """The current spec of every definition not being deleted or gone, by name."""
    d, v = schema.definitions.c, schema.definition_versions.c
    rows = connection.execute(
        sa.select(d.name, v.spec)
        .join(
            schema.definition_versions,
            sa.and_(v.definition_id == d.id, v.version == d.current_version),
        )
        .where(d.lifecycle.not_in(("deleting", "deleted", "purging", "purged")))
    ).all()
    return {row.name: row.spec for row in rows}


def count_runs(connection: Connection, definition_id: str) -> int:
    """How many runs the definition has, whatever their state."""
    r = schema.runs.c
    found: int = connection.execute(
        sa.select(sa.func.count()).where(r.definition_id == definition_id)
    ).scalar_one()
    return found


def runs_in(
    connection: Connection, definition_id: str, execution_states: Collection[str]
) -> list[str]:
    """The ids of the definition's runs in one of ``execution_states``, oldest first."""
    r = schema.runs.c
    statement = (
        sa.select(r.id)
        .where(r.definition_id == definition_id, r.execution_state.in_(list(execution_states)))
        .order_by(r.created_at, r.id)
    )
    return list(connection.execute(statement).scalars())


def engine_resources(connection: Connection, definition_id: str) -> list[tuple[str | None, str]]:
    """(executor, external id) of every attempt of the definition's runs that an engine
    holds resources for."""
    a, t, r = schema.attempts.c, schema.task_instances.c, schema.runs.c
    rows = connection.execute(
        sa.select(a.executor, a.external_id)
        .join(schema.task_instances, t.id == a.instance_id)
        .join(schema.runs, r.id == t.run_id)
        .where(r.definition_id == definition_id, a.external_id.is_not(None))
    ).all()
    return [(row.executor, row.external_id) for row in rows]


def _ensure_definition(
    connection: Connection, *, name: str, owner: str | None, now: datetime
) -> str:
    """The id of the definition that holds ``name``; a new one when none does (the first
    apply, or the first after a delete: the deleted one keeps its own id and history)."""
    d = _definitions
    holder = sa.select(d.id).where(
        d.name == name, d.lifecycle.in_([s.value for s in schema.NAME_HOLDING_LIFECYCLES])
    )
    found = connection.execute(holder).scalar_one_or_none()
    if found is not None:
        return str(found)
    # No conflict target: a racing apply that inserted first wins the partial unique index.
    dialects.insert_ignoring_conflict(
        connection,
        schema.definitions,
        {
            "id": runs.new_id(),
            "name": name,
            "lifecycle": states.DefinitionLifecycle.ACTIVE.value,
            "owner": owner,
            "created_at": now,
            "updated_at": now,
        },
        conflict_columns=[],
    )
    return str(connection.execute(holder).scalar_one())
