"""The runs list with its filters, and the one read behind a definition's grid.

``filtered_runs`` pages through runs newest first on ``(created_at, id)``, as
``queries.list_runs`` does, with every filter of ``GET /api/v2/runs`` added as a predicate: the
keyset walk stays on ``ix_runs_created_at_id`` (or ``ix_runs_definition_id_created_at_id`` with
a definition) and stops after one page of matches, so no filter makes the read sort.

The grid is two statements whatever the number of runs: the newest runs of a definition
(``newest_runs``, its ``(definition_id, created_at, id)`` index), then the instances of all of
them at once (``grid_cells``, the ``(run_id, task_key, map_index)`` unique index), without
their folds. ``instance_folds`` reads the folds of the instances whose reason the caller has
not folded yet at their current snapshot version.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from veritask.core import states
from veritask.core.jsontypes import JSONObject, JSONValue
from veritask.ledger import pagination, schema
from veritask.ledger.rows import DefinitionVersionRow, RunRow

_runs = schema.runs.c
_instances = schema.task_instances.c
_versions = schema.definition_versions.c

#: ``LIKE``'s escape character: a searched ``%`` or ``_`` is matched as itself.
_ESCAPE: Final = "\\"


@dataclass(frozen=True)
class RunFilter:
    """What a listing keeps; an empty collection or None means "any". Ranges are half-open."""

    definition_id: str | None = None
    execution_states: Collection[states.RunExecutionState] = ()
    publication_states: Collection[states.PublicationState] = ()
    trigger_kinds: Collection[states.TriggerKind] = ()
    logical_from: datetime | None = None
    logical_to: datetime | None = None
    created_from: datetime | None = None
    created_to: datetime | None = None
    text: str | None = None
    """A substring of the run's id, its idempotency key or its parameters' JSON, any case."""


@dataclass(frozen=True)
class RunListPage:
    """One page of runs in listing order, and whether there are more beyond either end."""

    items: list[RunRow]
    more_after: bool
    """Older runs match too (newest first: the next page)."""
    more_before: bool = field(default=False)
    """Newer runs match too (known only for a page read backwards)."""


def filtered_runs(
    connection: Connection,
    wanted: RunFilter,
    *,
    after: pagination.Cursor | None = None,
    before: pagination.Cursor | None = None,
    limit: int = 50,
) -> RunListPage:
    """Runs that match ``wanted``, newest first: those older than ``after``, or the page just
    newer than ``before`` (read oldest first, then turned around)."""
    backwards = before is not None and after is None
    statement = (
        sa.select(schema.runs)
        .where(*_predicates(wanted))
        .order_by(*pagination.order(_runs.created_at, _runs.id, newest_first=not backwards))
        .limit(limit + 1)
    )
    if after is not None:
        statement = statement.where(
            pagination.after(_runs.created_at, _runs.id, after, newest_first=True)
        )
    elif before is not None:
        statement = statement.where(
            pagination.after(_runs.created_at, _runs.id, before, newest_first=False)
        )
    rows = [RunRow.from_row(row) for row in connection.execute(statement)]
    more = len(rows) > limit
    rows = rows[:limit]
    if backwards:
        return RunListPage(items=rows[::-1], more_after=True, more_before=more)
    return RunListPage(items=rows, more_after=more, more_before=False)


def _predicates(wanted: RunFilter) -> list[sa.ColumnElement[bool]]:
    found: list[sa.ColumnElement[bool]] = []
    if wanted.definition_id is not None:
        found.append(_runs.definition_id == wanted.definition_id)
    for column, values in (
        (_runs.execution_state, wanted.execution_states),
        (_runs.publication_state, wanted.publication_states),
        (_runs.trigger_kind, wanted.trigger_kinds),
    ):
        if values:
            found.append(column.in_(sorted(str(value) for value in values)))
    if wanted.logical_from is not None:
        found.append(_runs.logical_time >= wanted.logical_from)
    if wanted.logical_to is not None:
        found.append(_runs.logical_time < wanted.logical_to)
    if wanted.created_from is not None:
        found.append(_runs.created_at >= wanted.created_from)
    if wanted.created_to is not None:
        found.append(_runs.created_at < wanted.created_to)
    if wanted.text:
        pattern = "%" + _escaped(wanted.text) + "%"
        found.append(
            sa.or_(
                _runs.id.ilike(pattern, escape=_ESCAPE),
                _runs.idempotency_key.ilike(pattern, escape=_ESCAPE),
                sa.cast(_runs.parameters, sa.Text).ilike(pattern, escape=_ESCAPE),
                *_parameter_equals(wanted.text),
            )
        )
    return found


def _parameter_equals(text: str) -> list[sa.ColumnElement[bool]]:
    """``name=value``: the run's parameter ``name`` is ``value`` (any case), as a person
    types it; the parameters' JSON never holds ``name=value`` for the substring to find."""
    name, equals, value = text.partition("=")
    name, value = name.strip(), value.strip()
    if not equals or not name:
        return []
    shown = sa.cast(_runs.parameters[name].as_string(), sa.Text)
    return [sa.func.lower(shown) == value.lower()]


def _escaped(text: str) -> str:
    for special in (_ESCAPE, "%", "_"):
        text = text.replace(special, _ESCAPE + special)
    return text


# -- the grid ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class GridCell:
    """What a grid cell needs of one instance: its state and its stored reason."""

    instance_id: str
    run_id: str
    task_key: str
    map_index: int
    state: str
    version: int
    #: The stored reason; None on rows written before it was stored (fold those).
    reason: str | None


@dataclass(frozen=True)
class InstanceFold:
    """An instance's folded facts and policy at one snapshot version."""

    instance_id: str
    version: int
    fold: JSONValue
    policy: JSONObject


#: Ids per statement when reading folds: well under every database's limit of parameters.
FOLD_CHUNK: Final = 2000


def newest_runs(connection: Connection, *, definition_id: str, count: int) -> list[RunRow]:
    """The definition's ``count`` newest runs, newest first."""
    statement = (
        sa.select(schema.runs)
        .where(_runs.definition_id == definition_id)
        .order_by(*pagination.order(_runs.created_at, _runs.id, newest_first=True))
        .limit(count)
    )
    return [RunRow.from_row(row) for row in connection.execute(statement)]


def grid_cells(connection: Connection, run_ids: Sequence[str]) -> list[GridCell]:
    """Every instance of the runs, in one statement, without their folds (JSON to decode)."""
    if not run_ids:
        return []
    statement = sa.select(
        _instances.id,
        _instances.run_id,
        _instances.task_key,
        _instances.map_index,
        _instances.state,
        _instances.version,
        _instances.reason,
    ).where(_instances.run_id.in_(list(run_ids)))
    return [
        GridCell(
            instance_id=str(row.id),
            run_id=str(row.run_id),
            task_key=str(row.task_key),
            map_index=int(row.map_index),
            state=str(row.state),
            version=int(row.version),
            reason=row.reason,
        )
        for row in connection.execute(statement)
    ]


def instance_folds(connection: Connection, instance_ids: Sequence[str]) -> list[InstanceFold]:
    """The folds and policies of these instances, ``FOLD_CHUNK`` ids per statement."""
    found: list[InstanceFold] = []
    for start in range(0, len(instance_ids), FOLD_CHUNK):
        chunk = list(instance_ids[start : start + FOLD_CHUNK])
        statement = sa.select(
            _instances.id, _instances.version, _instances.fold, _instances.policy
        ).where(_instances.id.in_(chunk))
        found += [
            InstanceFold(
                instance_id=str(row.id),
                version=int(row.version),
                fold=row.fold,
                policy=dict(row.policy) if isinstance(row.policy, dict) else {},
            )
            for row in connection.execute(statement)
        ]
    return found


def definition_versions(
    connection: Connection, *, definition_id: str, versions: Collection[int]
) -> list[DefinitionVersionRow]:
    """The stored versions of a definition among ``versions``, in one statement."""
    if not versions:
        return []
    statement = sa.select(schema.definition_versions).where(
        _versions.definition_id == definition_id, _versions.version.in_(sorted(versions))
    )
    return [DefinitionVersionRow.from_row(row) for row in connection.execute(statement)]
