"""What every command and query needs: the ledger (the database) and the data folder."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from veritask.ledger import dialects
from veritask.ledger.database import Engine
from veritask.ledger.ledger import Ledger


@dataclass(frozen=True)
class Platform:
    """The ledger and ``VERITASK_HOME`` (attempt logs, the token secret, the outbox)."""

    ledger: Ledger
    home: Path

    @classmethod
    def open(cls, database_url: str, home: Path) -> Platform:
        """Connect to the database at ``database_url`` (not migrated here: see ``db upgrade``).

        The retention purge finds its permit in ``home`` (``ledger.permits``)."""
        resolved = home.expanduser().resolve()
        return cls(Ledger(dialects.create_engine(database_url, home=resolved)), resolved)

    @property
    def engine(self) -> Engine:
        return self.ledger.engine

    @property
    def database_backend(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self.engine.dialect.name

    def holds(self, path: Path) -> bool:
        """Whether ``path``, symlinks resolved, is inside the home: a recorded path is data,
        never a way to read or delete files elsewhere. The executor's folder counts as
        inside wherever it links to (operators may keep it on a tmpfs)."""
        resolved = path.resolve()
        roots = (self.home.resolve(), (self.home / "executor").resolve())
        return any(resolved.is_relative_to(root) for root in roots)

    def now(self) -> datetime:
        """The platform's clock (UTC), the one the ledger stamps ``observed_at`` with."""
        return self.ledger.clock()

    def close(self) -> None:
        self.engine.dispose()
