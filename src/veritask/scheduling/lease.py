"""Which scheduler processes are alive, and the SQLite rule that only one may run.

Each scheduler keeps a row in ``schedulers`` with a heartbeat. On PostgreSQL any number may
run: the live rows say who shares the runs (``sharing``), and decisions are compare-and-set and
submissions idempotent, so an overlap while they change is never a fault. On SQLite one
writer process is the supported setup (docs/scheduling.md, section 6): a second scheduler
refuses to start, saying which process holds the database.

On SQLite the proof that a scheduler is alive is an exclusive ``flock`` on a file beside the
database (``<database>.scheduler.lock``), held for the life of the process. The kernel drops it
when the process dies, however it dies, so a scheduler killed with SIGKILL can be restarted at
once; a heartbeat row alone would make its successor wait until the row went stale (or, worse,
refuse for good after a crash). The row only says who holds the lock.
"""

from __future__ import annotations

import fcntl
import os
import socket
import uuid
from datetime import datetime, timedelta
from pathlib import Path

from veritask.core.errors import VeritaskError
from veritask.ledger import scheduler_lease
from veritask.ledger.database import Connection, Engine
from veritask.ledger.ledger import Ledger

#: A scheduler whose heartbeat is older than this is considered dead (PostgreSQL).
STALE_AFTER = timedelta(seconds=15)


class SchedulerAlreadyRunning(VeritaskError):
    """Another scheduler is running on this SQLite database."""


class SchedulerLease:
    """This process's row in ``schedulers``: taken at start, beaten while running."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._lock_fd: int | None = None

    def acquire(self) -> None:
        """Register this scheduler; on SQLite refuse if another one is alive."""
        lock_path = _sqlite_lock_path(self.ledger.engine)
        if lock_path is not None:
            self._lock_fd = _try_lock(lock_path)
        now = self.ledger.clock()
        try:
            with self.ledger.engine.begin() as connection:
                if lock_path is not None:
                    other = scheduler_lease.latest_scheduler(connection)
                    if self._lock_fd is None:
                        holder = (
                            f"process {other.pid} on {other.host}, last seen "
                            f"{_ago(now, other.heartbeat_at)} ago"
                            if other is not None
                            else f"the process holding {lock_path}"
                        )
                        raise SchedulerAlreadyRunning(
                            f"another scheduler is running on this SQLite database ({holder}); "
                            "SQLite supports one scheduler - stop it first, or use PostgreSQL "
                            "to run several"
                        )
                    # We hold the lock: every row left is a scheduler that died without
                    # releasing it.
                    scheduler_lease.forget_every_scheduler(connection)
                else:
                    scheduler_lease.forget_schedulers_silent_since(connection, now - STALE_AFTER)
                self._register(connection, now)
        except BaseException:
            self._unlock()
            raise

    def beat(self) -> None:
        now = self.ledger.clock()
        with self.ledger.engine.begin() as connection:
            if not scheduler_lease.beat(connection, self.id, now):
                # Silent past STALE_AFTER (a paused process), another scheduler forgot this
                # one: register again, so that the others count it in their share again.
                self._register(connection, now)

    def _register(self, connection: Connection, now: datetime) -> None:
        scheduler_lease.register_scheduler(
            connection, scheduler_id=self.id, host=socket.gethostname(), pid=os.getpid(), now=now
        )

    def release(self) -> None:
        try:
            with self.ledger.engine.begin() as connection:
                scheduler_lease.forget_scheduler(connection, self.id)
        finally:
            self._unlock()

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing drops the flock
            self._lock_fd = None


def _sqlite_lock_path(engine: Engine) -> Path | None:
    """The lock file of a SQLite database file; None for other databases."""
    url = engine.url
    if url.get_backend_name() != "sqlite":
        return None
    database = url.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database).expanduser().resolve().with_name(Path(database).name + ".scheduler.lock")


def _try_lock(path: Path) -> int | None:
    """An fd holding an exclusive flock on ``path``, or None if another process holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    return fd


def _ago(now: datetime, then: datetime) -> str:
    return f"{max(0.0, (now - then).total_seconds()):.0f} s"
