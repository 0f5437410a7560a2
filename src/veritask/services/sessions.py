"""Signed-in web UI sessions, kept on the server so that signing out really ends one.

The UI's signed cookie names a random session id; the ``ui_sessions`` table keeps only its
SHA-256, the token it signed in with, and when it began, expires and ended. A session counts
while it is not ended, not expired, and its token is not revoked: signing out ends that one
session (other browsers stay signed in), revoking a token ends every session signed in with it.
"""

from __future__ import annotations

import hashlib
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from veritask.ledger import dialects, schema
from veritask.ledger.vocabulary import TokenRole
from veritask.services import views
from veritask.services.platform import Platform


def _hash(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


def open_session(platform: Platform, session_id: str, token_id: str, expires: datetime) -> None:
    """Record a session signed in with ``token_id``; forget sessions that have expired."""
    now = platform.now()
    s = schema.ui_sessions.c
    with platform.engine.begin() as connection:
        connection.execute(schema.ui_sessions.delete().where(s.expires_at <= now))
        connection.execute(
            schema.ui_sessions.insert().values(
                id_hash=_hash(session_id), token_id=token_id, created_at=now, expires_at=expires
            )
        )


def principal_of(platform: Platform, session_id: str, token_id: str) -> views.Principal | None:
    """Who this session is signed in as, or None once it ended, expired or lost its token."""
    s, t = schema.ui_sessions.c, schema.api_tokens.c
    with dialects.read_transaction(platform.engine) as connection:
        row = connection.execute(
            sa.select(t.id, t.name, t.role)
            .join_from(schema.ui_sessions, schema.api_tokens, s.token_id == t.id)
            .where(
                s.id_hash == _hash(session_id),
                s.token_id == token_id,
                s.ended_at.is_(None),
                s.expires_at > platform.now(),
                t.revoked_at.is_(None),
            )
        ).first()
    return None if row is None else views.Principal(row.id, row.name, TokenRole(row.role))


def end_session(platform: Platform, session_id: str) -> None:
    """Sign this session out; ending it again changes nothing."""
    s = schema.ui_sessions.c
    with platform.engine.begin() as connection:
        connection.execute(
            schema.ui_sessions.update()
            .where(s.id_hash == _hash(session_id), s.ended_at.is_(None))
            .values(ended_at=platform.now())
        )


def end_sessions_of_token(connection: Connection, token_id: str, now: datetime) -> None:
    """End every session signed in with the token, in the caller's transaction (revocation)."""
    s = schema.ui_sessions.c
    connection.execute(
        schema.ui_sessions.update()
        .where(s.token_id == token_id, s.ended_at.is_(None))
        .values(ended_at=now)
    )
