"""Where the execution layer keeps its files, and how it writes them so that readers never see
half a file.

An attempt directory holds everything about one attempt; a reconciler can judge an attempt from
it alone, even when every callback was lost::

    spec.json         the AttemptSpec (mode 0600: it holds the attempt token)
    worker.json       the worker's identity: pid, start time in clock ticks, host (a second name
                      of the supervisor's record of that worker, which may serve many attempts)
    cancel_requested  a stop was asked for; holds the time of the first request
    task.json         the task's identity: its ``started`` event (a second name of the
                      spool's file for it)
    task.log          the task's stdout and stderr, capped, with the worker's notes; made
                      on the first byte (a silent task has none: read as empty)
    output.json       VERITASK_OUTPUT: JSON the task leaves for the platform
    upstream_outputs.json
                      VERITASK_UPSTREAM_OUTPUTS: the upstream tasks' outputs, by task key (only
                      for a task that reads outputs)
    channel           a FIFO: the task API's progress and commit notices to the worker
    event.<seq>.*     the spool: every event, written before it is sent (see spool.py)
    exit.json         the exit record: the ``completed`` event, fsync-ed (a second name of
                      the spool's file for it)
    work/             the task's working directory, only when it runs as another user than
                      its worker (``task_user.py``); its own while it runs

The worker that owns the attempt holds an flock on the directory itself for its whole life.
Creating a file costs far more than writing one on some file systems, so the layout creates
few: no lock file, no spool subdirectory.

The local executor keeps attempt directories under ``<VERITASK_HOME>/executor/attempts/
<instance_id>/<attempt_no>/`` beside the supervisor's pidfile, lock and socket.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path

from veritask.core import jsontypes


@dataclass(frozen=True)
class AttemptDir:
    """The files of one attempt directory.

    Each path is made once per ``AttemptDir`` (a cached property): a worker and the process that
    hands it an attempt name these files dozens of times per attempt, and a new ``Path`` each
    time, turned into a string again for each system call, cost a few per cent of the worker's
    CPU for an attempt of ``true``.
    """

    path: Path

    @functools.cached_property
    def spec(self) -> Path:
        return self.path / "spec.json"

    @functools.cached_property
    def worker_record(self) -> Path:
        return self.path / "worker.json"

    @functools.cached_property
    def cancel_request(self) -> Path:
        return self.path / "cancel_requested"

    @functools.cached_property
    def task_record(self) -> Path:
        return self.path / "task.json"

    @functools.cached_property
    def log(self) -> Path:
        return self.path / "task.log"

    @functools.cached_property
    def output(self) -> Path:
        return self.path / "output.json"

    @functools.cached_property
    def upstream_outputs(self) -> Path:
        return self.path / "upstream_outputs.json"

    @functools.cached_property
    def channel(self) -> Path:
        return self.path / "channel"

    @functools.cached_property
    def work(self) -> Path:
        """The task's own working directory, when it runs as another user than its worker
        (``task_user.py``): the one place in the attempt directory it may write."""
        return self.path / "work"

    @functools.cached_property
    def exit_record(self) -> Path:
        return self.path / "exit.json"


@dataclass(frozen=True)
class ExecutorHome:
    """``<VERITASK_HOME>/executor``: the local supervisor's files and the attempt directories."""

    path: Path

    @property
    def attempts(self) -> Path:
        return self.path / "attempts"

    @property
    def trash(self) -> Path:
        """Attempt directories are renamed here before deletion, so none is ever half-gone."""
        return self.path / "trash"

    @property
    def workers(self) -> Path:
        """One record per live supervised worker; an attempt's ``worker.json`` is a second name
        of its worker's record, so that giving a warm worker an attempt creates no file."""
        return self.path / "workers"

    def worker_record(self, pid: int, start_ticks: int) -> Path:
        return self.workers / f"{pid}-{start_ticks}.json"

    @property
    def start_lock(self) -> Path:
        """Held while a client checks for the supervisor and starts one: never two at once."""
        return self.path / "supervisor.lock"

    @property
    def pidfile(self) -> Path:
        """The supervisor's pid and start time; flock-ed by the supervisor while it lives."""
        return self.path / "supervisor.pid"

    @property
    def socket(self) -> Path:
        return self.path / "supervisor.sock"

    @property
    def supervisor_log(self) -> Path:
        return self.path / "supervisor.log"

    def attempt(self, instance_id: str, attempt_no: int) -> AttemptDir:
        return AttemptDir(self.attempts / instance_id / str(attempt_no))

    def attempt_for_key(self, key: str) -> AttemptDir:
        instance_id, attempt_no = parse_attempt_key(key)
        return self.attempt(instance_id, attempt_no)


def attempt_key(instance_id: str, attempt_no: int) -> str:
    """``<instance_id>/<attempt_no>``: the attempt's path below ``attempts/``."""
    return f"{instance_id}/{attempt_no}"


def parse_attempt_key(key: str) -> tuple[str, int]:
    """Raises ValueError for anything that is not ``<instance_id>/<attempt_no>``."""
    instance_id, sep, attempt_text = key.rpartition("/")
    if not sep or not instance_id or "/" in instance_id or instance_id.startswith("."):
        raise ValueError(f"not an attempt key: {key!r}")
    if not attempt_text.isdigit() or int(attempt_text) < 1:
        raise ValueError(f"not an attempt key: {key!r}")
    return instance_id, int(attempt_text)


def write_atomically(
    path: Path, data: bytes, *, durable: bool, mode: int = 0o600, also: Path | None = None
) -> None:
    """Write a temporary file beside ``path`` and rename it over: readers see all or nothing.

    ``durable`` adds an fsync before the rename, for files that must survive a machine crash.
    ``also`` gives the same file a second name in the same directory, complete before ``path``
    appears: a hard link costs a directory entry, where a second file would cost an inode
    (and creating an inode is, on some file systems, dearer than everything else an attempt
    does).
    """
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    if also is not None:
        second = also.with_name(f".{also.name}.{os.getpid()}.tmp")
        try:
            os.link(temporary, second)
        except FileExistsError:  # left by a write this process's pid made before a crash
            remove_quietly(second)
            os.link(temporary, second)
        os.replace(second, also)
    os.replace(temporary, path)


def write_json_atomically(path: Path, value: jsontypes.JSONObject, *, durable: bool) -> None:
    write_atomically(path, json.dumps(value, separators=(",", ":")).encode(), durable=durable)


def read_json_object(path: Path) -> jsontypes.JSONObject | None:
    """The JSON object in ``path``, or None when the file does not exist.

    Raises ValueError when the file holds something else: files here are written atomically,
    so a malformed one is damage worth hearing about, not a race.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        value = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{path}: expected a JSON object")
    return value


def create_exclusively(path: Path, data: bytes) -> bool:
    """Create ``path`` holding ``data`` unless it exists; True when this call created it."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return False
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
    return True


def remove_quietly(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
