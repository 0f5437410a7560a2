"""Starting the task's own process, and the capped log its output goes to.

The task runs in its own process group, so that one signal reaches everything it started. A
shell command runs as ``/bin/sh -c``; a Python callable runs in a child forked from the worker,
which is fast (no new interpreter) at the price of inheriting the worker's loaded modules.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import io
import json
import os
import signal
import subprocess
import sys
import threading
import traceback
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import NoReturn

from veritask.execution import cgroups, layout, port, procfs, task_user, wire

#: ``/bin/sh`` exits 127 when the command is not found and 126 when it cannot be executed.
SHELL_START_ERROR_CODES = frozenset({126, 127})
#: The worker's own lines in the task log are capped apart from the task's output.
NOTE_BUDGET_BYTES = 64 * 1024
#: What a secret's value is written as in the log, and the shortest value that is masked
#: (masking a shorter one would hide common words and tell what the secret is).
MASK = b"***"
MASK_MIN_LENGTH = 4
#: How much of the end of a failed task's output becomes its attempt's ``error_message``: the
#: last lines (a traceback's exception and frames, a command's last complaint), bounded so
#: that a report stays small.
ERROR_TAIL_BYTES = 4096
ERROR_TAIL_LINES = 20


class LogSink:
    """The attempt's log: the task's stdout and stderr, then the worker's notes.

    The task's output is capped at ``cap_bytes``: past it, one marker line is written and the
    rest is read and dropped, so the task never blocks on a full pipe and keeps running. The
    worker's notes (rejected events, delivery trouble) have a budget of their own, so that a
    chatty task cannot hide them.
    """

    def __init__(self, path: Path, *, cap_bytes: int) -> None:
        self.path = path
        # Created on the first byte: a task that prints nothing costs no file (on a busy
        # file system, creating one costs more than running ``true``). Readers take a
        # missing log for an empty one.
        self._fd: int | None = None
        self._cap = cap_bytes
        # A restarted worker appends: what is already there counts against the cap.
        try:
            self._written = path.stat().st_size
        except FileNotFoundError:
            self._written = 0
        self._truncated = self._written >= cap_bytes
        self._dropped = 0
        self._notes_written = 0
        self._lock = threading.Lock()
        #: The secrets' values to mask, longest first, and the output held back because its
        #: end may be the start of one of them (a value split across two reads).
        self._masked: tuple[bytes, ...] = ()
        self._held = b""
        #: The last bytes of the task's output, masked, kept past the log cap too: the end of
        #: the output is where a failure says why.
        self._tail = bytearray()

    @property
    def dropped_bytes(self) -> int:
        return self._dropped

    def mask(self, values: Iterable[str]) -> None:
        """From now on, write each of these values (of 4 characters or more) as ``***``:
        in the task's output, wherever the reads that carry it split it, and in the notes."""
        found = {value.encode() for value in values if len(value) >= MASK_MIN_LENGTH}
        with self._lock:
            self._masked = tuple(sorted(found, key=len, reverse=True))

    def write_output(self, data: bytes) -> None:
        with self._lock:
            if self._masked:
                data = self._mask_held(data)
            self._keep_tail(data)
            self._write_capped(data)

    def end_output(self) -> None:
        """The task's output ended: what was held back for masking is written."""
        with self._lock:
            held, self._held = self._held, b""
            self._keep_tail(held)
            self._write_capped(held)

    def error_tail(self) -> str:
        """The last lines of the task's output (at most 20 lines, 4 KiB), secrets masked;
        empty when it wrote nothing."""
        with self._lock:
            tail = bytes(self._tail)
        body = tail.rstrip(b"\n")
        if len(tail) == ERROR_TAIL_BYTES and b"\n" in body:
            tail = body[body.index(b"\n") + 1 :]  # the first line was cut: drop its end
        lines = tail.decode(errors="replace").rstrip().splitlines()
        return "\n".join(lines[-ERROR_TAIL_LINES:])

    def _keep_tail(self, data: bytes) -> None:
        self._tail += data[-ERROR_TAIL_BYTES:]
        del self._tail[:-ERROR_TAIL_BYTES]

    def _mask_held(self, data: bytes) -> bytes:
        """``data`` after the held-back bytes, masked; the tail that could begin a value is
        held back in turn, so that no part of a value is written before its end is known."""
        text = self._held + data
        for value in self._masked:
            text = text.replace(value, MASK)
        keep = 0
        for value in self._masked:
            for size in range(min(len(value) - 1, len(text)), keep, -1):
                if text.endswith(value[:size]):
                    keep = size
                    break
        self._held = text[len(text) - keep :] if keep else b""
        return text[: len(text) - keep]

    def _write_capped(self, data: bytes) -> None:
        if not data:
            return
        if self._truncated:
            self._dropped += len(data)
            return
        room = self._cap - self._written
        if len(data) <= room:
            self._write(data)
            self._written += len(data)
            return
        self._write(data[:room])
        self._written += room
        self._dropped += len(data) - room
        self._truncated = True
        marker = f"\n[veritask-worker] log cap of {self._cap} bytes reached; "
        self._write((marker + "further output is discarded\n").encode())

    def note(self, text: str) -> None:
        stamp = wire.format_time(wire.utc_now())
        body = text.encode(errors="replace")
        with self._lock:
            for value in self._masked:
                body = body.replace(value, MASK)
            line = f"[veritask-worker {stamp}] ".encode() + body[:1000] + b"\n"
            if self._notes_written + len(line) > NOTE_BUDGET_BYTES:
                return
            self._notes_written += len(line)
            self._write(line)

    def _write(self, data: bytes) -> None:
        if self._fd is None:
            flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
            self._fd = os.open(self.path, flags, 0o600)
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]

    def close(self) -> None:
        self.end_output()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class StartFailed(Exception):
    """The task's process could not be created at all."""


@dataclass
class TaskProcess:
    pid: int
    pgid: int
    start_ticks: int
    started_at: datetime
    #: Readable once the task's leader has ended (before it is reaped).
    pidfd: int
    #: The read end of the task's stdout and stderr, non-blocking.
    output_fd: int
    #: Callables only: receives b"S" once the target was imported and is about to be called.
    confirmation_fd: int | None
    #: Held so that subprocess never reaps the child behind the worker's back.
    popen: subprocess.Popen[bytes] | None
    #: The cgroup the task was born in (this process is not in it), if any.
    cgroup: Path | None = None


def start(
    task: port.TaskSpec,
    *,
    env: Mapping[str, str],
    workdir: Path,
    output_path: Path,
    cgroup: Path | None = None,
    user: task_user.TaskUser | None = None,
) -> TaskProcess:
    """Start the task in a new process group, and in ``cgroup`` when given (the task is
    born in it: this process steps in for the start). Raises StartFailed when no process
    could be made.

    With ``user``, the task's process takes that user's groups, gid and uid before its exec,
    and a callable runs in a fresh interpreter (:mod:`call_task`) rather than in a fork of
    this process, whose memory holds the platform's settings.

    The worker must be single-threaded when it calls this: a callable forks the worker.
    """
    entered = cgroup is not None and cgroups.enter(cgroup)
    left = True
    try:
        process = _start(task, env=env, workdir=workdir, output_path=output_path, user=user)
    finally:
        if entered and cgroup is not None:
            left = cgroups.leave(cgroup)
    # Stuck inside (the kernel refused the way back), this process must not kill the cgroup.
    process.cgroup = cgroup if entered and left else None
    return process


def _start(
    task: port.TaskSpec,
    *,
    env: Mapping[str, str],
    workdir: Path,
    output_path: Path,
    user: task_user.TaskUser | None,
) -> TaskProcess:
    read_fd, write_fd = os.pipe()
    popen: subprocess.Popen[bytes] | None = None
    confirmation_fd: int | None = None
    try:
        match task:
            case port.ShellCommand(command=command):
                popen = _popen(["/bin/sh", "-c", command], env, workdir, write_fd, read_fd, user)
                pid = popen.pid
            case port.PythonCallable() if user is not None:
                confirmation_fd, confirm_write_fd = os.pipe()
                call_fd = _call_file(task, output_path)
                try:
                    interpreter = [sys.executable, "-m", "veritask.execution.call_task"]
                    popen = _popen(
                        [*interpreter, str(call_fd), str(confirm_write_fd)],
                        env,
                        workdir,
                        write_fd,
                        read_fd,
                        user,
                        pass_fds=(call_fd, confirm_write_fd),
                    )
                except StartFailed:
                    os.close(confirmation_fd)
                    raise
                finally:
                    os.close(call_fd)
                    os.close(confirm_write_fd)
                pid = popen.pid
            case port.PythonCallable():
                confirmation_fd, confirm_write_fd = os.pipe()
                pid = os.fork()
                if pid == 0:
                    _run_callable(task, env, workdir, output_path, write_fd, confirm_write_fd)
                os.close(confirm_write_fd)
                # Both sides set the group, so that a signal sent right now reaches the child.
                with contextlib.suppress(PermissionError, ProcessLookupError):
                    os.setpgid(pid, pid)
            case port.SqlStatement():
                os.close(read_fd)
                raise StartFailed("a SQL statement runs on a SQL engine (executor: sql), not here")
            case port.WaitCondition():
                os.close(read_fd)
                raise StartFailed("a wait is checked by the scheduler (executor: wait), not here")
    finally:
        os.close(write_fd)
    started_at = wire.utc_now()
    pidfd = os.pidfd_open(pid)
    os.set_blocking(read_fd, False)
    # The child cannot be reaped before we wait for it, so its stat is there even if it ended.
    ticks = procfs.start_ticks(pid) or 0
    return TaskProcess(
        pid=pid,
        pgid=pid,
        start_ticks=ticks,
        started_at=started_at,
        pidfd=pidfd,
        output_fd=read_fd,
        confirmation_fd=confirmation_fd,
        popen=popen,
    )


def _popen(
    command: list[str],
    env: Mapping[str, str],
    workdir: Path,
    output_fd: int,
    read_fd: int,
    user: task_user.TaskUser | None,
    pass_fds: tuple[int, ...] = (),
) -> subprocess.Popen[bytes]:
    """The task's process, in a group of its own; as ``user`` when given (its groups, gid and
    uid are set in the child before the exec)."""
    try:
        return subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=output_fd,
            stderr=output_fd,
            env=dict(env),
            cwd=workdir,
            process_group=0,
            pass_fds=pass_fds,
            user=None if user is None else user.uid,
            group=None if user is None else user.gid,
            extra_groups=None if user is None else list(user.groups),
        )
    except (OSError, ValueError) as exc:  # ValueError: an environment it refuses
        os.close(read_fd)
        who = "" if user is None else f" as {user.name}"
        raise StartFailed(f"could not start {command[0]}{who} in {workdir}: {exc}") from exc


def _call_file(task: port.PythonCallable, output_path: Path) -> int:
    """What a callable run in a fresh interpreter calls, in an anonymous file it inherits."""
    fd = os.memfd_create("veritask-call", os.MFD_CLOEXEC)
    payload = {
        "module": task.module,
        "function": task.function,
        "params": dict(task.params),
        "output": str(output_path),
    }
    view = memoryview(json.dumps(payload).encode())
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _run_callable(
    task: port.PythonCallable,
    env: Mapping[str, str],
    workdir: Path,
    output_path: Path,
    output_fd: int,
    confirm_fd: int,
) -> NoReturn:
    """The forked child: become a plain Python process for the task, call it, never return."""
    status = 1
    try:
        os.setpgid(0, 0)
        _reset_signals()
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(output_fd, 1)
        os.dup2(output_fd, 2)
        # Nothing of the worker's (spool, pidfds, the slot pipe, its lock) stays open in the task.
        os.closerange(3, confirm_fd)
        os.closerange(confirm_fd + 1, os.sysconf("SC_OPEN_MAX"))
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), line_buffering=True)
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), line_buffering=True)
        os.chdir(workdir)
        os.environ.clear()
        os.environ.update(env)
        # As a fresh interpreter would, honour the task's PYTHONPATH for its own modules.
        sys.path[:0] = [entry for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry]
        importlib.invalidate_caches()
        status = call_target(
            module=task.module,
            function=task.function,
            params=task.params,
            output_path=output_path,
            confirm_fd=confirm_fd,
            in_place=False,
        )
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(status)


def call_target(
    *,
    module: str,
    function: str,
    params: Mapping[str, object],
    output_path: Path,
    confirm_fd: int,
    in_place: bool,
) -> int:
    """Import ``module``, say so on ``confirm_fd`` (b"S"), call ``function(**params)`` and
    leave its result as JSON in ``output_path``; returns the process's exit status.

    ``in_place`` writes the output into the file that is there (a task running as another
    user may write that file, not the directory around it); otherwise it is renamed into place.
    """
    status = 1
    try:
        try:
            target = functools.reduce(getattr, function.split("."), importlib.import_module(module))
            if not callable(target):
                raise TypeError(f"{module}:{function} is not callable")
        except BaseException:
            traceback.print_exc()
            raise SystemExit(1) from None
        os.write(confirm_fd, b"S")
        os.close(confirm_fd)
        result = target(**params)
        if result is not None:
            encoded = json.dumps(result).encode()
            if in_place:
                output_path.write_bytes(encoded)
            else:
                layout.write_atomically(output_path, encoded, durable=False)
        status = 0
    except SystemExit as exc:
        status = _exit_status(exc.code)
    except BaseException:
        traceback.print_exc()
        status = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            status = status or 1
    return status


def _reset_signals() -> None:
    """Undo what the worker (and the supervisor before it) set up, as a new interpreter has."""
    signal.set_wakeup_fd(-1)
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD, signal.SIGQUIT):
        signal.signal(signum, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())


def _exit_status(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def decode_wait_status(status: int) -> tuple[int | None, int | None]:
    """``(exit_code, signal)`` from a waitpid status: exactly one of them is set."""
    if os.WIFSIGNALED(status):
        return None, os.WTERMSIG(status)
    return os.waitstatus_to_exitcode(status), None
