"""The retention purge: the one path that deletes events (docs/operations.md,
'A ledger that grows').

``events`` and ``rejected_events`` refuse UPDATE and DELETE in the database itself; this
module lifts that refusal for deletes only, inside the caller's transaction, and only for the
subjects it is given. It runs when a purge of a deleted definition's history was asked for,
after the retention period.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import islice
from typing import Final

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from veritask.ledger import dialects, schema, vocabulary

#: Ids per DELETE: keeps each statement's parameter list well under SQLite's limit.
_CHUNK: Final = 500


@dataclass(frozen=True)
class PurgeResult:
    """How many rows the purge deleted from each append-only table."""

    events: int
    rejected_events: int


def purge_events(
    connection: Connection,
    *,
    definition_ids: Collection[str] = (),
    run_ids: Collection[str] = (),
    instance_ids: Collection[str] = (),
    observed_before: datetime | None = None,
) -> PurgeResult:
    """Delete the events (and rejected events) of these subjects, in the caller's transaction.

    An event goes if it is about one of the definitions, one of the runs (including the events
    of the run's instances, which carry ``run_id``) or one of the instances, and, when
    ``observed_before`` is given, was recorded before it. Giving no subject is refused: a purge
    never means "everything".
    """
    if not (definition_ids or run_ids or instance_ids):
        raise ValueError("purge_events needs at least one definition, run or instance id")
    events_deleted = rejected_deleted = 0
    with dialects.purge_permitted(
        connection, permit_table=schema.purge_permit, setting=schema.PURGE_SETTING
    ):
        for table in (schema.events, schema.rejected_events):
            deleted = 0
            for condition in _subject_conditions(table, definition_ids, run_ids, instance_ids):
                statement = table.delete().where(condition)
                if observed_before is not None:
                    statement = statement.where(table.c.observed_at < observed_before)
                deleted += connection.execute(statement).rowcount
            if table is schema.events:
                events_deleted = deleted
            else:
                rejected_deleted = deleted
    return PurgeResult(events=events_deleted, rejected_events=rejected_deleted)


def purge_orphaned_rejections(connection: Connection, *, observed_before: datetime) -> int:
    """Delete the rejected events recorded before ``observed_before`` that belong to no run
    that still exists (no run at all, or one purged since), in the caller's transaction.

    They would otherwise stay for ever: the history purge deletes by run, and refused reports
    about unknown instances (kept before reports were authenticated first) have none.
    """
    x, r = schema.rejected_events.c, schema.runs.c
    existing_run = sa.select(r.id).where(r.id == x.run_id).exists()
    with dialects.purge_permitted(
        connection, permit_table=schema.purge_permit, setting=schema.PURGE_SETTING
    ):
        deleted: int = connection.execute(
            schema.rejected_events.delete().where(
                x.observed_at < observed_before,
                sa.or_(x.run_id.is_(None), ~existing_run),
            )
        ).rowcount
    return deleted


def _subject_conditions(
    table: sa.Table,
    definition_ids: Collection[str],
    run_ids: Collection[str],
    instance_ids: Collection[str],
) -> Iterator[sa.ColumnElement[bool]]:
    columns = table.c
    subjects = vocabulary.SubjectType

    def about(subject_type: vocabulary.SubjectType, ids: Sequence[str]) -> sa.ColumnElement[bool]:
        return sa.and_(columns.subject_type == subject_type.value, columns.subject_id.in_(ids))

    for chunk in _chunks(definition_ids):
        yield about(subjects.DEFINITION, chunk)
    for chunk in _chunks(run_ids):
        yield sa.or_(columns.run_id.in_(chunk), about(subjects.RUN, chunk))
    for chunk in _chunks(instance_ids):
        yield sa.or_(columns.instance_id.in_(chunk), about(subjects.INSTANCE, chunk))


def _chunks(ids: Collection[str]) -> Iterator[Sequence[str]]:
    iterator = iter(sorted(ids))
    while chunk := list(islice(iterator, _CHUNK)):
        yield chunk
