"""API tokens: the ``api_tokens`` table.

Only hashes are stored (the callers hash); what a role may do is the services' business.
Every function works in the caller's transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from veritask.ledger import schema

_tokens = schema.api_tokens.c
_SELECT_INFO = sa.select(
    _tokens.id, _tokens.name, _tokens.role, _tokens.created_at, _tokens.revoked_at
)
_SELECT_HOLDER = sa.select(_tokens.id, _tokens.name, _tokens.role)


@dataclass(frozen=True)
class TokenRow:
    """A token as listed: never its hash."""

    id: str
    name: str
    role: str
    created_at: datetime
    revoked_at: datetime | None


@dataclass(frozen=True)
class TokenHolder:
    """Who a working token names."""

    id: str
    name: str
    role: str


# -- tokens ------------------------------------------------------------------------------------


def insert_token(
    connection: Connection, *, token_id: str, name: str, role: str, token_hash: str, now: datetime
) -> None:
    connection.execute(
        schema.api_tokens.insert().values(
            id=token_id, name=name, role=role, token_hash=token_hash, created_at=now
        )
    )


def list_tokens(connection: Connection) -> list[TokenRow]:
    """Every token, revoked ones included, oldest first."""
    rows = connection.execute(_SELECT_INFO.order_by(_tokens.created_at, _tokens.id))
    return [_info(row) for row in rows]


def lock_token(connection: Connection, token_id: str) -> TokenRow | None:
    """The token, its row locked for the rest of the transaction (PostgreSQL)."""
    row = connection.execute(_SELECT_INFO.where(_tokens.id == token_id).with_for_update()).first()
    return None if row is None else _info(row)


def lock_working_tokens_of_role(connection: Connection, role: str) -> list[str]:
    """The ids of the unrevoked tokens of ``role``, their rows locked (PostgreSQL): two
    revocations cannot each leave the other as the last one."""
    return list(
        connection.execute(
            sa.select(_tokens.id)
            .where(_tokens.role == role, _tokens.revoked_at.is_(None))
            .with_for_update()
        ).scalars()
    )


def mark_revoked(connection: Connection, token_id: str, now: datetime) -> None:
    connection.execute(
        schema.api_tokens.update().where(_tokens.id == token_id).values(revoked_at=now)
    )


def holder_of_hash(connection: Connection, token_hash: str) -> TokenHolder | None:
    """Who the unrevoked token with this hash names."""
    row = connection.execute(
        _SELECT_HOLDER.where(_tokens.token_hash == token_hash, _tokens.revoked_at.is_(None))
    ).first()
    return None if row is None else holder(row)


def holder_of_id(connection: Connection, token_id: str) -> TokenHolder | None:
    """Who the unrevoked token with this id names."""
    row = connection.execute(
        _SELECT_HOLDER.where(_tokens.id == token_id, _tokens.revoked_at.is_(None))
    ).first()
    return None if row is None else holder(row)


def _info(row: sa.Row[*tuple[object, ...]]) -> TokenRow:
    found = row._mapping
    return TokenRow(
        found["id"], found["name"], found["role"], found["created_at"], found["revoked_at"]
    )


def holder(row: sa.Row[*tuple[object, ...]]) -> TokenHolder:
    """The holder in a row that has the token's ``id``, ``name`` and ``role``."""
    found = row._mapping
    return TokenHolder(found["id"], found["name"], found["role"])
