"""The retention purge's permit: the secret that lets a delete through the append-only trigger.

On PostgreSQL the trigger lets a DELETE on ``events`` or ``rejected_events`` pass only if the
transaction's ``veritask.retention_purge`` setting holds a value whose SHA-256 is the enrolled
one, which ``veritask_purge_key()`` returns (migration 0003). Only the hash is in the
database; the permit itself is ``VERITASK_LEDGER_PERMIT``, else the file ``ledger-permit`` in
VERITASK_HOME (mode 0600, created on first use). Every host that purges needs the same one.

Enrolling writes the hash into ``veritask_purge_key()`` with ``CREATE OR REPLACE FUNCTION``,
which only the function's owner (the role that migrated) may do: a role that can only read
and write rows can neither enroll a permit of its own nor change the enrolled one. The first
enrollment happens at ``veritask db upgrade`` / ``veritask up``, or else at the first purge;
after that a different permit is refused, never silently enrolled over the first.

SQLite needs no permit: its trigger asks a function that only Veritask's connections register
(see ``dialects.purge_permitted``).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Final

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from veritask import secret_files
from veritask.ledger import errors

PERMIT_ENV: Final = "VERITASK_LEDGER_PERMIT"
PERMIT_FILE: Final = "ledger-permit"
#: Any constant: the transaction-scoped advisory lock that serializes first enrollments.
_ENROLL_LOCK: Final = 0x7665726974  # "verit"


def load_permit(home: Path) -> str:
    """``VERITASK_LEDGER_PERMIT``, else ``home/ledger-permit`` (created 0600 on first use)."""
    from_env = os.environ.get(PERMIT_ENV)
    if from_env:
        return from_env
    path = home / PERMIT_FILE
    permit = secret_files.read_or_create(path)
    if not permit:
        raise errors.LedgerError(f"the ledger's purge permit {path} is empty")
    return permit


def permit_hash(permit: str) -> str:
    """What the database stores of a permit: its SHA-256, hex."""
    return hashlib.sha256(permit.encode()).hexdigest()


def enrolled_hash(connection: Connection) -> str | None:
    """The hash the database accepts, or None while no permit is enrolled."""
    value = connection.execute(sa.select(sa.func.veritask_purge_key())).scalar()
    return None if value is None else str(value)


def ensure_enrolled(connection: Connection, permit: str) -> None:
    """Enroll ``permit`` if none is yet (PostgreSQL); refuse if another one is.

    Runs in the caller's transaction: a rollback undoes the enrollment too.
    """
    if connection.dialect.name != "postgresql":
        return
    wanted = permit_hash(permit)
    found = enrolled_hash(connection)
    if found is None:
        connection.execute(sa.select(sa.func.pg_advisory_xact_lock(_ENROLL_LOCK)))
        found = enrolled_hash(connection)
    if found is None:
        # ``wanted`` is a hex digest: nothing in it can end the literal.
        connection.exec_driver_sql(
            "CREATE OR REPLACE FUNCTION veritask_purge_key() RETURNS text LANGUAGE sql STABLE "
            f"AS $$ SELECT '{wanted}'::text $$"
        )
        return
    if found != wanted:
        raise errors.LedgerError(
            "this database's purge permit is another one than this host's: give every host "
            f"that purges the same {PERMIT_ENV} or VERITASK_HOME/{PERMIT_FILE}"
        )


def enroll(engine: sa.Engine, home: Path) -> None:
    """Enroll this home's permit in the database at ``engine`` if none is yet (PostgreSQL)."""
    if engine.dialect.name != "postgresql":
        return
    permit = load_permit(home)
    with engine.begin() as connection:
        ensure_enrolled(connection, permit)
