"""The session cookie: which API token signed in, and the session's CSRF token, signed.

The cookie holds ``{"token_id", "sid", "csrf", "expires"}`` and an HMAC-SHA256 of it under a
key derived from the platform secret (``services.tokens.session_key``), so nobody can mint or
alter one without the secret. It names the token by id, never the token itself. A signed-in
session also has a random id, ``sid``, recorded on the server (``services.sessions``): every
request checks that this session has not ended (sign-out) and that its token is not revoked,
so a copied cookie stops working when its user signs out. It is HttpOnly (scripts cannot read it)
and SameSite=Lax (other sites' forms do not carry it); the CSRF token is a second line: every
form posts it back and :func:`check_csrf` compares it with the session's in constant time.
A visitor who has not signed in gets an anonymous session, so that the sign-in form has a
CSRF token too; signing in issues a new session (and a new CSRF token).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

COOKIE: Final = "veritask_session"
LIFETIME: Final = timedelta(hours=12)


@dataclass(frozen=True)
class Session:
    """A decoded, verified session: ``token_id`` is None before sign-in.

    ``session_id`` is random; the server records it (hashed) only once signed in."""

    token_id: str | None
    csrf: str
    expires: datetime
    session_id: str

    @classmethod
    def new(cls, token_id: str | None, now: datetime) -> Session:
        return cls(token_id, secrets.token_urlsafe(24), now + LIFETIME, secrets.token_urlsafe(32))


def encode(session: Session, key: bytes) -> str:
    """The cookie value: ``<payload>.<signature>``, both base64url."""
    payload = json.dumps(
        {
            "token_id": session.token_id,
            "sid": session.session_id,
            "csrf": session.csrf,
            "expires": int(session.expires.timestamp()),
        },
        separators=(",", ":"),
    ).encode()
    body = _b64(payload)
    return f"{body}.{_b64(_sign(body, key))}"


def decode(value: str | None, key: bytes, now: datetime) -> Session | None:
    """The session in ``value`` if its signature is ours and it has not expired."""
    if not value or value.count(".") != 1:
        return None
    body, signature = value.split(".")
    try:
        given = _unb64(signature)
        if not hmac.compare_digest(given, _sign(body, key)):
            return None
        data = json.loads(_unb64(body))
    except (binascii.Error, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    token_id, csrf, expires = data.get("token_id"), data.get("csrf"), data.get("expires")
    if not isinstance(csrf, str) or not isinstance(expires, int):
        return None
    if token_id is not None and not isinstance(token_id, str):
        return None
    session_id = data.get("sid")
    if not isinstance(session_id, str):  # also a cookie from before sessions had ids
        return None
    ends = datetime.fromtimestamp(expires, tz=now.tzinfo)
    if ends <= now:
        return None
    return Session(token_id, csrf, ends, session_id)


def check_csrf(session: Session | None, submitted: str | None) -> bool:
    """Whether a form's CSRF token is this session's (constant-time)."""
    if session is None or not submitted:
        return False
    return hmac.compare_digest(session.csrf.encode(), submitted.encode())


def _sign(body: str, key: bytes) -> bytes:
    return hmac.new(key, body.encode(), hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
