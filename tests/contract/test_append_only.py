"""Events are append-only in the database itself; the retention purge is the one way out."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from tests.contract import builders
from veritask.ledger import dialects, errors, retention, schema


def _two_runs_with_events(connection: Connection) -> tuple[str, str, str]:
    definition = builders.a_definition(connection)
    kept_run = builders.a_run(connection, definition, key="kept")
    purged_run = builders.a_run(connection, definition, key="purged")
    purged_instance = builders.an_instance(connection, purged_run, "extract")
    builders.an_event(connection, event_id="k1", run_id=kept_run)
    builders.an_event(connection, event_id="p1", run_id=purged_run)
    builders.an_event(connection, event_id="p2", run_id=purged_run, instance_id=purged_instance)
    connection.execute(
        schema.rejected_events.insert().values(
            event_id="p1",
            run_id=purged_run,
            observed_at=builders.T0,
            payload={"event_id": "p1"},
            reason="the same id with different content",
        )
    )
    return kept_run, purged_run, purged_instance


def _event_ids(engine: Engine) -> set[str]:
    with engine.connect() as connection:
        return set(connection.execute(sa.select(schema.events.c.event_id)).scalars())


@pytest.mark.parametrize("table", [schema.events, schema.rejected_events], ids=lambda t: t.name)
def test_update_is_refused(engine: Engine, table: sa.Table) -> None:
    with engine.begin() as connection:
        _two_runs_with_events(connection)

    with pytest.raises(errors.AppendOnlyViolation), engine.begin() as connection:
        connection.execute(table.update().values(reason="rewritten"))


@pytest.mark.parametrize("table", [schema.events, schema.rejected_events], ids=lambda t: t.name)
def test_delete_is_refused(engine: Engine, table: sa.Table) -> None:
    with engine.begin() as connection:
        _two_runs_with_events(connection)

    with pytest.raises(errors.AppendOnlyViolation) as refused, engine.begin() as connection:
        connection.execute(table.delete())

    assert not refused.value.retryable
    assert _event_ids(engine) == {"k1", "p1", "p2"}


def test_raw_sql_delete_is_refused_too(engine: Engine) -> None:
    with engine.begin() as connection:
        _two_runs_with_events(connection)

    with pytest.raises(errors.AppendOnlyViolation), engine.begin() as connection:
        connection.exec_driver_sql("DELETE FROM events WHERE event_id = 'k1'")


# SQLite has no TRUNCATE; its DELETE without WHERE is refused above.
@pytest.mark.parametrize(
    "database_kind", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
def test_truncate_is_refused_on_postgres(engine: Engine) -> None:
    with pytest.raises(errors.AppendOnlyViolation), engine.begin() as connection:
        connection.exec_driver_sql("TRUNCATE events")


def test_purge_deletes_only_the_given_subjects(engine: Engine) -> None:
    with engine.begin() as connection:
        _, purged_run, _ = _two_runs_with_events(connection)

    with engine.begin() as connection:
        result = retention.purge_events(connection, run_ids=[purged_run])

    assert result == retention.PurgeResult(events=2, rejected_events=1)
    assert _event_ids(engine) == {"k1"}


def test_purge_by_instance_and_age(engine: Engine) -> None:
    with engine.begin() as connection:
        _, purged_run, instance = _two_runs_with_events(connection)
        later = builders.T0 + timedelta(days=30)
        builders.an_event(
            connection, event_id="p3", run_id=purged_run, instance_id=instance, observed_at=later
        )

    with engine.begin() as connection:
        result = retention.purge_events(connection, instance_ids=[instance], observed_before=later)

    assert result.events == 1
    assert _event_ids(engine) == {"k1", "p1", "p3"}


def test_the_permit_ends_with_the_purge(engine: Engine) -> None:
    with engine.begin() as connection:
        _, purged_run, _ = _two_runs_with_events(connection)
        retention.purge_events(connection, run_ids=[purged_run])
        # Still inside the purge's transaction: deletes are refused again.
        with pytest.raises(errors.AppendOnlyViolation), connection.begin_nested():
            connection.execute(schema.events.delete())

    with pytest.raises(errors.AppendOnlyViolation), engine.begin() as connection:
        connection.execute(schema.events.delete())
    with engine.connect() as connection:
        permits = connection.execute(sa.select(sa.func.count()).select_from(schema.purge_permit))
        assert permits.scalar() == 0


def test_a_failed_purge_leaves_nothing_behind(engine: Engine) -> None:
    with engine.begin() as connection:
        _two_runs_with_events(connection)

    with (
        pytest.raises(RuntimeError),
        engine.begin() as connection,
        dialects.purge_permitted(
            connection, permit_table=schema.purge_permit, setting=schema.PURGE_SETTING
        ),
    ):
        raise RuntimeError("crash inside the purge")

    assert _event_ids(engine) == {"k1", "p1", "p2"}
    with pytest.raises(errors.AppendOnlyViolation), engine.begin() as connection:
        connection.execute(schema.events.delete())


def test_a_purge_needs_a_subject_and_a_transaction(engine: Engine) -> None:
    with engine.begin() as connection, pytest.raises(ValueError, match="at least one"):
        retention.purge_events(connection)
    with engine.connect() as connection:
        connection.rollback()
        with pytest.raises(errors.LedgerError, match="inside a transaction"):
            retention.purge_events(connection, run_ids=["r"])


def _rejected(connection: Connection, event_id: str, run_id: str | None, days: int) -> None:
    connection.execute(
        schema.rejected_events.insert().values(
            event_id=event_id,
            run_id=run_id,
            observed_at=builders.T0 + timedelta(days=days),
            payload={"event_id": event_id},
            reason="refused",
        )
    )


def test_retention_purges_old_orphaned_rejections_only(engine: Engine) -> None:
    with engine.begin() as connection:
        kept_run, _, _ = _two_runs_with_events(connection)
        _rejected(connection, "no-run-old", None, 0)
        _rejected(connection, "gone-run-old", "a-run-purged-long-ago", 0)
        _rejected(connection, "no-run-new", None, 60)
        _rejected(connection, "live-run-old", kept_run, 0)

    with engine.begin() as connection:
        deleted = retention.purge_orphaned_rejections(
            connection, observed_before=builders.T0 + timedelta(days=30)
        )

    assert deleted == 2
    with engine.connect() as connection:
        left = set(connection.execute(sa.select(schema.rejected_events.c.event_id)).scalars())
    assert left == {"p1", "no-run-new", "live-run-old"}
