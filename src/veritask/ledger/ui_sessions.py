"""Signed-in web UI sessions: the ``ui_sessions`` table (only each session id's hash).

Every function works in the caller's transaction.
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from veritask.ledger import schema
from veritask.ledger.api_tokens import TokenHolder, holder

_tokens = schema.api_tokens.c
_sessions = schema.ui_sessions.c
_SELECT_HOLDER = sa.select(_tokens.id, _tokens.name, _tokens.role)


def open_session(
    connection: Connection, *, id_hash: str, token_id: str, now: datetime, expires: datetime
) -> None:
    """Record a session; forget the sessions that have expired."""
    connection.execute(schema.ui_sessions.delete().where(_sessions.expires_at <= now))
    connection.execute(
        schema.ui_sessions.insert().values(
            id_hash=id_hash, token_id=token_id, created_at=now, expires_at=expires
        )
    )


def session_holder(
    connection: Connection, *, id_hash: str, token_id: str, now: datetime
) -> TokenHolder | None:
    """Who the session is signed in as, while it is not ended, not expired and its token is
    not revoked."""
    row = connection.execute(
        _SELECT_HOLDER.join_from(
            schema.ui_sessions, schema.api_tokens, _sessions.token_id == _tokens.id
        ).where(
            _sessions.id_hash == id_hash,
            _sessions.token_id == token_id,
            _sessions.ended_at.is_(None),
            _sessions.expires_at > now,
            _tokens.revoked_at.is_(None),
        )
    ).first()
    return None if row is None else holder(row)


def end_session(connection: Connection, *, id_hash: str, now: datetime) -> None:
    """End the session; ending it again changes nothing."""
    connection.execute(
        schema.ui_sessions.update()
        .where(_sessions.id_hash == id_hash, _sessions.ended_at.is_(None))
        .values(ended_at=now)
    )


def end_sessions_of_token(connection: Connection, token_id: str, now: datetime) -> None:
    """End every session signed in with the token."""
    connection.execute(
        schema.ui_sessions.update()
        .where(_sessions.token_id == token_id, _sessions.ended_at.is_(None))
        .values(ended_at=now)
    )
