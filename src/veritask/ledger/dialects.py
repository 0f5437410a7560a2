"""The few places where SQLite and PostgreSQL differ, and the one place that picks between them.

Everything else in the ledger is dialect-neutral SQLAlchemy Core. The database is chosen by
its URL here and nowhere else.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Final

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Engine, ExceptionContext
from sqlalchemy.pool import ConnectionPoolEntry

from veritask.ledger import checkpoints, errors, permits

#: How long a SQLite writer waits for the write lock before the ledger reports ``LedgerBusy``.
SQLITE_BUSY_TIMEOUT_MS: Final = 30_000
DEFAULT_HOME: Final = ".veritask"
DATABASE_FILE: Final = "veritask.db"

#: Execution option: this connection's transactions only read. On SQLite they then begin
#: DEFERRED and never take the write lock (WAL readers do not block the writer).
READ_ONLY_OPTION: Final = "veritask_read_only"

#: Engine option: the VERITASK_HOME whose purge permit this engine's purges show (PostgreSQL).
HOME_OPTION: Final = "veritask_home"

#: The SQL function that SQLite's delete trigger asks (0003); only our connections have it.
SQLITE_PURGE_FUNCTION: Final = "veritask_purge_permitted"
_PURGE_FLAG: Final = "veritask_purge_permit"


def default_home() -> Path:
    """``VERITASK_HOME``, default ``./.veritask``, resolved."""
    return Path(os.environ.get("VERITASK_HOME", DEFAULT_HOME)).expanduser().resolve()


def default_database_url() -> str:
    """``VERITASK_DATABASE_URL``, else a SQLite file in ``VERITASK_HOME`` (``./.veritask``)."""
    configured = os.environ.get("VERITASK_DATABASE_URL")
    if configured:
        return configured
    return f"sqlite:///{default_home() / DATABASE_FILE}"


def shown_url(url: str | sa.URL) -> str:
    """The URL as a person may read it: the password hidden."""
    return normalize_url(url).render_as_string(hide_password=True)


def database_file(url: str | sa.URL) -> Path | None:
    """The file a SQLite URL names (None for PostgreSQL, memory and ``file:`` URIs)."""
    parsed = normalize_url(url)
    name = parsed.database
    if parsed.get_backend_name() != "sqlite" or not name or name == ":memory:":
        return None
    if name.startswith("file:"):
        return None
    return Path(name).expanduser().resolve()


def normalize_url(url: str | sa.URL) -> sa.URL:
    """Parse the URL and pin the drivers we ship: ``postgresql://`` means psycopg 3."""
    parsed = sa.make_url(url)
    if parsed.get_backend_name() == "postgresql" and parsed.drivername != "postgresql+psycopg":
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def create_engine(url: str | sa.URL, *, echo: bool = False, home: Path | None = None) -> Engine:
    """An engine for the URL, configured for the ledger, that raises ``LedgerError``s.

    SQLite: WAL, ``synchronous=NORMAL``, foreign keys on, a busy timeout, and real
    transactions that begin IMMEDIATE (they take the write lock up front, so two writers queue
    on the busy timeout instead of failing on a lock upgrade); read-only transactions, see
    ``read_transaction``, begin DEFERRED. PostgreSQL: psycopg 3. ``home`` is where the
    retention purge finds its permit (default: ``default_home()``).
    """
    parsed = normalize_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        engine = _create_sqlite_engine(parsed, echo=echo)
    elif backend == "postgresql":
        engine = sa.create_engine(parsed, echo=echo)
    else:
        raise ValueError(f"unsupported database {backend!r}; use sqlite:/// or postgresql://")
    sa.event.listen(engine, "handle_error", _translate_driver_error)
    if home is not None:
        engine.update_execution_options(**{HOME_OPTION: str(home)})
    return engine


#: SQLite's page cache per connection, in KiB (the default is 2 MiB).
SQLITE_CACHE_KIB = 65536


def _create_sqlite_engine(url: sa.URL, *, echo: bool) -> Engine:
    if url.database and url.database != ":memory:" and not url.database.startswith("file:"):
        _create_private_file(Path(url.database).expanduser())
    engine = sa.create_engine(
        url,
        echo=echo,
        connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000},
        json_serializer=_compact_json,
    )
    sa.event.listen(engine, "connect", _configure_sqlite_connection)
    sa.event.listen(engine, "begin", _begin_sqlite_transaction)
    if url.database and url.database != ":memory:" and not url.database.startswith("file:"):
        checkpoints.CHECKPOINTER.watch(Path(url.database).expanduser().resolve(), engine)
    return engine


def _compact_json(value: object) -> str:
    """JSON without the spaces after separators: SQLite keeps JSON as the text given, and
    every event's evidence and every instance's snapshot are kept for the retention period
    (PostgreSQL's JSONB keeps no text at all). Still ASCII: a lone surrogate that a sender's
    JSON escaped stays an escape, where UTF-8 could not encode it."""
    return json.dumps(value, separators=(",", ":"))


def _create_private_file(path: Path) -> None:
    """Create the database file 0600 before SQLite does (it would use the umask, 0644 by
    default): it holds token hashes and every event. SQLite gives its -wal and -shm files the
    database file's mode."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return
    os.close(fd)


class _PurgeFlag:
    """Whether this connection is inside ``purge_permitted``: what SQLite's trigger asks."""

    def __init__(self) -> None:
        self.held = False

    def __call__(self) -> bool:
        return self.held


def _configure_sqlite_connection(
    dbapi_connection: sqlite3.Connection, connection_record: ConnectionPoolEntry
) -> None:
    # The documented SQLAlchemy recipe: stop the sqlite3 module from emitting its own BEGIN
    # (it skips it before SELECT and DDL), so that the "begin" hook below makes transactions
    # real.
    dbapi_connection.isolation_level = None
    flag = _PurgeFlag()
    connection_record.info[_PURGE_FLAG] = flag
    dbapi_connection.create_function(SQLITE_PURGE_FUNCTION, 0, flag)
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.execute("PRAGMA foreign_keys = ON")
        # Indexes of millions of events: SQLite's default 2 MiB page cache holds too little of
        # their upper levels and the pages that receive new rows.
        cursor.execute(f"PRAGMA cache_size = -{SQLITE_CACHE_KIB}")
        # Checkpoints are the checkpointer thread's job (see ``checkpoints``); a writer does
        # one only past this backstop.
        cursor.execute(f"PRAGMA wal_autocheckpoint = {checkpoints.WRITER_BACKSTOP_PAGES}")
    finally:
        cursor.close()


def _begin_sqlite_transaction(connection: Connection) -> None:
    if connection.get_execution_options().get(READ_ONLY_OPTION):
        connection.exec_driver_sql("BEGIN DEFERRED")
    else:
        connection.exec_driver_sql("BEGIN IMMEDIATE")


def _translate_driver_error(context: ExceptionContext) -> BaseException | None:
    # Driver errors become LedgerErrors here, once, for every statement, commit and connect;
    # SQLAlchemy raises the returned exception ``from`` the driver's.
    if context.sqlalchemy_exception is None or not isinstance(
        context.sqlalchemy_exception, sa.exc.DBAPIError
    ):
        return None
    # No connection yet: the error came while connecting (SQLAlchemy's documented meaning).
    return errors.translate(
        context.sqlalchemy_exception,
        is_disconnect=context.is_disconnect,
        connecting=context.connection is None,
    )


@contextmanager
def read_transaction(engine: Engine) -> Iterator[Connection]:
    """A transaction that only reads: on SQLite it does not take the write lock."""
    with engine.connect() as connection:
        connection.execution_options(**{READ_ONLY_OPTION: True})
        with connection.begin():
            yield connection


@contextmanager
def snapshot_transaction(engine: Engine) -> Iterator[Connection]:
    """A read transaction whose statements all see one state of the database, however much
    is committed meanwhile: ``REPEATABLE READ`` on PostgreSQL; SQLite's read transaction
    (WAL) is one snapshot already."""
    with engine.connect() as connection:
        connection.execution_options(**{READ_ONLY_OPTION: True})
        if engine.dialect.name == "postgresql":
            connection.execution_options(isolation_level="REPEATABLE READ")
        with connection.begin():
            yield connection


def insert_ignoring_conflict(
    connection: Connection,
    table: sa.Table,
    values: Mapping[str, object],
    *,
    conflict_columns: Sequence[str],
) -> bool:
    """INSERT … ON CONFLICT (columns) DO NOTHING; True if the row was inserted.

    Concurrent callers with the same key insert exactly one row: on PostgreSQL the loser waits
    for the winner's commit, on SQLite writers are serialized by BEGIN IMMEDIATE.
    """
    # No columns: any unique or primary key conflict is ignored.
    targets = list(conflict_columns) or None
    statement = (
        _dialect_insert(connection, table)
        .values(dict(values))
        .on_conflict_do_nothing(index_elements=targets)
    )
    # RETURNING rather than rowcount: the drivers' rowcount for an ignored INSERT differs.
    key = next(iter(table.primary_key.columns))
    return connection.execute(statement.returning(key)).first() is not None


@contextmanager
def purge_permitted(
    connection: Connection, *, permit_table: sa.Table, setting: str
) -> Iterator[None]:
    """Within the caller's transaction, lift the append-only triggers for deletes only.

    PostgreSQL: the purge permit (``permits``) shown in a transaction-local setting, which the
    trigger accepts only if its SHA-256 is the enrolled one; the permit is enrolled here if
    none is yet. SQLite: this connection's answer to ``veritask_purge_permitted()`` turns true,
    a function no connection but ours registers. ``permit_table`` unlocks nothing since 0003
    (anyone could insert its row); it stays empty. If the body raises, the caller's rollback
    undoes the PostgreSQL setting; SQLite's answer turns false again here.
    """
    del permit_table
    if not connection.in_transaction():
        raise errors.LedgerError("a purge must run inside a transaction")
    if connection.dialect.name == "postgresql":
        home = connection.get_execution_options().get(HOME_OPTION)
        permit = permits.load_permit(Path(home) if home else default_home())
        permits.ensure_enrolled(connection, permit)
        connection.execute(sa.select(sa.func.set_config(setting, permit, True)))
        yield
        connection.execute(sa.select(sa.func.set_config(setting, "", True)))
        return
    flag = connection.info.get(_PURGE_FLAG)
    if not isinstance(flag, _PurgeFlag):
        raise errors.LedgerError("this SQLite connection was not opened by the ledger")
    flag.held = True
    try:
        yield
    finally:
        flag.held = False


def upsert_adding_many(
    connection: Connection,
    table: sa.Table,
    rows: Sequence[Mapping[str, object]],
    *,
    key_columns: Sequence[str],
    add_column: str,
    set_columns: Sequence[str] = (),
) -> None:
    """INSERT each row, or on a key conflict add its ``add_column`` to the stored one (and
    overwrite ``set_columns``): counters that concurrent writers increment without a lost
    update. One round trip (``executemany``) of one statement built once per table and
    dialect; the rows must all name the same columns."""
    if not rows:
        return
    key = (connection.dialect.name, table.name, tuple(key_columns), add_column, tuple(set_columns))
    statement = _UPSERTS_ADDING.get(key)
    if statement is None:
        insert = _dialect_insert(connection, table)
        updates = {add_column: table.c[add_column] + insert.excluded[add_column]}
        updates.update({column: insert.excluded[column] for column in set_columns})
        statement = insert.on_conflict_do_update(index_elements=list(key_columns), set_=updates)
        _UPSERTS_ADDING[key] = statement
    connection.execute(statement, [dict(row) for row in rows])


_UPSERTS_ADDING: dict[tuple[str, str, tuple[str, ...], str, tuple[str, ...]], sa.Executable] = {}


def _dialect_insert(connection: Connection, table: sa.Table) -> postgresql.Insert | sqlite.Insert:
    """The dialect's INSERT, the one with ON CONFLICT clauses."""
    name = connection.dialect.name
    if name == "postgresql":
        return postgresql.insert(table)
    if name == "sqlite":
        return sqlite.insert(table)
    raise ValueError(f"unsupported dialect {name!r}")
