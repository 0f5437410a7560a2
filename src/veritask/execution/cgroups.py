"""A cgroup per attempt, where the machine lets the worker make one (Linux cgroup v2).

A process cannot leave its cgroup by itself (moving needs write access to the cgroups above
it), so the cgroup holds every process of the attempt: also one that left the task's process
group, dropped its environment and outlived its worker. The worker makes the cgroup below its
own (``<cgroup2 mount>/<its cgroup>/veritask-<id>``, the id a digest of the attempt
directory's path), and steps into it to start the task (:func:`enter`, :func:`leave`): the
task is born in it, before it runs anything, and the worker steps back out (a wrapper that
joins the cgroup and then runs the task would cost a second exec, as much as the task's own
start). Whoever must stop the attempt without its worker (escalation.py) finds the cgroup by
the same name below its own cgroup: the scheduler launches the supervisor, and the supervisor
forks the workers, so they share it. No file records it: an attempt costs no inode more.
A worker that could not step back out does not use the cgroup's kills itself.

Selected by ``VERITASK_TASK_CGROUPS`` in the worker's environment: ``auto`` (the default) uses
a cgroup when the worker's own cgroup is on a cgroup v2 hierarchy it may write to, else none;
``off`` never does. Without one, the worker as subreaper and the attempt's mark in the
environment find the attempt's processes (docs/executors.md).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
from collections.abc import Mapping
from pathlib import Path

SETTING = "VERITASK_TASK_CGROUPS"
_MODES = ("auto", "off")

#: This process's cgroup directory, and whether it may make cgroups in it, per process (a
#: fork may be moved elsewhere): pid -> (path, writable).
_bases: dict[int, tuple[Path | None, bool]] = {}


def enabled(environ: Mapping[str, str]) -> bool:
    """False when ``VERITASK_TASK_CGROUPS`` is ``off``; raises ValueError for another value."""
    mode = environ.get(SETTING, "auto").strip().lower() or "auto"
    if mode not in _MODES:
        raise ValueError(f"{SETTING} must be auto or off, not {mode!r}")
    return mode == "auto"


def own_base() -> Path | None:
    """This process's cgroup directory on the cgroup v2 hierarchy, if it may make cgroups
    in it; None otherwise (no cgroup v2, a read-only one, another owner's)."""
    base, writable = _base()
    return base if writable else None


def _base() -> tuple[Path | None, bool]:
    pid = os.getpid()
    if pid not in _bases:
        _bases[pid] = _find_base()
    return _bases[pid]


def _find_base() -> tuple[Path | None, bool]:
    mount = _cgroup2_mount()
    if mount is None:
        return None, False
    try:
        with open("/proc/self/cgroup") as lines:
            own = next((line[3:].strip() for line in lines if line.startswith("0::")), None)
    except OSError:
        return None, False
    if own is None:
        return None, False
    base = mount / own.lstrip("/")
    return base, os.access(base, os.W_OK) and os.access(base / "cgroup.procs", os.W_OK)


def _name(attempt_path: Path) -> str:
    return "veritask-" + hashlib.sha256(str(attempt_path).encode()).hexdigest()[:20]


def locate(attempt_path: Path) -> Path | None:
    """The attempt's cgroup, below this process's own, if its worker made one there."""
    base, _ = _base()
    if base is None:
        return None
    cgroup = base / _name(attempt_path)
    return cgroup if cgroup.is_dir() else None


def _cgroup2_mount() -> Path | None:
    try:
        with open("/proc/self/mountinfo") as mounts:
            for line in mounts:
                fields = line.split()
                dash = fields.index("-")
                if fields[dash + 1] == "cgroup2" and fields[3] == "/":
                    return Path(fields[4])
    except (OSError, ValueError, IndexError):
        return None
    return None


def create(attempt_path: Path) -> Path | None:
    """Make the attempt's cgroup below this process's own; None when it cannot be made."""
    base = own_base()
    if base is None:
        return None
    cgroup = base / _name(attempt_path)
    try:
        cgroup.mkdir(exist_ok=True)
    except OSError:
        return None
    return cgroup


def enter(cgroup: Path) -> bool:
    """Move this process (all its threads) into ``cgroup``: what it forks is born there."""
    return _move_self(cgroup)


def leave(cgroup: Path) -> bool:
    """Move this process back from ``cgroup`` to the cgroup above it."""
    return _move_self(cgroup.parent)


def _move_self(cgroup: Path) -> bool:
    try:
        fd = os.open(cgroup / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, b"0")  # 0: the writing process, all its threads
        finally:
            os.close(fd)
    except OSError:
        return False
    return True


def members(cgroup: Path) -> list[int]:
    """The pids of the processes in ``cgroup``; empty once it is gone."""
    try:
        return [int(pid) for pid in (cgroup / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def signal_all(cgroup: Path, signum: int) -> None:
    """Signal every process in ``cgroup``: SIGKILL through ``cgroup.kill`` where the kernel has
    it (5.14), which also reaches a process forked meanwhile; else each member."""
    if signum == signal.SIGKILL:
        with contextlib.suppress(OSError):
            (cgroup / "cgroup.kill").write_text("1")
            return
    for pid in members(cgroup):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)  # read from the list an instant before: reuse is unlikely


def remove(cgroup: Path) -> bool:
    """Remove the attempt's cgroup once no process is in it; False while one is."""
    try:
        cgroup.rmdir()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True
