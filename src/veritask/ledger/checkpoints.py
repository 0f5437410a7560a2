"""SQLite's write-ahead log moved into the database file off the writers' path.

In WAL mode a commit appends to the ``-wal`` file, and by default the commit that crosses
1,000 pages copies the log back into the database file and syncs it. That copy writes the
pages where they live in the file, so it costs more as the database grows: with millions of
events the writer that happens to cross the threshold pays for everyone, and every writer's
rate drops with the table's size. Here one thread per process copies the log every half
second (``PRAGMA wal_checkpoint(PASSIVE)``: it never waits for readers nor blocks writers),
and writers checkpoint themselves only past a much larger backstop, if this thread falls
behind or is not running.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import weakref
from pathlib import Path
from typing import Final

log = logging.getLogger(__name__)

#: How often the thread copies the log into the database file.
INTERVAL_SECONDS: Final = 0.5
#: Writers checkpoint themselves only past this many pages of log (4 KiB each): a backstop.
WRITER_BACKSTOP_PAGES: Final = 16_384


class _Checkpointer:
    """One daemon thread for every SQLite database file this process writes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users: dict[Path, int] = {}
        self._thread: threading.Thread | None = None

    def watch(self, database: Path, owner: object) -> None:
        """Checkpoint ``database`` while ``owner`` (its engine) lives."""
        with self._lock:
            self._users[database] = self._users.get(database, 0) + 1
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="veritask-sqlite-checkpoints", daemon=True
                )
                self._thread.start()
        weakref.finalize(owner, self._forget, database)

    def _forget(self, database: Path) -> None:
        with self._lock:
            left = self._users.get(database, 0) - 1
            if left > 0:
                self._users[database] = left
            else:
                self._users.pop(database, None)

    def _run(self) -> None:
        stop = threading.Event()
        while not stop.wait(INTERVAL_SECONDS):
            with self._lock:
                databases = list(self._users)
            for database in databases:
                _checkpoint(database)


def _checkpoint(database: Path) -> None:
    wal = database.with_name(database.name + "-wal")
    try:
        if wal.stat().st_size == 0:
            return
    except FileNotFoundError:
        return
    try:
        # mode=rw: never create a database that was removed meanwhile.
        connection = sqlite3.connect(f"file:{database}?mode=rw", uri=True, timeout=0.1)
    except sqlite3.Error:
        return
    try:
        connection.execute("PRAGMA wal_checkpoint(PASSIVE)")
    except sqlite3.Error as exc:  # busy or gone: the next round, or a writer, does it
        log.debug("checkpoint of %s skipped: %s", database, exc)
    finally:
        connection.close()


CHECKPOINTER: Final = _Checkpointer()
