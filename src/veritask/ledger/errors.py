"""The ledger's errors, translated from the drivers' once, at the engine (see ``dialects``).

Whether to try again is the ``retryable`` field, never a match on the message.
"""

from __future__ import annotations

import sqlite3
from typing import Final

import psycopg
import sqlalchemy as sa

from veritask.core.errors import VeritaskError

#: The SQLSTATE that the PostgreSQL append-only trigger raises, and the prefix of the message
#: that both dialects' triggers use.
APPEND_ONLY_SQLSTATE: Final = "VT001"
APPEND_ONLY_MESSAGE: Final = "veritask append-only"


class LedgerError(VeritaskError):
    """The ledger could not do what was asked."""


class LedgerConflict(LedgerError):
    """Another writer changed the snapshot first: re-read, fold again and classify again."""

    retryable = True


class IntegrityViolation(LedgerError):
    """The database refused the row: a foreign key, a check or a missing value."""


class DuplicateKey(IntegrityViolation):
    """A row with this key already exists."""


class AppendOnlyViolation(LedgerError):
    """Events are append-only: only the retention purge may delete them, nothing updates them."""


class EvidenceMissing(IntegrityViolation):
    """A run-level state change must carry the evidence that explains it: none was given."""


class LedgerBusy(LedgerError):
    """The database was busy (a lock wait timed out, a deadlock or serialization failure)."""

    retryable = True


class LedgerUnavailable(LedgerError):
    """The database could not be reached, or cannot store anything now (its disk is full,
    its file is gone): the platform's own trouble, not the request's."""

    retryable = True


_POSTGRES_CLASSES: Final[dict[str, type[LedgerError]]] = {
    APPEND_ONLY_SQLSTATE: AppendOnlyViolation,
    "23505": DuplicateKey,  # unique_violation
    "40001": LedgerBusy,  # serialization_failure
    "40P01": LedgerBusy,  # deadlock_detected
    "55P03": LedgerBusy,  # lock_not_available
    "57014": LedgerBusy,  # query_canceled (statement or lock timeout)
}

_SQLITE_CLASSES: Final[dict[str, type[LedgerError]]] = {
    "SQLITE_CONSTRAINT_UNIQUE": DuplicateKey,
    "SQLITE_CONSTRAINT_PRIMARYKEY": DuplicateKey,
    "SQLITE_BUSY": LedgerBusy,
    "SQLITE_BUSY_SNAPSHOT": LedgerBusy,
    "SQLITE_BUSY_TIMEOUT": LedgerBusy,
    "SQLITE_LOCKED": LedgerBusy,
    "SQLITE_CANTOPEN": LedgerUnavailable,
    "SQLITE_FULL": LedgerUnavailable,  # "database or disk is full"
    "SQLITE_NOTADB": LedgerUnavailable,  # the file was replaced by something else
}

#: SQLite's extended codes of these families are the storage's trouble: an I/O error, a file
#: that cannot be opened, or written (its folder went read-only, it was moved away).
_SQLITE_UNAVAILABLE_PREFIXES: Final = ("SQLITE_IOERR", "SQLITE_CANTOPEN", "SQLITE_READONLY")

#: PostgreSQL's SQLSTATE classes and codes that say the server cannot serve now, whatever was
#: asked: insufficient resources (53: disk full, out of memory, too many connections), an
#: operator's intervention (57P: shut down, terminated, cannot connect now), a system error
#: (58: I/O), and a database that is gone (3D000, e.g. dropped).
_POSTGRES_UNAVAILABLE_PREFIXES: Final = ("08", "53", "57P", "58", "3D000")


def translate(
    exc: sa.exc.DBAPIError, *, is_disconnect: bool = False, connecting: bool = False
) -> LedgerError:
    """The LedgerError for a driver error; the caller raises it ``from`` the original.

    ``connecting``: the error came while opening a connection, before any statement of ours
    ran; whatever the driver says then (no such database, access refused, no server), the
    database cannot be reached."""
    driver_error = exc.orig
    message = str(driver_error).strip() or type(driver_error).__name__
    if is_disconnect or connecting or exc.connection_invalidated:
        return LedgerUnavailable(message)
    return _classify(driver_error, message)(message)


def _classify(driver_error: BaseException | None, message: str) -> type[LedgerError]:
    if APPEND_ONLY_MESSAGE in message:
        return AppendOnlyViolation
    if isinstance(driver_error, psycopg.Error):
        sqlstate = driver_error.sqlstate or ""
        if sqlstate in _POSTGRES_CLASSES:
            return _POSTGRES_CLASSES[sqlstate]
        if sqlstate.startswith("23"):
            return IntegrityViolation
        if sqlstate.startswith(_POSTGRES_UNAVAILABLE_PREFIXES):
            return LedgerUnavailable
        if isinstance(driver_error, psycopg.OperationalError) and not sqlstate:
            return LedgerUnavailable  # never reached the server
        return LedgerError
    if isinstance(driver_error, sqlite3.Error):
        name = getattr(driver_error, "sqlite_errorname", "")
        if name in _SQLITE_CLASSES:
            return _SQLITE_CLASSES[name]
        if name.startswith(_SQLITE_UNAVAILABLE_PREFIXES):
            return LedgerUnavailable
        if isinstance(driver_error, sqlite3.IntegrityError):
            return IntegrityViolation
        return LedgerError
    return LedgerError
