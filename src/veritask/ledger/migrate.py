"""Upgrade, downgrade and inspect the ledger's schema from Python, without an alembic.ini.

The migrations ship inside the package (``veritask/ledger/migrations``); the configuration is
built here in code.
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Engine

from veritask.ledger import dialects, errors, permits

SCRIPT_LOCATION = "veritask.ledger:migrations"


def alembic_config(url: str) -> Config:
    """An Alembic configuration for the database at ``url`` (no file on disk)."""
    config = Config()
    config.set_main_option("script_location", SCRIPT_LOCATION)
    config.set_main_option("path_separator", "os")
    # Passed as an attribute, not a main option: configparser would read "%" in a password
    # as interpolation.
    config.attributes["url"] = url
    return config


def upgrade(url: str, revision: str = "head", *, permit_home: Path | None = None) -> None:
    """Migrate the database at ``url`` up to ``revision`` (the newest by default).

    With ``permit_home``, then enroll that home's purge permit if none is yet (PostgreSQL, at
    the head; see ``permits``): the role that migrates owns the key function.
    """
    command.upgrade(alembic_config(url), revision)
    if permit_home is None or revision != "head":
        return
    engine = dialects.create_engine(url)
    try:
        permits.enroll(engine, permit_home)
    finally:
        engine.dispose()


def downgrade(url: str, revision: str) -> None:
    """Migrate the database at ``url`` down to ``revision`` (``"base"`` removes every table)."""
    command.downgrade(alembic_config(url), revision)


def current(url: str) -> str | None:
    """The revision the database at ``url`` is at, or None if it was never migrated."""
    engine = dialects.create_engine(url)
    try:
        with dialects.read_transaction(engine) as connection:
            return MigrationContext.configure(connection).get_current_revision()
    finally:
        engine.dispose()


def revision_of(engine: Engine) -> str | None:
    """The revision the database behind ``engine`` is at, None if it was never migrated;
    a ``LedgerError`` if it cannot be read (SQLAlchemy's own errors included)."""
    try:
        with dialects.read_transaction(engine) as connection:
            connection.execute(sa.select(1))
            return MigrationContext.configure(connection).get_current_revision()
    except sa.exc.SQLAlchemyError as exc:
        raise errors.LedgerError(str(exc)) from exc


def head() -> str:
    """The newest revision that ships with this version of Veritask."""
    revision = ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()
    if revision is None:
        raise RuntimeError("the package ships no migrations")
    return revision
