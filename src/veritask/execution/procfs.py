"""What the process table says, read from /proc (Linux only).

A pid alone names nothing for long: the kernel reuses pids. A pid together with the process's
start time (clock ticks since boot, field 22 of /proc/<pid>/stat) names one process for the
machine's uptime, so every identity the execution layer records is the pair.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache


@dataclass(frozen=True)
class ProcStat:
    pid: int
    #: R, S, D, Z (zombie: ended, not yet reaped), T, X, …
    state: str
    ppid: int
    pgrp: int
    session: int
    start_ticks: int

    @property
    def ended(self) -> bool:
        return self.state in ("Z", "X", "x")

    @property
    def stopped(self) -> bool:
        """Frozen by a signal (SIGSTOP, SIGTSTP) or by a tracer: it runs no code until thawed."""
        return self.state in ("T", "t")


#: More than a stat line holds: 52 numbers and a command name of at most 64 bytes.
_STAT_READ_BYTES = 4096


def read_stat(pid: int) -> ProcStat | None:
    """The process's stat line, or None when no process has this pid."""
    # os.open and one read: a buffered file object costs twice the system calls, and this is
    # read for every task a worker starts.
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
    except (FileNotFoundError, ProcessLookupError):
        return None
    try:
        line = os.read(fd, _STAT_READ_BYTES).decode(errors="replace")
    except ProcessLookupError:  # it ended between the open and the read
        return None
    finally:
        os.close(fd)
    # The command name (field 2) is in parentheses and may itself hold spaces and ')'.
    fields = line[line.rindex(")") + 2 :].split()
    return ProcStat(
        pid=pid,
        state=fields[0],
        ppid=int(fields[1]),
        pgrp=int(fields[2]),
        session=int(fields[3]),
        start_ticks=int(fields[19]),
    )


def start_ticks(pid: int) -> int | None:
    stat = read_stat(pid)
    return None if stat is None else stat.start_ticks


def is_running(pid: int, start_ticks: int) -> bool:
    """True when the process with this pid and start time exists and has not ended."""
    stat = read_stat(pid)
    return stat is not None and stat.start_ticks == start_ticks and not stat.ended


def is_stopped(pid: int, start_ticks: int) -> bool:
    """True when that very process exists and is frozen (state T or t)."""
    stat = read_stat(pid)
    return stat is not None and stat.start_ticks == start_ticks and stat.stopped


def group_members(pgid: int, *, started_since: int) -> list[int]:
    """Live processes of group ``pgid`` started no earlier than ``started_since`` (ticks).

    The start-time bound keeps a later, unrelated group that reused the id out of the answer
    (its processes all started after ours ended; ours started at or after the leader).
    """
    return [
        stat.pid
        for stat in all_stats()
        if stat.pgrp == pgid and not stat.ended and stat.start_ticks >= started_since
    ]


def all_stats() -> Iterator[ProcStat]:
    """Every process's stat line (those that end during the scan are left out)."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = read_stat(int(entry))
            if stat is not None:
                yield stat


def descendants(pid: int, *, started_since: int = 0) -> list[ProcStat]:
    """The processes below ``pid`` in the process tree, ended ones (zombies) included, each
    started no earlier than ``started_since`` (ticks). One scan of /proc.

    Under a subreaper (:func:`become_subreaper`) this is every process it started, at any
    depth: one whose parent ended is handed to the subreaper, so none leaves the tree.
    """
    children: dict[int, list[ProcStat]] = {}
    for stat in all_stats():
        children.setdefault(stat.ppid, []).append(stat)
    found: list[ProcStat] = []
    parents = [pid]
    while parents:
        for child in children.get(parents.pop(), ()):
            if child.start_ticks >= started_since:
                found.append(child)
            parents.append(child.pid)  # an older child's children may be recent
    return found


def environ_holds(pid: int, entry: bytes) -> bool:
    """The environment the process started with holds ``entry`` (``NAME=value``).

    A process keeps its environment across ``setsid``, a fork and an ``exec`` that passes it
    on; only an ``exec`` with another environment drops it. False when it cannot be read.
    """
    try:
        with open(f"/proc/{pid}/environ", "rb") as environ:
            return entry in environ.read().split(b"\0")
    except OSError:  # gone, or another user's
        return False


def marked(entry: bytes, *, started_since: int) -> list[ProcStat]:
    """Live processes whose environment holds ``entry``, started no earlier than
    ``started_since`` (ticks). One scan of /proc, reading the environment of each."""
    return [
        stat
        for stat in all_stats()
        if not stat.ended
        and stat.start_ticks >= started_since
        and stat.pid != os.getpid()
        and environ_holds(stat.pid, entry)
    ]


#: prctl(2): a subreaper adopts its descendants whose parent ends.
_PR_SET_CHILD_SUBREAPER = 36


@cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def become_subreaper() -> bool:
    """Make this process the subreaper of its descendants: one whose parent ends is handed to
    this process, not to init, so it stays below it. False when the kernel refuses.

    A forked child is no subreaper (the kernel does not pass the setting on): each process
    that needs it calls this itself; calling it again costs one system call.
    """
    with contextlib.suppress(OSError, AttributeError):
        return int(_libc().prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    return False


def children() -> list[int]:
    """This process's children, those of each of its threads (``/proc/self/task/*/children``);
    empty where the kernel does not offer the file."""
    found: list[int] = []
    with contextlib.suppress(OSError):
        for thread in os.listdir("/proc/self/task"):
            with contextlib.suppress(OSError), open(f"/proc/self/task/{thread}/children") as f:
                found.extend(int(pid) for pid in f.read().split())
    return found


def reap_children(pids: Iterator[int] | list[int]) -> None:
    """Reap those of ``pids`` that are this process's ended children; leave the others."""
    for pid in pids:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def signal_process(pid: int, start_ticks: int, signum: int) -> bool:
    """Send ``signum`` to exactly that process; False when it no longer exists.

    The pidfd pins the process between the identity check and the signal, so a reused pid
    never receives it.
    """
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return False
    try:
        if not is_running(pid, start_ticks):
            return False
        signal.pidfd_send_signal(pidfd, signum)
        return True
    except ProcessLookupError:
        return False
    finally:
        os.close(pidfd)


def signal_group(pgid: int, signum: int) -> bool:
    """Signal a whole process group; False when the group no longer exists."""
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        return False
    return True


@cache
def hostname() -> str:
    return socket.gethostname()
