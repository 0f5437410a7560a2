"""Secrets kept in ``VERITASK_HOME``: made once, readable by their owner only."""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def read_or_create(path: Path) -> str:
    """The secret in ``path``, created first (mode 0600, 32 random bytes as hex) if absent.

    Several processes may start at once: the first creates the file, the others read it.
    """
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass  # another process created it meanwhile: read theirs
        else:
            with os.fdopen(fd, "w") as handle:
                handle.write(secrets.token_hex(32))
    return path.read_text().strip()
