"""Signed-in web UI sessions, kept on the server so that signing out really ends one.

The UI's signed cookie names a random session id; the ``ui_sessions`` table keeps only its
SHA-256, the token it signed in with, and when it began, expires and ended. A session counts
while it is not ended, not expired, and its token is not revoked: signing out ends that one
session (other browsers stay signed in), revoking a token ends every session signed in with it.

A page's live stream stays open for a while; :func:`watching` lets it hear at once when its
session ends in this process (sign-out, or its token revoked). A session ended by another
process is only in the table: the stream reads it again every few seconds to notice.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime

from veritask.ledger import dialects, ui_sessions
from veritask.ledger.vocabulary import TokenRole
from veritask.services import views
from veritask.services.platform import Platform


def _hash(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


def open_session(platform: Platform, session_id: str, token_id: str, expires: datetime) -> None:
    """Record a session signed in with ``token_id``; forget sessions that have expired."""
    now = platform.now()
    with platform.engine.begin() as connection:
        ui_sessions.open_session(
            connection, id_hash=_hash(session_id), token_id=token_id, now=now, expires=expires
        )


def principal_of(platform: Platform, session_id: str, token_id: str) -> views.Principal | None:
    """Who this session is signed in as, or None once it ended, expired or lost its token."""
    with dialects.read_transaction(platform.engine) as connection:
        row = ui_sessions.session_holder(
            connection, id_hash=_hash(session_id), token_id=token_id, now=platform.now()
        )
    return None if row is None else views.Principal(row.id, row.name, TokenRole(row.role))


def end_session(platform: Platform, session_id: str) -> None:
    """Sign this session out; ending it again changes nothing."""
    with platform.engine.begin() as connection:
        ui_sessions.end_session(connection, id_hash=_hash(session_id), now=platform.now())
    session_ended(session_id)


@dataclass(frozen=True, eq=False)
class _Watch:
    """One open stream of a signed-in session, and how to wake it when the session ends."""

    id_hash: str
    token_id: str
    wake: Callable[[], None]


_watches: set[_Watch] = set()
_watches_lock = threading.Lock()


@contextmanager
def watching(session_id: str, token_id: str, wake: Callable[[], None]) -> Iterator[None]:
    """Inside the block, ``wake`` is called (from any thread) as soon as this process ends the
    session or revokes its token."""
    watch = _Watch(_hash(session_id), token_id, wake)
    with _watches_lock:
        _watches.add(watch)
    try:
        yield
    finally:
        with _watches_lock:
            _watches.discard(watch)


def _wake(ended: Callable[[_Watch], bool]) -> None:
    with _watches_lock:
        found = [watch for watch in _watches if ended(watch)]
    for watch in found:
        watch.wake()


def session_ended(session_id: str) -> None:
    """Tell this process's streams of the session that it ended."""
    id_hash = _hash(session_id)
    _wake(lambda watch: watch.id_hash == id_hash)


def token_revoked(token_id: str) -> None:
    """Tell this process's streams of every session signed in with the token that it ended."""
    _wake(lambda watch: watch.token_id == token_id)
