"""Nothing but the retention purge rewrites the log: not REPLACE, not a hand-made permit, not
a setting, not another program's connection (migration 0003)."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from tests.contract import builders
from veritask.ledger import dialects, errors, migrate, permits, retention, schema

sqlite_only = pytest.mark.parametrize("database_kind", ["sqlite"], indirect=True)
postgres_only = pytest.mark.parametrize(
    "database_kind", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)


def _a_run_with_events(connection: Connection) -> str:
    definition = builders.a_definition(connection)
    run = builders.a_run(connection, definition, key="sealed")
    builders.an_event(connection, event_id="e1", run_id=run)
    builders.an_event(connection, event_id="e2", run_id=run)
    connection.execute(
        schema.rejected_events.insert().values(
            event_id="e1", run_id=run, observed_at=builders.T0, payload={}, reason="original"
        )
    )
    return run


def _rows(engine: Engine, table: sa.Table) -> list[tuple[object, ...]]:
    with engine.connect() as connection:
        columns = [table.c.position, table.c.event_id, table.c.reason]
        return [tuple(row) for row in connection.execute(sa.select(*columns).order_by(columns[0]))]


@pytest.fixture
def sealed(engine: Engine) -> Engine:
    with engine.begin() as connection:
        _a_run_with_events(connection)
    return engine


def _delete_is_refused(engine: Engine, *setup: sa.Executable | str, table: str = "events") -> None:
    """Run ``setup`` and then a DELETE in one transaction; the DELETE must be refused."""
    with engine.connect() as connection:
        transaction = connection.begin()
        for statement in setup:
            if isinstance(statement, str):
                connection.exec_driver_sql(statement)
            else:
                connection.execute(statement)
        with pytest.raises(errors.AppendOnlyViolation):
            connection.exec_driver_sql(f"DELETE FROM {table}")
        transaction.rollback()


def _sqlite_path(engine: Engine) -> str:
    database = engine.url.database
    assert database is not None
    return database


# The same event id, new content: REPLACE would delete the first row and insert this one; the
# guard drops the new row instead (what the ledger's ON CONFLICT DO NOTHING does).
SAME_EVENT_ID = (
    "{verb} INTO events (event_id, subject_type, subject_id, kind, actor, event_time, "
    "observed_at, evidence, outcome, reason, fingerprint) SELECT event_id, subject_type, "
    "subject_id, kind, actor, event_time, observed_at, evidence, outcome, 'rewritten', "
    "fingerprint FROM events WHERE event_id = 'e1'"
)
# The same position under another id, or in rejected_events (whose only key is the position):
# refused.
SAME_POSITION = [
    "{verb} INTO events (position, event_id, subject_type, subject_id, kind, actor, "
    "event_time, observed_at, evidence, outcome, reason, fingerprint) SELECT position, 'forged', "
    "subject_type, subject_id, kind, actor, event_time, observed_at, evidence, outcome, "
    "'rewritten', fingerprint FROM events WHERE event_id = 'e2'",
    "{verb} INTO rejected_events (position, observed_at, payload, reason) "
    "SELECT position, observed_at, payload, 'rewritten' FROM rejected_events",
]
VERBS = ["REPLACE", "INSERT OR REPLACE"]


def _both_tables(engine: Engine) -> dict[str, list[tuple[object, ...]]]:
    return {table.name: _rows(engine, table) for table in (schema.events, schema.rejected_events)}


def _run_outside_the_ledger(engine: Engine, statement: str) -> None:
    plain = sqlite3.connect(_sqlite_path(engine), isolation_level=None)
    try:
        plain.execute(statement)
    finally:
        plain.close()


@sqlite_only
@pytest.mark.parametrize("verb", VERBS)
@pytest.mark.parametrize("template", SAME_POSITION, ids=["events", "rejected_events"])
@pytest.mark.parametrize("through", ["ledger", "another program"])
def test_replace_over_a_position_is_refused_on_sqlite(
    sealed: Engine, verb: str, template: str, through: str
) -> None:
    before = _both_tables(sealed)
    statement = template.format(verb=verb)

    if through == "ledger":
        with pytest.raises(errors.AppendOnlyViolation), sealed.begin() as connection:
            connection.exec_driver_sql(statement)
    else:
        with pytest.raises(sqlite3.IntegrityError, match="veritask append-only"):
            _run_outside_the_ledger(sealed, statement)

    assert _both_tables(sealed) == before


@sqlite_only
@pytest.mark.parametrize("verb", VERBS)
@pytest.mark.parametrize("through", ["ledger", "another program"])
def test_replace_over_an_event_id_keeps_the_first_row_on_sqlite(
    sealed: Engine, verb: str, through: str
) -> None:
    before = _both_tables(sealed)
    statement = SAME_EVENT_ID.format(verb=verb)

    if through == "ledger":
        with sealed.begin() as connection:
            connection.exec_driver_sql(statement)
    else:
        _run_outside_the_ledger(sealed, statement)

    assert _both_tables(sealed) == before


def test_a_hand_made_permit_row_unlocks_nothing(sealed: Engine, database_kind: str) -> None:
    hand_made = ["(id) VALUES (1)"]
    if database_kind == "sqlite":  # PostgreSQL gives purge_permit.id no default
        hand_made.append("DEFAULT VALUES")
    for permit in hand_made:
        _delete_is_refused(sealed, f"INSERT INTO purge_permit {permit}")

    assert [row[1] for row in _rows(sealed, schema.events)] == ["e1", "e2"]


@sqlite_only
def test_another_programs_connection_cannot_delete_on_sqlite(sealed: Engine) -> None:
    plain = sqlite3.connect(_sqlite_path(sealed), isolation_level=None)
    try:
        plain.execute("BEGIN")
        plain.execute("INSERT INTO purge_permit DEFAULT VALUES")
        for table in ("events", "rejected_events"):
            with pytest.raises(sqlite3.OperationalError, match="veritask_purge_permitted"):
                plain.execute(f"DELETE FROM {table}")
        plain.execute("ROLLBACK")
    finally:
        plain.close()

    assert len(_rows(sealed, schema.events)) == 2
    assert len(_rows(sealed, schema.rejected_events)) == 1


@postgres_only
@pytest.mark.parametrize(
    "setting", ["SET veritask.retention_purge = 'on'", "SET LOCAL veritask.retention_purge = 'on'"]
)
def test_the_setting_alone_unlocks_nothing_on_postgres(sealed: Engine, setting: str) -> None:
    with sealed.begin() as connection:  # a purge enrolls this host's permit
        retention.purge_events(connection, run_ids=["no-such-run"])

    for table in ("events", "rejected_events"):
        _delete_is_refused(sealed, setting, table=table)

    assert len(_rows(sealed, schema.events)) == 2


@postgres_only
def test_nothing_deletes_before_a_permit_is_enrolled(sealed: Engine) -> None:
    with sealed.connect() as connection:
        assert permits.enrolled_hash(connection) is None
    for offered in ("on", "", "anything"):
        offer = sa.select(sa.func.set_config(schema.PURGE_SETTING, offered, True))
        _delete_is_refused(sealed, offer)


@postgres_only
def test_on_conflict_do_update_is_refused_on_postgres(sealed: Engine) -> None:
    with pytest.raises(errors.AppendOnlyViolation), sealed.begin() as connection:
        connection.exec_driver_sql(
            "INSERT INTO events (event_id, subject_type, subject_id, kind, actor, event_time, "
            "observed_at, evidence, outcome, reason, fingerprint) SELECT event_id, subject_type, "
            "subject_id, kind, actor, event_time, observed_at, evidence, outcome, reason, "
            "fingerprint FROM events WHERE event_id = 'e1' "
            "ON CONFLICT (event_id) DO UPDATE SET reason = 'rewritten'"
        )


@postgres_only
def test_the_permit_is_enrolled_once_and_another_is_refused(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(permits.PERMIT_ENV, raising=False)
    first, second = tmp_path / "first", tmp_path / "second"
    migrate.upgrade(database_url, permit_home=first)
    engine = dialects.create_engine(database_url, home=second)
    try:
        with engine.connect() as connection:
            enrolled = permits.enrolled_hash(connection)
        assert enrolled == permits.permit_hash(permits.load_permit(first))
        assert stat.S_IMODE((first / permits.PERMIT_FILE).stat().st_mode) == 0o600

        with (
            pytest.raises(errors.LedgerError, match="another one"),
            engine.begin() as connection,
        ):
            retention.purge_events(connection, run_ids=["r"])
        with pytest.raises(errors.LedgerError, match="another one"):
            permits.enroll(engine, second)
    finally:
        engine.dispose()
    again = dialects.create_engine(database_url, home=first)
    try:
        with again.connect() as connection:
            assert permits.enrolled_hash(connection) == enrolled
    finally:
        again.dispose()


def test_the_database_and_its_wal_are_private(tmp_path: Path) -> None:
    path = tmp_path / "home" / "veritask.db"
    previous = os.umask(0o022)
    try:
        migrate.upgrade(f"sqlite:///{path}")
        engine = dialects.create_engine(f"sqlite:///{path}")
        try:
            with engine.begin() as connection:
                builders.a_definition(connection)
            with engine.connect() as connection:  # the WAL and SHM exist while connected
                connection.exec_driver_sql("SELECT 1 FROM events")
                modes = {
                    suffix: stat.S_IMODE(Path(f"{path}{suffix}").stat().st_mode)
                    for suffix in ("", "-wal", "-shm")
                }
        finally:
            engine.dispose()
    finally:
        os.umask(previous)

    assert modes == {"": 0o600, "-wal": 0o600, "-shm": 0o600}
