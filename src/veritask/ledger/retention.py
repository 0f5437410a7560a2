"""The retention purge: the one path that deletes events (docs/operations.md,
'A ledger that grows').

``events`` and ``rejected_events`` refuse UPDATE and DELETE in the database itself; this
module lifts that refusal for deletes only, inside the caller's transaction, and only for the
subjects it is given. It runs when a purge of a deleted definition's history was asked for,
after the retention period, and daily in the scheduler's housekeeping (``VERITASK_RETENTION``,
90 days by default), which purges the finished runs of live definitions too.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import islice
from typing import Final

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from veritask.core.states import DefinitionLifecycle
from veritask.ledger import dialects, schema, seals, vocabulary

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
    now: datetime | None = None,
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
        # What goes is sealed first, signed, in this transaction: the chains that remain verify
        # from its anchors, and a sealed head that is gone is accounted for (docs/integrity.md).
        seals.record_purge(
            connection,
            [
                condition
                if observed_before is None
                else sa.and_(condition, schema.events.c.observed_at < observed_before)
                for condition in _subject_conditions(
                    schema.events, definition_ids, run_ids, instance_ids
                )
            ],
            now=now or datetime.now(UTC),
        )
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
    with dialects.purge_permitted(
        connection, permit_table=schema.purge_permit, setting=schema.PURGE_SETTING
    ):
        deleted: int = connection.execute(
            schema.rejected_events.delete().where(*_orphaned(observed_before))
        ).rowcount
    return deleted


def count_orphaned_rejections(connection: Connection, *, observed_before: datetime) -> int:
    """How many rejected events :func:`purge_orphaned_rejections` would delete."""
    found: int = connection.execute(
        sa.select(sa.func.count()).where(*_orphaned(observed_before))
    ).scalar_one()
    return found


def _orphaned(observed_before: datetime) -> tuple[sa.ColumnElement[bool], ...]:
    x, r = schema.rejected_events.c, schema.runs.c
    existing_run = sa.select(r.id).where(r.id == x.run_id).exists()
    return (x.observed_at < observed_before, sa.or_(x.run_id.is_(None), ~existing_run))


def purgeable_runs(
    connection: Connection,
    *,
    cutoff: datetime,
    active_states: Collection[str],
    live_definitions: bool = False,
) -> list[str]:
    """The runs of deleted (purging, purged) definitions, in none of ``active_states``, whose newest
    event (if any) was recorded before ``cutoff``; a run that a kept rerun points at stays
    (``runs.rerun_of`` is a foreign key).

    ``live_definitions``: the runs of every other definition too, on the same terms, except
    each definition's newest run by creation and by logical time: a schedule's catch-up and
    a downstream's wait start from those.
    """
    d, r, e = schema.definitions.c, schema.runs.c, schema.events.c
    gone = [
        DefinitionLifecycle.DELETED.value,
        DefinitionLifecycle.PURGING.value,
        DefinitionLifecycle.PURGED.value,
    ]
    newest = sa.select(sa.func.max(e.observed_at)).where(e.run_id == r.id).scalar_subquery()
    whose: sa.ColumnElement[bool] = d.lifecycle.in_(gone)
    if live_definitions:
        later = schema.runs.alias("later")
        newer_created = (
            sa.select(later.c.id)
            .where(
                later.c.definition_id == r.definition_id,
                sa.tuple_(later.c.created_at, later.c.id) > sa.tuple_(r.created_at, r.id),
            )
            .exists()
        )
        newer_logical = (
            sa.select(later.c.id)
            .where(later.c.definition_id == r.definition_id, later.c.logical_time > r.logical_time)
            .exists()
        )
        not_newest = sa.and_(newer_created, sa.or_(r.logical_time.is_(None), newer_logical))
        whose = sa.or_(whose, not_newest)
    candidates = set(
        connection.execute(
            sa.select(r.id)
            .join(schema.definitions, d.id == r.definition_id)
            .where(
                # Implied by the next test (a run's first event is its creation), and
                # indexed: the daily purge reads the events of old runs only, not of all.
                r.created_at < cutoff,
                whose,
                r.execution_state.not_in(list(active_states)),
                sa.or_(newest.is_(None), newest < cutoff),
            )
        ).scalars()
    )
    kept_originals = set(
        connection.execute(
            sa.select(r.rerun_of).where(r.rerun_of.is_not(None), r.id.not_in(candidates))
        ).scalars()
    )
    return sorted(candidates - kept_originals)


def count_events_of_runs(connection: Connection, run_ids: Collection[str]) -> PurgeResult:
    """How many events and rejected events :func:`purge_events` would delete for these runs
    (a dry run)."""
    e, x = schema.events.c, schema.rejected_events.c
    events: int = connection.execute(
        sa.select(sa.func.count()).where(e.run_id.in_(run_ids))
    ).scalar_one()
    rejected: int = connection.execute(
        sa.select(sa.func.count()).where(x.run_id.in_(run_ids))
    ).scalar_one()
    return PurgeResult(events=events, rejected_events=rejected)


def delete_run_snapshots(connection: Connection, run_ids: Collection[str]) -> None:
    """Delete the runs' attempt, instance and run rows (their events go first: see
    :func:`purge_events`), in the caller's transaction."""
    t, a = schema.task_instances.c, schema.attempts.c
    instances = sa.select(t.id).where(t.run_id.in_(run_ids)).scalar_subquery()
    connection.execute(schema.attempts.delete().where(a.instance_id.in_(instances)))
    connection.execute(schema.task_instances.delete().where(t.run_id.in_(run_ids)))
    u = schema.run_upstreams.c
    connection.execute(schema.run_upstreams.delete().where(u.run_id.in_(run_ids)))
    connection.execute(
        schema.run_attestations.delete().where(schema.run_attestations.c.run_id.in_(run_ids))
    )
    connection.execute(schema.runs.delete().where(schema.runs.c.id.in_(run_ids)))


def logged_attempts_ended_before(connection: Connection, cutoff: datetime) -> list[tuple[str, int]]:
    """The (instance id, attempt number) of the attempts that ended before ``cutoff`` and have
    a log."""
    a = schema.attempts.c
    rows = connection.execute(
        sa.select(a.instance_id, a.attempt_no).where(
            a.ended_at < cutoff, a.log_location.is_not(None)
        )
    ).all()
    return [(row.instance_id, row.attempt_no) for row in rows]


def _subject_conditions(
    table: sa.Table,
    definition_ids: Collection[str],
    run_ids: Collection[str],
    instance_ids: Collection[str],
) -> Iterator[sa.ColumnElement[bool]]:
    columns = table.c
    subjects = vocabulary.SubjectType

    # A recorded run or instance event names its subject in run_id or instance_id too (0011
    # checked the old ones), and only a definition's events have an index by subject; a
    # rejected event may name nothing but its subject.
    recorded = table is schema.events

    def about(subject_type: vocabulary.SubjectType, ids: Sequence[str]) -> sa.ColumnElement[bool]:
        if subject_type is subjects.DEFINITION:
            return sa.and_(sa.text(schema.DEFINITION_EVENT_PREDICATE), columns.subject_id.in_(ids))
        return sa.and_(columns.subject_type == subject_type.value, columns.subject_id.in_(ids))

    for chunk in _chunks(definition_ids):
        yield about(subjects.DEFINITION, chunk)
    for chunk in _chunks(run_ids):
        if recorded:
            yield columns.run_id.in_(chunk)
        else:
            yield sa.or_(columns.run_id.in_(chunk), about(subjects.RUN, chunk))
    for chunk in _chunks(instance_ids):
        if recorded:
            yield columns.instance_id.in_(chunk)
        else:
            yield sa.or_(columns.instance_id.in_(chunk), about(subjects.INSTANCE, chunk))


def _chunks(ids: Collection[str]) -> Iterator[Sequence[str]]:
    iterator = iter(sorted(ids))
    while chunk := list(islice(iterator, _CHUNK)):
        yield chunk
