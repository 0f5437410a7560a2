"""API tokens: bearer tokens with a role, shown once and stored only as a hash.

Roles are ordered: a viewer reads; an operator also triggers, cancels and overrides; an admin
also applies and deletes definitions and creates tokens. Attempt tokens are another thing
entirely (``scheduling.tokens``): they prove a worker, never a person.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
from dataclasses import replace
from pathlib import Path
from typing import Final

from veritask.core import refusals
from veritask.ledger import api_tokens, dialects, runs, ui_sessions
from veritask.ledger.vocabulary import TokenRole as TokenRole  # re-exported for the API
from veritask.scheduling import tokens as attempt_tokens
from veritask.services import sessions, views
from veritask.services.errors import Conflict, InvalidInput, NotFound
from veritask.services.platform import Platform

#: What each role includes: a higher role may do everything a lower one may.
ROLE_RANK: Final = {TokenRole.VIEWER: 0, TokenRole.OPERATOR: 1, TokenRole.ADMIN: 2}
TOKEN_PREFIX: Final = "vt_"
#: Where ``veritask up`` keeps its admin token, so that the CLI on this machine needs no setup.
TOKEN_FILE: Final = "token"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}")


def hash_api_token(token: str) -> str:
    """The stored form of an API token."""
    return hashlib.sha256(token.encode()).hexdigest()


def allows(principal: views.Principal, needed: TokenRole) -> bool:
    """Whether the principal's role includes ``needed``."""
    return ROLE_RANK[principal.role] >= ROLE_RANK[needed]


def create_token(platform: Platform, *, role: TokenRole, name: str) -> views.NewToken:
    """A new random token for ``role``; the token itself is returned here and never again."""
    if not _NAME.fullmatch(name):
        raise InvalidInput.about("name", refusals.TOKEN_NAME.format())
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token_id = runs.new_id()
    now = platform.now()
    with platform.engine.begin() as connection:
        api_tokens.insert_token(
            connection,
            token_id=token_id,
            name=name,
            role=role.value,
            token_hash=hash_api_token(token),
            now=now,
        )
    return views.NewToken(token_id, name, role, token, now)


def list_tokens(platform: Platform) -> list[views.TokenInfo]:
    """Every API token, revoked ones included (oldest first); never the tokens themselves."""
    with dialects.read_transaction(platform.engine) as connection:
        rows = api_tokens.list_tokens(connection)
    return [_info(row) for row in rows]


def revoke_token(platform: Platform, token_id: str) -> views.TokenInfo:
    """Revoke a token from now on, and end the web UI sessions signed in with it; revoking
    it again changes nothing.

    The last admin token that still works is kept: without it nobody could create tokens.
    """
    with platform.engine.begin() as connection:
        row = api_tokens.lock_token(connection, token_id)
        if row is None:
            raise NotFound(refusals.NO_TOKEN.format(token_id=token_id))
        if row.revoked_at is not None:
            return _info(row)
        if row.role == TokenRole.ADMIN.value:
            # Locked, so that two revocations cannot each leave the other as the last admin
            # (SQLite's writers are serialized anyway).
            admins = api_tokens.lock_working_tokens_of_role(connection, TokenRole.ADMIN.value)
            if len(admins) <= 1:
                raise Conflict(refusals.LAST_ADMIN.format(token_id=token_id))
        now = platform.now()
        api_tokens.mark_revoked(connection, token_id, now)
        ui_sessions.end_sessions_of_token(connection, token_id, now)
    sessions.token_revoked(token_id)  # its open live streams end now, not at their next look
    return replace(_info(row), revoked_at=now)


def _info(row: api_tokens.TokenRow) -> views.TokenInfo:
    return views.TokenInfo(
        str(row.id), str(row.name), TokenRole(row.role), row.created_at, row.revoked_at
    )


def authenticate(platform: Platform, token: str) -> views.Principal | None:
    """Who the token names, or None if it names nobody (unknown or revoked)."""
    if not token.startswith(TOKEN_PREFIX):
        return None
    with dialects.read_transaction(platform.engine) as connection:
        row = api_tokens.holder_of_hash(connection, hash_api_token(token))
    return None if row is None else views.Principal(row.id, row.name, TokenRole(row.role))


def principal_by_id(platform: Platform, token_id: str) -> views.Principal | None:
    """Who the token with this id names, or None once it is revoked (or never existed).

    The web UI's session names the token by id, so that a revoked token ends its sessions.
    """
    with dialects.read_transaction(platform.engine) as connection:
        row = api_tokens.holder_of_id(connection, token_id)
    return None if row is None else views.Principal(row.id, row.name, TokenRole(row.role))


def session_key(platform: Platform) -> bytes:
    """The key that signs the web UI's session cookies, derived from the platform secret.

    A label of its own keeps a session signature from ever being an attempt token.
    """
    secret = attempt_tokens.load_secret(platform.home)
    return hmac.new(secret, b"veritask/ui-session/v1", hashlib.sha256).digest()


def admin_token_for_home(platform: Platform, home: Path) -> tuple[str, bool]:
    """The admin token kept in ``home``, created the first time; ``(token, created)``.

    A token file that no longer names an admin (a new database) is replaced.
    """
    path = home / TOKEN_FILE
    if path.is_file():
        token = path.read_text().strip()
        principal = authenticate(platform, token)
        if principal is not None and principal.role is TokenRole.ADMIN:
            return token, False
    new = create_token(platform, role=TokenRole.ADMIN, name="admin")
    write_private(path, new.token)
    return new.token, True


def write_private(path: Path, text: str) -> None:
    """Write a file only its owner can read, replacing it atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text + "\n")
    os.replace(temporary, path)
