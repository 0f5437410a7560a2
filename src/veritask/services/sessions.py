"""Signed-in web UI sessions, kept on the server so that signing out really ends one.

The UI's signed cookie names a random session id; the ``ui_sessions`` table keeps only its
SHA-256, the token it signed in with, and when it began, expires and ended. A session counts
while it is not ended, not expired, and its token is not revoked: signing out ends that one
session (other browsers stay signed in), revoking a token ends every session signed in with it.
"""

from __future__ import annotations

import hashlib
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
