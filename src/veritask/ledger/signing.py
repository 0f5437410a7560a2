"""The ledger's signing key: Ed25519, kept by the operator, never in the database.

``VERITASK_SIGNING_KEY_FILE`` names a PEM file (PKCS #8, unencrypted) the operator keeps;
else the key is ``signing-key.pem`` in VERITASK_HOME, made (mode 0600) the first time a
process needs it. Either file must be readable by its owner only: a key others can read
proves nothing. The database keeps only public keys, beside each signature
(docs/integrity.md, 'The key').
"""

from __future__ import annotations

import hashlib
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from veritask.ledger import errors

KEY_FILE_ENV: Final = "VERITASK_SIGNING_KEY_FILE"
KEY_FILE: Final = "signing-key.pem"


def key_file(home: Path) -> Path:
    """Where this host's key is: ``VERITASK_SIGNING_KEY_FILE``, else in ``home``."""
    named = os.environ.get(KEY_FILE_ENV)
    return Path(named).expanduser() if named else home / KEY_FILE


@dataclass(frozen=True)
class Signer:
    """A private key with its public half, as hex."""

    key: ed25519.Ed25519PrivateKey

    @property
    def public_key(self) -> str:
        return public_hex(self.key.public_key())

    def sign(self, message: bytes) -> str:
        return self.key.sign(message).hex()


def public_hex(key: ed25519.Ed25519PublicKey) -> str:
    """The raw 32 bytes of a public key, hex: how the database and the reports name it."""
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()


def key_id(public_key: str) -> str:
    """A short name for a public key (hex): the first 16 hex digits of its SHA-256."""
    return hashlib.sha256(bytes.fromhex(public_key)).hexdigest()[:16]


def verify(public_key: str, signature: str, message: bytes) -> bool:
    """Whether ``signature`` (hex) is ``public_key``'s (hex) over ``message``."""
    try:
        key = ed25519.Ed25519PublicKey.from_public_bytes(bytes.fromhex(public_key))
        key.verify(bytes.fromhex(signature), message)
    except (InvalidSignature, ValueError):
        return False
    return True


def load_signer(home: Path, *, create: bool = True) -> Signer | None:
    """This host's key; made first (0600) in ``home`` when absent and ``create``; None when
    absent and not ``create``. A file others may read, or that holds no Ed25519 key, is
    refused with :class:`errors.LedgerError` naming it."""
    path = key_file(home)
    if not path.exists():
        if not create:
            return None
        if os.environ.get(KEY_FILE_ENV):
            raise errors.LedgerError(f"{KEY_FILE_ENV}: no key file at {path}")
        _create(path)
    mode = path.stat().st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise errors.LedgerError(
            f"signing key {path}: mode {stat.S_IMODE(mode):04o} lets others read it; "
            f"run chmod 600 {path}"
        )
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (ValueError, TypeError) as exc:
        raise errors.LedgerError(f"signing key {path}: not a PEM private key ({exc})") from None
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise errors.LedgerError(f"signing key {path}: not an Ed25519 key")
    return Signer(key)


def load_public_key(path: Path) -> str:
    """A public key from a PEM file (``SubjectPublicKeyInfo``), as hex; for ``--public-key``."""
    try:
        key = serialization.load_pem_public_key(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise errors.LedgerError(f"public key {path}: cannot be read ({exc})") from None
    if not isinstance(key, ed25519.Ed25519PublicKey):
        raise errors.LedgerError(f"public key {path}: not an Ed25519 key")
    return public_hex(key)


def public_pem(signer: Signer) -> str:
    """The public half as PEM, for an auditor's ``--public-key``."""
    return (
        signer.key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


def _create(path: Path) -> None:
    """Write a new key, 0600. Several processes may start at once: each writes its own to a
    temporary file and links it into place; the first link wins, the others read that one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pem = ed25519.Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    draft = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(pem)
        os.link(draft, path)
    except FileExistsError:
        pass  # another process's key is in place: that one is the key
    finally:
        draft.unlink(missing_ok=True)
