"""Whether an outbox may have new reports, without listing it each millisecond.

The scheduler's loop used to list its outbox on every tick and look into it every millisecond
while idle. A directory that once held ten thousand files (the first reports of ten thousand
waits) keeps its size when emptied, and listing it then costs about 150 µs: a tenth of a core
at that pace, for nothing. On Linux, inotify tells when an entry is added (a worker links its
report in, an ``.invalid`` rename), so the directory is listed only when something arrived,
when the last listing left reports behind, and once a second regardless (a safety net, like
the loop's full scan). Elsewhere, or if inotify is refused (the per-user watch limit), the
directory is looked into as before.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import logging
import os
import select
import time
from pathlib import Path

log = logging.getLogger(__name__)

#: inotify's flags (``<sys/inotify.h>``): an entry created (a hard link too) or moved in.
_IN_CREATE = 0x100
_IN_MOVED_TO = 0x80
#: Whatever inotify says, the directory is listed at least this often.
LIST_ANYWAY_SECONDS = 1.0


class OutboxWatch:
    """News of one outbox directory for one reader."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._fd = _watch(directory)
        # The first look lists whatever is already there.
        self._news = True
        self._listed_at = float("-inf")
        self._closed = False

    @property
    def watching(self) -> bool:
        """Whether inotify tells of new entries (else every look is a listing)."""
        return self._fd is not None

    def fileno(self) -> int | None:
        """A descriptor that turns readable when an entry arrives (``select``), if watching."""
        return self._fd

    def news(self) -> bool:
        """Whether the outbox may hold reports not yet taken (does not forget it)."""
        if self._fd is None:
            return _has_entries(self.directory)
        if not self._news:
            self._news = _drain(self._fd) or self._list_anyway()
        return self._news

    def take(self) -> bool:
        """``news``, and forget it: the caller lists the outbox now."""
        found = self.news()
        if found:
            self._news = False
            self._listed_at = time.monotonic()
        return found

    def keep(self) -> None:
        """Reports were left behind (held back, or not recorded): list again next time."""
        self._news = True

    @property
    def closed(self) -> bool:
        """Closed: it looks into the directory as without inotify (a new watch listens again)."""
        return self._closed

    def close(self) -> None:
        self._closed = True
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _list_anyway(self) -> bool:
        return time.monotonic() - self._listed_at >= LIST_ANYWAY_SECONDS


def _has_entries(directory: Path) -> bool:
    try:
        with os.scandir(directory) as entries:
            return any(True for _ in entries)
    except FileNotFoundError:
        return False


def _drain(fd: int) -> bool:
    """Whether inotify had anything to say; reads it all (without waiting)."""
    said = False
    while select.select([fd], [], [], 0)[0]:
        try:
            if not os.read(fd, 65536):
                return said
        except BlockingIOError:
            return said
        said = True
    return said


def _watch(directory: Path) -> int | None:
    """A non-blocking inotify descriptor watching ``directory``, or None where there is none."""
    name = ctypes.util.find_library("c")
    if not hasattr(os, "O_CLOEXEC") or name is None:
        return None
    try:
        libc = ctypes.CDLL(name, use_errno=True)
        init = libc.inotify_init1
        add_watch = libc.inotify_add_watch
    except (OSError, AttributeError):
        return None
    directory.mkdir(parents=True, exist_ok=True)
    fd = int(init(os.O_NONBLOCK | os.O_CLOEXEC))
    if fd < 0:
        log.info("outbox: no inotify (%s); listing it instead", os.strerror(ctypes.get_errno()))
        return None
    added = int(add_watch(fd, os.fsencode(directory), _IN_CREATE | _IN_MOVED_TO))
    if added < 0:
        log.info(
            "outbox: inotify refused %s (%s); listing it instead",
            directory,
            os.strerror(ctypes.get_errno()),
        )
        os.close(fd)
        return None
    return fd


class Wake:
    """A flag another thread raises to end the loop's idle wait, which ``select`` can wait on
    beside the outbox's watch (a pipe): the wait costs nothing until one of them speaks."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._raised = False
        self._closed = False

    def set(self) -> None:
        if not self._raised and not self._closed:
            self._raised = True
            with contextlib.suppress(BlockingIOError):  # full: it is readable already
                os.write(self._write, b"!")

    def is_set(self) -> bool:
        return self._raised

    def clear(self) -> None:
        self._raised = False
        if self._closed:
            return
        with contextlib.suppress(BlockingIOError):
            while os.read(self._read, 4096):
                pass

    def fileno(self) -> int:
        return self._read

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Once: a descriptor closed twice may by then be another file's."""
        if not self._closed:
            self._closed = True
            os.close(self._read)
            os.close(self._write)
