"""Attempt tokens: minted from a secret and a nonce, so a restarted scheduler can resubmit.

The token is given to the worker only and stored hashed (docs/state-machine.md). If the scheduler
dies between opening an attempt and submitting it, recovery must submit it (idempotently) with the
same token, which the database alone cannot give back. So the token is an HMAC of the
attempt's identity and a random nonce under a secret kept outside the database
(``VERITASK_HOME/secret`` or ``VERITASK_SECRET``): the ``attempt_opened`` event carries the
nonce and the token's hash, and only a holder of the secret can mint the token again.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

from veritask import secret_files
from veritask.core import judge

SECRET_ENV = "VERITASK_SECRET"


class AttemptTokens:
    """Mints and re-mints attempt tokens under one secret."""

    def __init__(self, secret: bytes) -> None:
        if len(secret) < 16:
            raise ValueError("the token secret must have at least 16 bytes")
        self._secret = secret

    @classmethod
    def from_home(cls, home: Path) -> AttemptTokens:
        """The secret from VERITASK_SECRET, else ``home/secret`` (created on first use)."""
        return cls(load_secret(home))

    @staticmethod
    def new_nonce() -> str:
        return secrets.token_hex(16)

    def mint(self, instance_id: str, attempt_no: int, nonce: str) -> str:
        message = f"{instance_id}/{attempt_no}/{nonce}".encode()
        return hmac.new(self._secret, message, hashlib.sha256).hexdigest()

    def token_hash(self, instance_id: str, attempt_no: int, nonce: str) -> str:
        return judge.hash_token(self.mint(instance_id, attempt_no, nonce))


def load_secret(home: Path) -> bytes:
    """The platform secret: VERITASK_SECRET, else ``home/secret`` (created on first use).

    Attempt tokens are minted under it; other keys (the web UI's session cookie) are derived
    from it with a label of their own, so one secret never signs two kinds of thing.
    """
    from_env = os.environ.get(SECRET_ENV)
    if from_env:
        return from_env.encode()
    return secret_files.read_or_create(home / "secret").encode()
