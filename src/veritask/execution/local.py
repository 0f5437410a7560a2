"""The local executor: the embedded default engine, attempts as processes on this machine.

Submitting writes the attempt directory (atomically, with its spec) and tells the supervisor
daemon, which forks a worker when a slot is free. Describing reads the disk and /proc, and
works when the supervisor is down. See docs/executors.md for the whole design.

The external id is ``local:<instance_id>/<attempt_no>``. It names the attempt, not a process:
an attempt waiting for a slot has no process yet, and the id must lead to the attempt
directory without asking anyone. The processes are identified inside it by pid *and* start
time, so a reused pid is never taken for ours.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import weakref
from collections.abc import Iterator
from datetime import datetime, timedelta
from enum import StrEnum
from pathlib import Path

from veritask.core import jsontypes
from veritask.core.states import PROCESSES_ENDED
from veritask.execution import (
    cgroups,
    errors,
    escalation,
    layout,
    port,
    procfs,
    records,
    supervisor,
    task_user,
    wire,
)
from veritask.execution import worker as worker_module

log = logging.getLogger(__name__)

EXTERNAL_ID_PREFIX = "local:"
#: Unix socket addresses are limited to 108 bytes; longer paths go through /proc/self/fd.
_SOCKET_PATH_LIMIT = 100
_PING_INTERVAL = 0.01


def external_id(instance_id: str, attempt_no: int) -> str:
    return EXTERNAL_ID_PREFIX + layout.attempt_key(instance_id, attempt_no)


class Source(StrEnum):
    """Where the local executor's observations come from."""

    EXIT_RECORD = "exit_record"
    """The exit record the worker wrote when the task ended."""
    PROCESS_TABLE = "process_table"
    """The operating system's process table (/proc), checked by pid and start time."""
    SUPERVISOR = "supervisor"
    """The local supervisor's queue."""
    ATTEMPT_DIR = "attempt_dir"
    """The attempt directory on disk: its presence, its spec, its identity files."""


class LocalExecutor:
    """Runs attempts as local processes under a supervisor that outlives this process.

    ``home`` is VERITASK_HOME; the executor keeps its files in ``home/executor``. ``slots``
    bounds the attempts that run at once (the others wait, and ``describe`` says pending); it
    is applied to the supervisor whenever this executor starts or finds it.

    Tasks run as ``VERITASK_TASK_USER`` (by default ``nobody`` when this process is root,
    else this process's user; ``task_user.py``); a setting that cannot be used raises
    ``task_user.TaskUserError`` here, when the platform starts.
    """

    def __init__(
        self,
        *,
        home: Path,
        slots: int | None = None,
        idle_exit_after: timedelta = timedelta(minutes=10),
        request_timeout: timedelta = timedelta(seconds=5),
        start_timeout: timedelta = timedelta(seconds=15),
    ) -> None:
        self.home = layout.ExecutorHome(home.resolve() / "executor")
        self.slots = slots or os.cpu_count() or 1
        if self.slots < 1:
            raise ValueError("slots must be 1 or more")
        self._idle_exit = idle_exit_after.total_seconds()
        self._request_timeout = request_timeout.total_seconds()
        #: Each thread's connection to the supervisor, with the pid that opened it.
        self._connections = threading.local()
        self._start_timeout = start_timeout.total_seconds()
        self.task_user = task_user.resolve(os.environ)
        veritask_home = self.home.path.parent
        veritask_home.mkdir(parents=True, exist_ok=True, mode=0o700)
        for directory in (self.home.path, self.home.attempts):
            directory.mkdir(exist_ok=True, mode=0o700)
        if self.task_user is not None:
            # The task's group passes through these to its attempt directory; nothing more.
            task_user.check_reachable(veritask_home, self.task_user)
            task_user.open_passage(
                [veritask_home, self.home.path, self.home.attempts], self.task_user
            )
            problem = task_user.python_problem(Path(sys.executable), self.task_user)
            if problem is not None:
                log.warning("%s", problem)
        else:
            task_user.open_passage([self.home.path, self.home.attempts], None)

    # --- the port -----------------------------------------------------------------------

    def submit(self, *, spec: port.AttemptSpec) -> port.Submission:
        with _engine_errors():
            return self._submit(spec)

    def describe(self, *, external_id: str) -> port.Observation:
        with _engine_errors():
            return self._describe(external_id)

    def cancel(self, *, external_id: str) -> None:
        with _engine_errors():
            self._cancel(external_id)

    def cleanup(self, *, external_id: str) -> None:
        with _engine_errors():
            self._cleanup(external_id)

    def _submit(self, spec: port.AttemptSpec) -> port.Submission:
        attempt = self.home.attempt(spec.instance_id, spec.attempt_no)
        created = self._create_attempt(attempt, spec)
        if not created:
            existing = records.read_spec(attempt)
            if existing.attempt_token != spec.attempt_token:
                raise errors.ExecutorError(
                    f"attempt {spec.instance_id}/{spec.attempt_no} was submitted before with "
                    "another attempt token",
                    retryable=False,
                )
        key = layout.attempt_key(spec.instance_id, spec.attempt_no)
        self._request_with_start({"op": "submit", "attempt": key})
        return port.Submission(external_id(spec.instance_id, spec.attempt_no), created=created)

    def _describe(self, external_id: str) -> port.Observation:
        attempt = self._attempt_of(external_id)
        observe = _Observer(external_id)
        if not attempt.path.is_dir():
            return observe.make(port.EngineState.NOT_FOUND, Source.ATTEMPT_DIR)
        worker = records.read_process_record(attempt.worker_record)
        # Liveness before the exit record: a worker writes the record, then ends. Read in this
        # order, "gone and no record" cannot be a record written between the two reads.
        worker_alive = worker is not None and procfs.is_running(worker.pid, worker.start_ticks)
        exit_record = records.read_exit_record(attempt)
        task = records.read_process_record(attempt.task_record)
        if worker is not None:
            observe.engine_id = worker.engine_id
            stopped = worker_alive and procfs.is_stopped(worker.pid, worker.start_ticks)
            observe.details.update(
                worker_pid=worker.pid, worker_alive=worker_alive, worker_stopped=stopped
            )
        if task is not None:
            observe.started_at = task.started_at
            observe.details.update(task_pid=task.pid, task_pgid=task.pgid)
        if exit_record is not None:
            return observe.ended(exit_record, attempt)
        if worker is None:
            return self._describe_waiting(observe, attempt)
        if worker_alive and task is None:
            return observe.make(port.EngineState.PENDING, Source.PROCESS_TABLE)
        task_alive = task is not None and escalation.task_alive(task, attempt)
        observe.details.update(exit_record=False, task_alive=task_alive)
        if task_alive:
            if not worker_alive:
                # The worker died and its task runs on: nobody will write its exit record.
                observe.details["orphaned"] = True
            return observe.make(port.EngineState.RUNNING, Source.PROCESS_TABLE)
        if task is not None:
            # The task's group ended and no exit record says how: its worker is gone, frozen
            # (it cannot reap and record), or about to write it. Not running, not ended.
            observe.details[PROCESSES_ENDED] = True
        return observe.make(port.EngineState.UNKNOWN, Source.PROCESS_TABLE)

    def _cancel(self, external_id: str) -> None:
        attempt = self._attempt_of(external_id)
        if not attempt.path.is_dir():
            raise errors.AttemptNotFound(external_id)
        if attempt.exit_record.exists():
            return
        layout.create_exclusively(attempt.cancel_request, wire.format_time(wire.utc_now()).encode())
        # Pinned, a warm worker cannot finish this attempt and take another between the check
        # for its exit record and the signal: the signal is for this attempt or for no one.
        with worker_module.pin_worker(attempt):
            if attempt.exit_record.exists():
                return
            worker = records.read_process_record(attempt.worker_record)
            worker_acts = worker is not None and procfs.signal_process(
                worker.pid, worker.start_ticks, signal.SIGTERM
            )
        if worker is None:
            key = external_id.removeprefix(EXTERNAL_ID_PREFIX)
            self._request_with_start({"op": "cancel", "attempt": key})
            return
        # The worker stops the task's group itself, unless it is gone, frozen or stuck: then,
        # past its grace period, the group is stopped from here (escalation.py).
        escalation.stop_task_group(attempt, worker_acts=worker_acts)

    def _cleanup(self, external_id: str) -> None:
        attempt = self._attempt_of(external_id)
        if not attempt.path.is_dir():
            return
        observation = self._describe(external_id)
        if observation.engine_state in (port.EngineState.PENDING, port.EngineState.RUNNING):
            raise errors.ExecutorError(
                f"{external_id} is {observation.engine_state}: cancel it before cleanup",
                retryable=True,
            )
        # A worker may still be delivering events; the platform has what it needs now. A warm
        # worker that moved on to another attempt no longer holds this one's lock: spared.
        with worker_module.pin_worker(attempt):
            worker = records.read_process_record(attempt.worker_record)
            if worker is not None and worker_module.is_worked_on(attempt):
                _kill_and_wait(worker, timeout=self._request_timeout)
        cgroup = cgroups.locate(attempt.path)
        if cgroup is not None:
            cgroups.remove(cgroup)  # left by a worker that died; empty, as describe said
        self.home.trash.mkdir(exist_ok=True)
        doomed = self.home.trash / uuid.uuid4().hex
        try:
            os.rename(attempt.path, doomed)
        except FileNotFoundError:
            return  # cleaned up concurrently
        shutil.rmtree(doomed, ignore_errors=True)
        with contextlib.suppress(OSError):
            attempt.path.parent.rmdir()  # only when no other attempt of the instance is left

    # --- the supervisor -----------------------------------------------------------------

    def ensure_supervisor(self) -> int:
        """Make sure a supervisor serves this home, starting one if needed; returns its pid.

        The start lock makes concurrent callers (threads or processes) start one supervisor. A
        supervisor that does not answer may be exiting (it removes its socket first): the new
        one waits for the old one's pidfile lock, so launching is right in that case too.
        """
        with self._start_lock():
            replaced = None
            with contextlib.suppress(OSError, errors.ExecutorError):
                answer = self._request({"op": "ping"})
                replaced = self._retire_if_stale(answer)
                if replaced is None:
                    return self._configure_running_supervisor(answer)
            self._launch_supervisor()
            give_up_at = time.monotonic() + self._start_timeout
            while True:
                try:
                    answer = self._request({"op": "ping"})
                    if answer.get("pid") != replaced:
                        return self._configure_running_supervisor(answer)
                    # The one we replaced answered still: it is finishing its exit.
                    raise errors.ExecutorError("the replaced supervisor is still exiting")
                except (OSError, errors.ExecutorError) as exc:
                    if time.monotonic() >= give_up_at:
                        raise errors.SupervisorUnavailable(
                            f"the supervisor did not answer within {self._start_timeout}s "
                            f"({exc}); see {self.home.supervisor_log}"
                        ) from exc
                time.sleep(_PING_INTERVAL)

    def replace_stale_supervisor(self) -> str | None:
        """Replace the supervisor that answers now if it was started with other settings
        than this process has (an earlier ``up`` with another PYTHONPATH, other secrets):
        its workers would give new attempts the old ones. Returns the notice, also logged as a
        warning; None when no supervisor answers or its settings are ours. The next one is
        started at once. Running attempts carry on, and hold their slots in the next one."""
        with self._start_lock():
            try:
                answer = self._request({"op": "ping"})
            except (OSError, errors.ExecutorError):
                return None
            notice = self._describe_stale(answer)
        if notice is not None:
            self.ensure_supervisor()
        return notice

    def _describe_stale(self, answer: jsontypes.JSONObject) -> str | None:
        theirs = answer.get("settings")
        differ = supervisor.settings_differ(
            supervisor.settings_of(supervisor.worker_environment(os.environ)),
            theirs if isinstance(theirs, dict) else {},
        )
        if not differ:
            return None
        shown = ", ".join(differ[:8]) + (f" and {len(differ) - 8} more" if len(differ) > 8 else "")
        return (
            f"the local supervisor (pid {answer.get('pid')}) was started with other settings"
            f" ({shown}): replacing it, so that new attempts get this process's settings; its"
            f" {answer.get('running', 0)} running attempts finish as they started"
        )

    def _retire_if_stale(self, answer: jsontypes.JSONObject) -> int | None:
        """Ask a supervisor started with other settings to exit (saying so); its pid, or None
        when its settings are ours. Called under the start lock."""
        notice = self._describe_stale(answer)
        if notice is None:
            return None
        log.warning(notice)
        self._request({"op": "shutdown"})
        self._drop_connection()
        pid = answer.get("pid")
        return pid if isinstance(pid, int) else -1

    def shutdown_supervisor(self) -> None:
        """Ask the supervisor to exit. Running workers carry on; queued attempts wait on disk."""
        with contextlib.suppress(OSError):
            self._request({"op": "shutdown"})
        self._drop_connection()

    def supervisor_pid(self) -> int | None:
        """The pid of the supervisor that answers now, if one does."""
        status = self.supervisor_status()
        pid = None if status is None else status.get("pid")
        return pid if isinstance(pid, int) else None

    def supervisor_status(self) -> jsontypes.JSONObject | None:
        """What the supervisor that answers now says of itself (``pid``, ``slots``, attempts
        ``queued`` and ``running``, ``idle_workers`` waiting warm), or None when none does."""
        try:
            return self._request({"op": "ping"})
        except (OSError, errors.ExecutorError):
            return None

    def _configure_running_supervisor(self, answer: jsontypes.JSONObject) -> int:
        if answer.get("slots") != self.slots:
            self._request({"op": "configure", "slots": self.slots})
        pid = answer.get("pid")
        if not isinstance(pid, int):
            raise errors.ExecutorError("the supervisor's ping answer has no pid", retryable=True)
        return pid

    @contextlib.contextmanager
    def _start_lock(self) -> Iterator[None]:
        fd = os.open(self.home.start_lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _launch_supervisor(self) -> None:
        command = [
            sys.executable,
            "-m",
            "veritask.execution.supervisor",
            "--home",
            str(self.home.path),
            "--slots",
            str(self.slots),
            "--idle-exit-seconds",
            str(self._idle_exit),
            "--environment-on-stdin",
        ]
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
        log_fd = os.open(self.home.supervisor_log, flags, 0o600)
        try:
            # Started with the environment every task gets anyway, its /proc/<pid>/environ
            # shows no secret; what its workers need of the rest comes on its stdin.
            launcher = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=log_fd,
                stderr=log_fd,
                cwd=self.home.path,
                start_new_session=True,
                env=supervisor.launch_environment(os.environ),
            )
        finally:
            os.close(log_fd)
        handed = json.dumps(supervisor.worker_environment(os.environ)).encode()
        # Only the intermediate process of the double fork is our child; it exits at once.
        launcher.communicate(handed, timeout=self._start_timeout)

    def _request_with_start(self, request: jsontypes.JSONObject) -> jsontypes.JSONObject:
        try:
            return self._request(request)
        except OSError:
            self.ensure_supervisor()
        try:
            return self._request(request)
        except OSError as exc:
            raise errors.SupervisorUnavailable(f"the supervisor did not answer: {exc}") from exc

    def _request(self, request: jsontypes.JSONObject) -> jsontypes.JSONObject:
        """One request, one answer. Raises OSError when no supervisor answers.

        Each thread keeps its connection for its next request (a submission costs less
        without a connect and an accept). A kept connection that fails may only mean that the
        supervisor was replaced since: the request is tried once more on a fresh one, which
        is safe because every request is idempotent.
        """
        line = json.dumps(request).encode() + b"\n"
        kept = self._kept_connection()
        if kept is not None:
            try:
                return self._parse_reply(request, self._exchange(kept, line))
            except OSError:
                self._drop_connection()
        connection = self._connect()
        try:
            answer = self._exchange(connection, line)
        except BaseException:
            connection.close()
            raise
        self._connections.value = _KeptConnection(connection)
        return self._parse_reply(request, answer)

    def _kept_connection(self) -> socket.socket | None:
        kept: _KeptConnection | None = getattr(self._connections, "value", None)
        if kept is None:
            return None
        if kept.pid != os.getpid():  # inherited across a fork: the parent's, not ours to use
            self._connections.value = None
            return None
        return kept.connection

    def _drop_connection(self) -> None:
        kept = self._kept_connection()
        self._connections.value = None
        if kept is not None:
            kept.close()

    @staticmethod
    def _exchange(connection: socket.socket, line: bytes) -> bytes:
        connection.sendall(line)
        answer = bytearray()
        while b"\n" not in answer:
            chunk = connection.recv(65536)
            if not chunk:
                raise ConnectionResetError("the supervisor closed the connection")
            answer += chunk
        return bytes(answer)

    @staticmethod
    def _parse_reply(request: jsontypes.JSONObject, answer: bytes) -> jsontypes.JSONObject:
        reply = json.loads(answer)
        if not isinstance(reply, dict) or reply.get("ok") is not True:
            error = reply.get("error") if isinstance(reply, dict) else reply
            raise errors.ExecutorError(f"the supervisor refused {request}: {error}")
        return reply

    def _connect(self) -> socket.socket:
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        connection.settimeout(self._request_timeout)
        path = str(self.home.socket)
        try:
            if len(path) <= _SOCKET_PATH_LIMIT:
                connection.connect(path)
            else:
                directory_fd = os.open(self.home.path, os.O_PATH | os.O_CLOEXEC)
                try:
                    connection.connect(f"/proc/self/fd/{directory_fd}/{self.home.socket.name}")
                finally:
                    os.close(directory_fd)
        except BaseException:
            connection.close()
            raise
        return connection

    # --- attempts -----------------------------------------------------------------------

    def _create_attempt(self, attempt: layout.AttemptDir, spec: port.AttemptSpec) -> bool:
        """Create the attempt directory with its spec in one rename; False if it existed."""
        if attempt.path.exists():
            return False
        payload = json.dumps(records.encode_spec(spec)).encode()
        for _ in range(3):  # a concurrent cleanup may remove the instance directory under us
            attempt.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            try:
                staging = Path(tempfile.mkdtemp(prefix=".submit-", dir=attempt.path.parent))
            except FileNotFoundError:
                continue
            try:
                # Not fsync-ed: after a power cut a lost attempt reads "not found", and the
                # reconciler submits it again (docs/scheduling.md, section 4).
                layout.create_exclusively(staging / attempt.spec.name, payload)
                os.rename(staging, attempt.path)
                return True
            except OSError as exc:
                if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
                    return False
                raise
            finally:
                shutil.rmtree(staging, ignore_errors=True)
        raise errors.ExecutorError(f"could not create {attempt.path}", retryable=True)

    def _attempt_of(self, external_id: str) -> layout.AttemptDir:
        if not external_id.startswith(EXTERNAL_ID_PREFIX):
            raise errors.ExecutorError(f"not a local external id: {external_id!r}")
        try:
            return self.home.attempt_for_key(external_id.removeprefix(EXTERNAL_ID_PREFIX))
        except ValueError as exc:
            raise errors.ExecutorError(f"not a local external id: {external_id!r}") from exc

    def _describe_waiting(self, observe: _Observer, attempt: layout.AttemptDir) -> port.Observation:
        """No worker yet: the attempt waits in the supervisor's queue (or on disk for it)."""
        key = observe.external_id.removeprefix(EXTERNAL_ID_PREFIX)
        try:
            answer = self._request({"op": "status", "attempt": key})
        except OSError:
            # No supervisor: start one, which finds the attempt on disk and queues it.
            observe.details["supervisor_running"] = False
            try:
                self.ensure_supervisor()
                observe.details["supervisor_restarted"] = True
            except errors.ExecutorError as exc:
                observe.details["supervisor_error"] = str(exc)
            return observe.make(port.EngineState.PENDING, Source.ATTEMPT_DIR)
        position = answer.get("position")
        observe.details["queue_position"] = position if isinstance(position, int) else None
        return observe.make(port.EngineState.PENDING, Source.SUPERVISOR)


class _KeptConnection:
    """A thread's connection to the supervisor, closed when the thread (or executor) that
    kept it is gone."""

    def __init__(self, connection: socket.socket) -> None:
        self.connection = connection
        self.pid = os.getpid()
        # A finalizer holds the socket, not ``__del__``: when the executor is collected in a
        # reference cycle, the socket might otherwise be finalized first and left open.
        weakref.finalize(self, _let_go, connection, self.pid)


def _let_go(connection: socket.socket, pid: int) -> None:
    if pid == os.getpid():
        connection.close()
    else:
        connection.detach()  # the parent's descriptor: leave it to the parent


class _Observer:
    """Gathers the evidence of one describe call, then makes the observation."""

    def __init__(self, external_id: str) -> None:
        self.external_id = external_id
        self.engine_id: str | None = None
        self.started_at: datetime | None = None
        self.details: dict[str, port.DetailValue] = {}

    def make(self, state: port.EngineState, source: Source) -> port.Observation:
        return port.Observation(
            external_id=self.external_id,
            engine_state=state,
            source=source,
            engine_id=self.engine_id,
            started_at=self.started_at,
            details=self.details,
        )

    def ended(self, record: records.ExitRecord, attempt: layout.AttemptDir) -> port.Observation:
        category = record.error_category
        succeeded = category in (port.ErrorCategory.NONE, port.ErrorCategory.SKIPPED)
        evidence = record.completed["evidence"]
        self.details.update(
            exit_record=True,
            signal=record.signal,
            commit_marker=evidence["commit_marker"],
            log_path=str(attempt.log),
            completed_event_id=record.completed["event_id"],
        )
        return port.Observation(
            external_id=self.external_id,
            engine_state=port.EngineState.SUCCEEDED if succeeded else port.EngineState.FAILED,
            source=Source.EXIT_RECORD,
            engine_id=self.engine_id,
            exit_code=record.exit_code,
            error_category=category,
            started_at=record.started_at,
            ended_at=record.ended_at,
            details=self.details,
        )


@contextlib.contextmanager
def _engine_errors() -> Iterator[None]:
    """Translate what the disk, /proc and the socket raise into ExecutorError, once."""
    try:
        yield
    except errors.ExecutorError:
        raise
    except OSError as exc:
        raise errors.ExecutorError(f"local engine: {exc}", retryable=True) from exc
    except ValueError as exc:  # a damaged file in an attempt directory, a garbled answer
        raise errors.ExecutorError(f"local engine: {exc}", retryable=False) from exc


def _kill_and_wait(process: records.ProcessRecord, *, timeout: float) -> None:
    try:
        pidfd = os.pidfd_open(process.pid)
    except ProcessLookupError:
        return
    try:
        if not procfs.is_running(process.pid, process.start_ticks):
            return
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        select.select([pidfd], [], [], timeout)  # readable once the process has ended
    except ProcessLookupError:
        return
    finally:
        os.close(pidfd)
