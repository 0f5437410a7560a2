"""The operating-system user a local task runs as, and the passage it is given to its attempt.

A task that runs as the platform's own user can read whatever the platform can: the database,
the key attempt tokens are minted from, the admin token, ``/proc/<pid>/environ`` of the
platform's processes. So when the platform runs as root, the local executor's workers start
each task as another, unprivileged user: ``VERITASK_TASK_USER`` (a name or a uid of this
machine's user database), else ``nobody``. Root itself is used only when it is named
explicitly, with a warning. A platform that is not root cannot start processes as anyone else:
its tasks run as its own user, and ``VERITASK_TASK_USER`` may only name that user.

The worker drops privileges in the task's child before the exec (its groups, then its gid,
then its uid). What the task may write is given to it alone: a working directory of its own in
the attempt directory (``work/``), its ``output.json`` and the FIFO to its worker. To reach
them by path, the directories on the way (``VERITASK_HOME``, ``executor/``, ``attempts/``, the
instance's, the attempt's) let the task's group pass (mode 0710: search, never list or
write); every file of the platform there is readable by its owner alone.
"""

from __future__ import annotations

import functools
import logging
import os
import pwd
import stat
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

log = logging.getLogger(__name__)

SETTING: Final = "VERITASK_TASK_USER"
#: Who runs tasks when the platform is root and the setting is unset.
DEFAULT_UNDER_ROOT: Final = "nobody"
#: A directory on the way to an attempt: its owner does everything, the task's group passes.
PASSAGE_MODE: Final = 0o710
PRIVATE_DIR_MODE: Final = 0o700


class TaskUserError(ValueError):
    """The task user cannot be used; the message names the setting and what is wrong."""


@dataclass(frozen=True)
class TaskUser:
    """Another user than the platform's: the worker switches to it for the task."""

    name: str
    uid: int
    gid: int
    #: Its supplementary groups (its primary group aside), as a login would give them.
    groups: tuple[int, ...]
    home: str

    def environment(self) -> dict[str, str]:
        """What a login as this user sets, for the task's environment."""
        return {"HOME": self.home, "USER": self.name, "LOGNAME": self.name}


def _look_up(value: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwuid(int(value)) if value.isdigit() else pwd.getpwnam(value)
    except (KeyError, OverflowError):
        raise TaskUserError(
            f"{SETTING}: {value!r} names no user of this machine (neither a user name nor a"
            " uid in its user database)"
        ) from None


def resolve(environ: Mapping[str, str], *, euid: int | None = None) -> TaskUser | None:
    """The user the tasks of a platform running as ``euid`` (this process's, by default) and
    configured by ``environ`` run as; None when that is the platform's own user.

    Raises :class:`TaskUserError` for a name that is no user, and for another user than the
    platform's when the platform is not root (it could not switch to it)."""
    euid = os.geteuid() if euid is None else euid
    value = environ.get(SETTING, "").strip()
    if not value:
        if euid != 0:
            return None
        value = DEFAULT_UNDER_ROOT
        try:
            entry = pwd.getpwnam(value)
        except KeyError:
            raise TaskUserError(
                f"{SETTING} is unset and this machine has no user {value!r} to run tasks as:"
                f" set {SETTING} to an unprivileged user (or to root, to run tasks as root)"
            ) from None
    else:
        entry = _look_up(value)
    if entry.pw_uid == euid:
        if euid == 0:
            _warn_root()
        return None
    if euid != 0:
        raise TaskUserError(
            f"{SETTING}: {value!r} (uid {entry.pw_uid}) is another user than the platform's"
            f" (uid {euid}), and only a platform running as root can start tasks as another"
            f" user: run the platform as root, or unset {SETTING}"
        )
    groups = tuple(sorted(set(os.getgrouplist(entry.pw_name, entry.pw_gid)) - {entry.pw_gid}))
    return TaskUser(
        name=entry.pw_name,
        uid=entry.pw_uid,
        gid=entry.pw_gid,
        groups=groups,
        home=entry.pw_dir or "/",
    )


@functools.cache
def _warn_root() -> None:
    log.warning(
        "%s names root: tasks run as root and can read every secret of the platform", SETTING
    )


def can_pass(path: Path, user: TaskUser) -> bool:
    """Whether ``user`` may search the directory ``path`` (its mode, owner and group)."""
    info = path.stat()
    if info.st_uid == user.uid:
        return bool(info.st_mode & stat.S_IXUSR)
    if info.st_gid == user.gid or info.st_gid in user.groups:
        return bool(info.st_mode & stat.S_IXGRP)
    return bool(info.st_mode & stat.S_IXOTH)


def check_reachable(home: Path, user: TaskUser) -> None:
    """Raise :class:`TaskUserError` when a directory above ``home`` stops ``user`` on the way
    to its attempt directories (``home`` and below are opened to it by :func:`open_passage`)."""
    for directory in home.resolve().parents:
        if not can_pass(directory, user):
            mode = stat.S_IMODE(directory.stat().st_mode)
            raise TaskUserError(
                f"{SETTING}: the task user {user.name!r} cannot reach VERITASK_HOME"
                f" ({home}): {directory} (mode {mode:04o}) does not let it pass; give it"
                " search permission there (chmod o+x), or put VERITASK_HOME elsewhere"
            )


def python_problem(python: Path, user: TaskUser) -> str | None:
    """Why ``user`` cannot run the interpreter ``python`` (a ``call:`` task runs in it), or
    None. An interpreter installed below a private home (pyenv in ``/root``) is the usual
    reason."""
    target = python.resolve()
    for directory in reversed(target.parents):
        if not can_pass(directory, user):
            mode = stat.S_IMODE(directory.stat().st_mode)
            return (
                f"the task user {user.name!r} cannot run {python} ({directory} is mode"
                f" {mode:04o}): its call: tasks cannot start; install the Python that runs"
                f" Veritask where that user may run it, or set {SETTING}"
            )
    info = target.stat()
    if not (info.st_mode & (stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)):
        return f"{target} is not executable"
    return None


def embedded_problem(home: Path, python: Path, environ: Mapping[str, str]) -> str | None:
    """Why ``veritask up``, started as root without ``VERITASK_TASK_USER``, cannot give its
    tasks to the default user: that user cannot reach ``home`` or run ``python`` (a Python
    below ``/root``, as pyenv installs it). None when it can, or when another rule applies
    (a setting, or a platform that is not root)."""
    if environ.get(SETTING, "").strip() or os.geteuid() != 0:
        return None
    try:
        user = resolve(environ)
        if user is None:
            return None
        check_reachable(home, user)
    except TaskUserError as exc:
        return str(exc)
    return python_problem(python, user)


def open_passage(directories: Iterable[Path], user: TaskUser | None) -> None:
    """Make each directory (owned by this process) one the task's group passes through, or,
    without a task user, private to this user."""
    for directory in directories:
        if user is None:
            mode = PRIVATE_DIR_MODE
        else:
            if directory.stat().st_gid != user.gid:
                os.chown(directory, -1, user.gid)
            mode = PASSAGE_MODE
        if stat.S_IMODE(directory.stat().st_mode) != mode:
            os.chmod(directory, mode)


def give(path: Path, user: TaskUser) -> None:
    """Hand a file or directory this process made to the task's user."""
    os.chown(path, user.uid, user.gid, follow_symlinks=False)


def take_back(path: Path, *, mode: int) -> None:
    """Take a file or directory handed to the task back: this process's, ``mode``. It lies in
    a directory the task cannot write, so it is still the entry that was handed over."""
    os.chown(path, os.geteuid(), os.getegid(), follow_symlinks=False)
    os.chmod(path, mode)


#: Files of the data folder only the platform's user may read, below ``VERITASK_HOME``.
PRIVATE_FILES: Final = (
    "token",
    "secret",
    "ledger-permit",
    "url",
    "signing-key.pem",
    "veritask.db",
    "veritask.db-wal",
    "veritask.db-shm",
    "executor/supervisor.log",
)
#: Directories of the data folder only the platform's user may enter.
PRIVATE_DIRS: Final = ("outbox", "executor/workers", "executor/trash")


def secure_home(home: Path, environ: Mapping[str, str]) -> TaskUser | None:
    """Make ``VERITASK_HOME`` (if need be) and keep it the platform's: the folder 0700 (0710
    for the task user's group, when tasks run as another user), the database, the keys and
    tokens 0600, and the outbox 0700. A mode found more open is closed, with a warning naming
    it. Returns the task user; raises :class:`TaskUserError` for a setting that cannot be used
    (at the platform's start: before any task could be given to it)."""
    user = resolve(environ)
    home.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR_MODE)
    if user is not None:
        check_reachable(home, user)
    wanted = PRIVATE_DIR_MODE if user is None else PASSAGE_MODE
    _close(home, wanted, lambda: open_passage([home], user))
    for name in PRIVATE_FILES:
        path = home / name
        if path.is_file() and not path.is_symlink():
            _close(path, 0o600, functools.partial(os.chmod, path, 0o600))
    for name in PRIVATE_DIRS:
        path = home / name
        if path.is_dir() and not path.is_symlink():
            _close(path, PRIVATE_DIR_MODE, functools.partial(os.chmod, path, PRIVATE_DIR_MODE))
    return user


def _close(path: Path, wanted: int, fix: Callable[[], None]) -> None:
    """Apply ``fix``; warn when ``path``'s mode let more through than ``wanted`` does."""
    before = stat.S_IMODE(path.stat().st_mode)
    fix()
    if before & ~wanted:
        log.warning(
            "%s was mode %04o, open to other users: now %04o (only the platform's user may"
            " read VERITASK_HOME)",
            path,
            before,
            stat.S_IMODE(path.stat().st_mode),
        )
