"""Alembic's environment for the ledger: the package metadata, our engine, our URL.

``veritask.ledger.migrate`` builds the Alembic configuration in code and passes the database
URL in ``config.attributes["url"]``; no alembic.ini exists on disk.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

from alembic import context
from sqlalchemy.engine import Connection

from veritask.ledger import dialects, schema

URL_ATTRIBUTE = "url"


def _database_url() -> str:
    url = context.config.attributes.get(URL_ATTRIBUTE) or context.config.get_main_option(
        "sqlalchemy.url"
    )
    return str(url) if url else dialects.default_database_url()


def _run_migrations(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=schema.metadata,
        # SQLite alters tables by copying them; later migrations need batch mode there.
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    # One transaction for the whole upgrade: both databases have transactional DDL (SQLite's
    # only because dialects.create_engine makes its transactions real).
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_offline() -> None:
    context.configure(
        url=str(dialects.normalize_url(_database_url())),
        target_metadata=schema.metadata,
        literal_binds=True,
    )
    with context.begin_transaction():
        context.run_migrations()


@contextmanager
def _foreign_keys_checked_afterwards(connection: Connection) -> Iterator[None]:
    """SQLite alters a table by copying it, and dropping the old copy of a table that others
    refer to (``definitions``, 0008) fails their foreign keys, even though the new copy takes
    its name in the same transaction. So they are off during the upgrade (set outside its
    transaction, the only place SQLite lets them change) and checked once it committed."""
    raw = connection.connection.driver_connection
    assert isinstance(raw, sqlite3.Connection)
    raw.execute("PRAGMA foreign_keys = OFF")
    try:
        yield
        broken = raw.execute("PRAGMA foreign_key_check").fetchall()
        if broken:
            raise RuntimeError(f"the upgrade left rows without their parent: {broken[:5]}")
    finally:
        raw.execute("PRAGMA foreign_keys = ON")


def run_migrations_online() -> None:
    engine = dialects.create_engine(_database_url())
    try:
        with engine.connect() as connection:
            if connection.dialect.name == "sqlite":
                with _foreign_keys_checked_afterwards(connection):
                    _run_migrations(connection)
            else:
                _run_migrations(connection)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
