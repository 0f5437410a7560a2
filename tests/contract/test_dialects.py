"""The engine: one URL picks the database; transactions are real; driver errors are ours."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.pool import ConnectionPoolEntry

from tests.conftest import PostgresServer
from tests.contract import builders
from veritask.ledger import dialects, errors, schema


def _run_count(connection: sa.Connection) -> int:
    return int(connection.execute(sa.select(sa.func.count()).select_from(schema.runs)).scalar_one())


def test_default_url_is_sqlite_in_veritask_home(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("VERITASK_DATABASE_URL", raising=False)
    monkeypatch.setenv("VERITASK_HOME", str(tmp_path / "home"))
    assert dialects.default_database_url() == f"sqlite:///{tmp_path / 'home' / 'veritask.db'}"

    monkeypatch.setenv("VERITASK_DATABASE_URL", "postgresql://u@h/db")
    assert dialects.default_database_url() == "postgresql://u@h/db"


def test_urls_pin_the_drivers_we_ship() -> None:
    assert dialects.normalize_url("postgresql://u@h/db").drivername == "postgresql+psycopg"
    assert dialects.normalize_url("sqlite:///x.db").drivername == "sqlite"
    with pytest.raises(ValueError, match="unsupported database"):
        dialects.create_engine("mysql://u@h/db")


def test_sqlite_is_configured_for_the_ledger(tmp_path: Path) -> None:
    engine = dialects.create_engine(f"sqlite:///{tmp_path / 'nested' / 'v.db'}")
    try:
        with engine.connect() as connection:
            pragmas = {
                name: connection.exec_driver_sql(f"PRAGMA {name}").scalar()
                for name in ("journal_mode", "foreign_keys", "synchronous", "busy_timeout")
            }
    finally:
        engine.dispose()
    assert pragmas == {
        "journal_mode": "wal",
        "foreign_keys": 1,
        "synchronous": 1,  # NORMAL
        "busy_timeout": dialects.SQLITE_BUSY_TIMEOUT_MS,
    }


# PostgreSQL's READ COMMITTED is meant to see rows committed meanwhile.
@pytest.mark.parametrize("database_kind", ["sqlite"], indirect=True)
def test_a_sqlite_read_transaction_keeps_its_snapshot(engine: Engine) -> None:
    # With the sqlite3 module's own (legacy) transactions a SELECT runs outside any
    # transaction and would see the concurrent insert.
    with engine.begin() as connection:
        definition = builders.a_definition(connection)

    with dialects.read_transaction(engine) as reader:
        before = _run_count(reader)
        with engine.begin() as writer:  # not blocked: a reader takes no write lock
            builders.a_run(writer, definition, key="during the read")
        assert _run_count(reader) == before

    with dialects.read_transaction(engine) as reader:
        assert _run_count(reader) == before + 1


def test_a_rolled_back_transaction_leaves_nothing(engine: Engine) -> None:
    with engine.begin() as connection:
        definition = builders.a_definition(connection)

    def create_then_fail() -> None:
        with engine.begin() as connection:
            builders.a_run(connection, definition, key="k")
            raise RuntimeError("rolled back")

    with pytest.raises(RuntimeError):
        create_then_fail()
    with engine.connect() as connection:
        assert _run_count(connection) == 0


@pytest.fixture
def impatient_engine(database_url: str) -> Iterator[Engine]:
    """An engine that gives up on a lock after a few milliseconds."""
    engine = dialects.create_engine(database_url)

    def impatient(dbapi_connection: DBAPIConnection, record: ConnectionPoolEntry) -> None:
        is_sqlite = isinstance(dbapi_connection, sqlite3.Connection)
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA busy_timeout = 20" if is_sqlite else "SET lock_timeout = '20ms'")
        cursor.close()
        if not is_sqlite:
            dbapi_connection.commit()  # end the transaction psycopg opened for the SET

    sa.event.listen(engine, "connect", impatient)
    try:
        yield engine
    finally:
        engine.dispose()


def test_a_lock_wait_that_times_out_is_busy_and_retryable(
    engine: Engine, impatient_engine: Engine
) -> None:
    with engine.begin() as connection:
        run_id = builders.a_run(connection, builders.a_definition(connection), key="r")
        instance_id = builders.an_instance(connection, run_id, "extract")
    instances = schema.task_instances
    touch = instances.update().where(instances.c.id == instance_id).values(epoch=1)
    holding = threading.Event()
    release = threading.Event()

    def hold_the_row() -> None:
        with engine.begin() as connection:
            connection.execute(touch)
            holding.set()
            release.wait(timeout=10)

    holder = threading.Thread(target=hold_the_row)
    holder.start()
    try:
        assert holding.wait(timeout=10)
        with pytest.raises(errors.LedgerBusy) as busy, impatient_engine.begin() as connection:
            connection.execute(touch)
    finally:
        release.set()
        holder.join()
    assert busy.value.retryable
    assert isinstance(busy.value.__cause__, sqlite3.Error | psycopg.Error)


def test_an_unreachable_database_is_unavailable_and_retryable() -> None:
    engine = dialects.create_engine("postgresql://nobody@127.0.0.1:1/none?connect_timeout=2")
    try:
        with pytest.raises(errors.LedgerUnavailable) as unavailable, engine.connect():
            pass
    finally:
        engine.dispose()
    assert unavailable.value.retryable


def test_a_full_sqlite_database_is_unavailable_not_a_bug(tmp_path: Path) -> None:
    """SQLite's "database or disk is full" (here the file may not grow: its size is capped
    at what it holds) is the platform's trouble, retryable; the API answers it 503."""
    engine = dialects.create_engine(f"sqlite:///{tmp_path / 'full.db'}")

    def no_room(dbapi_connection: DBAPIConnection, _: ConnectionPoolEntry) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA page_count")
        row = cursor.fetchone()
        assert row is not None
        cursor.execute(f"PRAGMA max_page_count = {max(int(row[0]), 1)}")
        cursor.close()

    sa.event.listen(engine, "connect", no_room)
    try:
        with pytest.raises(errors.LedgerUnavailable) as full, engine.begin() as connection:
            connection.execute(sa.text("CREATE TABLE filler (x TEXT)"))
    finally:
        engine.dispose()
    assert full.value.retryable
    assert "full" in str(full.value)


@pytest.mark.postgres
def test_a_dropped_postgres_database_is_unavailable(
    postgres_server: PostgresServer,
) -> None:
    """A database that is gone (dropped while we ran) cannot be reached: retryable."""
    name = postgres_server.create_database("vt_gone")
    engine = dialects.create_engine(postgres_server.url_for(name))
    try:
        with engine.connect() as connection:
            connection.execute(sa.select(1))
        postgres_server.drop_database(name)
        for _ in range(2):  # the pooled connection was ended; a new one finds no database
            with pytest.raises(errors.LedgerUnavailable) as gone, engine.connect() as connection:
                connection.execute(sa.select(1))
            assert gone.value.retryable
    finally:
        engine.dispose()
        postgres_server.drop_database(name)


@pytest.mark.parametrize(
    "driver_error",
    [
        psycopg.errors.DiskFull("could not extend file"),
        psycopg.errors.AdminShutdown("terminating connection due to administrator command"),
        psycopg.errors.TooManyConnections("sorry, too many clients already"),
        psycopg.errors.InvalidCatalogName('database "gone" does not exist'),
    ],
)
def test_postgres_trouble_of_the_server_is_unavailable(driver_error: psycopg.Error) -> None:
    translated = errors.translate(sa.exc.OperationalError("SELECT 1", None, driver_error))
    assert isinstance(translated, errors.LedgerUnavailable)
    assert translated.retryable


def test_a_postgres_bug_stays_a_plain_ledger_error() -> None:
    driver_error = psycopg.errors.UndefinedColumn('column "nope" does not exist')
    translated = errors.translate(sa.exc.ProgrammingError("SELECT nope", None, driver_error))
    assert not translated.retryable


def test_a_foreign_key_violation_is_an_integrity_violation(engine: Engine) -> None:
    with pytest.raises(errors.IntegrityViolation) as refused, engine.begin() as connection:
        builders.an_instance(connection, "no such run", "extract")
    assert not isinstance(refused.value, errors.DuplicateKey)
    assert not refused.value.retryable
