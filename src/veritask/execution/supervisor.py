"""The local supervisor: a small daemon that gives each attempt a worker, within its slots.

Why a daemon: a fresh Python interpreter per attempt costs tens of milliseconds; forking a
process that has already imported the worker costs about one. Why detached: attempts must
outlive the scheduler that submitted them, so the supervisor runs in its own session (double
fork), and each worker in a session of its own, so that not even the supervisor's end stops them.

Why warm workers: a fork, the copies of the pages parent and child then write, and the exit
cost more CPU than the worker's whole run of a short task. A worker done with an attempt (its
exit record written, its events delivered) tells the supervisor so on its control socket and
is given the next attempt instead of ending; at most ``slots`` wait idle, each for
``IDLE_WORKER_SECONDS`` (see worker.serve_supervisor for the worker's side).

It keeps no state that the disk does not also hold. An attempt directory with a spec, without a
``worker.json`` and without an exit record, is waiting to start: the supervisor scans for those
when it starts, so a submission made while no supervisor ran (or one that died) is not lost.

Protocol: a client connects to ``supervisor.sock``, sends one JSON line and reads one JSON line
back. ``{"op": "submit" | "cancel" | "status", "attempt": "<instance>/<n>"}``, ``{"op": "ping"}``,
``{"op": "configure", "slots": N}``, ``{"op": "shutdown"}``; answers carry ``"ok"``.

Settings: a worker takes its task's inherited environment and its secrets from the
supervisor's environment (``task_env``, ``secrets``), so the ping answers ``settings``: a short
digest of each setting the attempts depend on (:func:`settings_of`), never a value. A client
started with other settings replaces the supervisor (``LocalExecutor.ensure_supervisor``).
Nothing is lost in the replacement: the workers that run carry on, and the next supervisor
counts their attempts against its slots until they end (:meth:`Supervisor._adopt`).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import fcntl
import gc
import hashlib
import json
import os
import selectors
import signal
import socket
import sys
import time
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from veritask.core import jsontypes
from veritask.execution import (
    cgroups,
    layout,
    procfs,
    records,
    secrets,
    task_env,
    task_user,
    wire,
    worker,
)

#: How long a starting supervisor waits for the previous one to finish exiting.
LOCK_WAIT_SECONDS = 5.0
REQUEST_LIMIT_BYTES = 64 * 1024
#: How long a warm worker may wait for another attempt before it is let go.
IDLE_WORKER_SECONDS = 30.0
_STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}
#: How often an adopted attempt (run by an earlier supervisor's worker) is checked for its end.
ADOPTED_CHECK_SECONDS = 0.5
#: The names under which :func:`settings_of` lists the interpreter and its search path.
PYTHON_SETTING = "(python)"
#: The platform's settings a worker reads. The others (the database's URL, the key attempt
#: tokens are minted from, the admin token, connection URLs) never reach the supervisor.
WORKER_SETTINGS = frozenset(
    {
        task_env.PASSTHROUGH_ENV,
        cgroups.SETTING,
        worker.MAX_OUTPUT_SETTING,
        task_user.SETTING,
        secrets.FILE_ENV,
        secrets.PROVIDER_ENV,
    }
)


def worker_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """What the supervisor is given of its client's environment: every variable but the
    platform's own settings (``VERITASK_*``), of which only those a worker reads
    (:data:`WORKER_SETTINGS` and the secrets of ``VERITASK_SECRET_<NAME>``)."""
    return {
        name: value
        for name, value in environ.items()
        if not name.startswith(task_env.PLATFORM_PREFIX)
        or name in WORKER_SETTINGS
        or name.startswith(secrets.ENV_PREFIX)
    }


def launch_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment the supervisor's program is started with: only what every task is
    given anyway (``task_env.BASE_NAMES``, ``LC_*``). ``/proc/<pid>/environ`` shows this block
    to the supervisor's user for its whole life (and to every worker forked from it); the rest
    of :func:`worker_environment` reaches it on a pipe (:func:`receive_environment`)."""
    return {
        name: value
        for name, value in environ.items()
        if name in task_env.BASE_NAMES or name.startswith(task_env.BASE_PREFIXES)
    }


def receive_environment(stream: typing.BinaryIO) -> None:
    """Read the environment a client sent on ``stream`` (a JSON object) into ``os.environ``:
    the process's variables, not the block ``/proc/<pid>/environ`` shows."""
    handed = json.loads(stream.read())
    if not isinstance(handed, dict):
        raise ValueError("the environment handed to the supervisor is not a JSON object")
    os.environ.update({str(name): str(value) for name, value in handed.items()})


def settings_of(environ: Mapping[str, str]) -> dict[str, str]:
    """What an attempt takes from the environment of the process that runs the workers, each
    value as a short digest (a value itself never leaves the process): the environment a task
    inherits (``task_env.inherited``: PATH, PYTHONPATH, LC_*, the pass-through names), every
    platform setting (``VERITASK_*``: secrets and their providers among them) and the Python
    that runs the workers."""
    chosen = {
        name: value for name, value in environ.items() if name.startswith(task_env.PLATFORM_PREFIX)
    }
    # A bad pass-through list is a platform setting itself, among those above.
    with contextlib.suppress(task_env.TaskEnvError):
        chosen.update(task_env.inherited(environ))
    chosen[PYTHON_SETTING] = sys.executable
    return {
        name: hashlib.sha256(value.encode(errors="surrogateescape")).hexdigest()[:16]
        for name, value in sorted(chosen.items())
    }


def settings_differ(ours: Mapping[str, str], theirs: Mapping[str, object]) -> list[str]:
    """The names of the settings whose digests differ, or that only one side has."""
    return sorted(name for name in {*ours, *theirs} if ours.get(name) != theirs.get(name))


def log(message: str) -> None:
    """The supervisor's stderr is ``supervisor.log``."""
    print(
        f"{wire.format_time(wire.utc_now())} [{os.getpid()}] {message}", file=sys.stderr, flush=True
    )


@dataclass(eq=False)
class _Worker:
    """A worker process, seen from the supervisor's end of its control socket."""

    control: socket.socket
    identity: records.ProcessRecord
    #: ``workers/<pid>-<ticks>.json``; each attempt's ``worker.json`` is a link to it.
    record: Path
    #: The attempt it was given and has not finished with; None while it waits for one.
    key: str | None = None
    #: It read ``key``: from then on the attempt is its own, whatever becomes of it.
    told: bool = False
    idle_since: float = 0.0


class Supervisor:
    def __init__(self, home: layout.ExecutorHome, *, slots: int, idle_exit_seconds: float):
        self.home = home
        #: Who the workers start tasks as, when not this process's user.
        self.task_user = task_user.resolve(os.environ)
        self.slots = slots
        self.idle_exit_seconds = idle_exit_seconds
        self._selector = selectors.DefaultSelector()
        self._listener: socket.socket | None = None
        self._connections: dict[int, tuple[socket.socket, bytearray]] = {}
        self._queue: collections.deque[str] = collections.deque()
        self._queued: set[str] = set()
        #: Every worker, by the descriptor of its control socket.
        self._workers: dict[int, _Worker] = {}
        #: The attempts whose task runs (or is about to), each holding a slot -> its worker.
        self._running: dict[str, _Worker] = {}
        #: Warm workers waiting for an attempt, the one that waited least last.
        self._idle: list[_Worker] = []
        self._wakeup_r, self._wakeup_w = worker.nonblocking_pipe()
        self._stopping = False
        self._last_activity = time.monotonic()
        self._retry_start_at: float | None = None
        self.settings = settings_of(os.environ)
        #: Attempts an earlier supervisor's workers run, each holding a slot until it ends:
        #: the worker's pidfd -> the attempt's key.
        self._adopted: dict[int, str] = {}

    # --- life ---------------------------------------------------------------------------

    def serve(self) -> int:
        lock_fd = self._take_pidfile()
        if lock_fd is None:
            log("another supervisor holds the pidfile; leaving")
            return 0
        os.chdir(self.home.path)
        # We hold the pidfile lock, so any socket file left here belongs to a dead supervisor.
        layout.remove_quietly(self.home.socket)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(self.home.socket.name)  # relative: unix socket paths are short
        os.chmod(self.home.socket.name, 0o600)  # a task user may pass by: it may not connect
        listener.listen(256)
        listener.setblocking(False)
        self._listener = listener
        self._selector.register(listener, selectors.EVENT_READ, "accept")
        signal.set_wakeup_fd(self._wakeup_w)
        for signum in (*_STOP_SIGNALS, signal.SIGCHLD):
            signal.signal(signum, worker.ignore_signal)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        self._selector.register(self._wakeup_r, selectors.EVENT_READ, "signal")
        # The processes of a task whose worker died are handed to us, not to init: they are
        # reaped below (their attempt's mark still finds them, escalation.py).
        procfs.become_subreaper()
        self._forget_dead_workers()
        log(f"supervisor serving {self.home.path} with {self.slots} slots")
        # What is imported now never changes: keep the collector of every forked worker off
        # it, so that a worker does not copy-on-write pages that it never otherwise touches.
        gc.freeze()
        self._recover()
        try:
            self._loop()
        finally:
            layout.remove_quietly(self.home.socket)
            listener.close()
            log("supervisor stopped")
        return 0

    def _take_pidfile(self) -> int | None:
        fd = os.open(self.home.pidfile, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        give_up_at = time.monotonic() + LOCK_WAIT_SECONDS
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= give_up_at:
                    os.close(fd)
                    return None
                time.sleep(0.02)  # the previous supervisor is finishing its exit
        # Written through the locked descriptor: replacing the file would orphan the lock.
        pid = os.getpid()
        os.ftruncate(fd, 0)
        os.write(fd, f"{pid} {procfs.start_ticks(pid)}\n".encode())
        return fd

    def _forget_dead_workers(self) -> None:
        """Remove the records of workers that ended under an earlier supervisor (those still
        working keep theirs: they end once their attempt does)."""
        self.home.workers.mkdir(mode=0o700, exist_ok=True)
        for path in self.home.workers.glob("*.json"):
            with contextlib.suppress(OSError, ValueError):
                worker_ = records.read_process_record(path)
                if worker_ is None or not procfs.is_running(worker_.pid, worker_.start_ticks):
                    path.unlink()

    def _recover(self) -> None:
        """Queue what waits on disk, oldest submission first."""
        waiting: list[tuple[float, str]] = []
        with contextlib.suppress(FileNotFoundError):
            for instance_dir in self.home.attempts.iterdir():
                if instance_dir.name.startswith("."):
                    continue
                for attempt_path in instance_dir.iterdir():
                    if not attempt_path.name.isdigit():
                        continue
                    attempt = layout.AttemptDir(attempt_path)
                    key = layout.attempt_key(instance_dir.name, int(attempt_path.name))
                    if self._startable(attempt):
                        waiting.append((attempt.spec.stat().st_mtime, key))
                    else:
                        self._adopt(key, attempt)
        for _, key in sorted(waiting):
            self._enqueue(key)
        if waiting:
            log(f"recovered {len(waiting)} waiting attempts from disk")

    def _adopt(self, key: str, attempt: layout.AttemptDir) -> None:
        """An attempt that an earlier supervisor's worker still runs holds one of our slots
        until its task ends (its exit record) or its worker does."""
        if attempt.exit_record.exists():
            return
        with contextlib.suppress(OSError, ValueError):
            runner = records.read_process_record(attempt.worker_record)
            if runner is None:
                return
            pidfd = os.pidfd_open(runner.pid)
            if not procfs.is_running(runner.pid, runner.start_ticks):
                os.close(pidfd)
                return
            self._adopted[pidfd] = key
            self._selector.register(pidfd, selectors.EVENT_READ, ("adopted", pidfd))
            log(f"{key} runs under worker {runner.pid} of an earlier supervisor: it holds a slot")

    def _release_adopted(self, ended: int | None = None) -> None:
        """Free the slots of adopted attempts whose task or worker ended."""
        for pidfd, key in list(self._adopted.items()):
            if pidfd == ended or self.home.attempt_for_key(key).exit_record.exists():
                self._selector.unregister(pidfd)
                os.close(pidfd)
                del self._adopted[pidfd]

    def _loop(self) -> None:
        while not self._stopping:
            for key, _ in self._selector.select(self._select_timeout()):
                match key.data:
                    case "accept":
                        self._accept()
                    case "signal":
                        self._on_signals()
                    case ("connection", int(fd)):
                        self._on_readable(fd)
                    case ("worker", int(fd)):
                        self._on_worker(fd)
                    case ("adopted", int(fd)):
                        self._release_adopted(ended=fd)
            if self._adopted:
                self._release_adopted()
            self._start_ready()
            self._let_go_of_idle_workers()
            if self._idle_for() >= self.idle_exit_seconds:
                log(f"idle for {self.idle_exit_seconds}s; exiting")
                return

    def _select_timeout(self) -> float | None:
        timeouts = [self.idle_exit_seconds - self._idle_for()]
        if self._retry_start_at is not None:
            timeouts.append(self._retry_start_at - time.monotonic())
        if self._idle:
            timeouts.append(self._idle[0].idle_since + IDLE_WORKER_SECONDS - time.monotonic())
        if self._adopted:
            timeouts.append(ADOPTED_CHECK_SECONDS)
        return max(0.0, min(timeouts))

    def _idle_for(self) -> float:
        # An open connection is no activity: a client keeps its connection between requests.
        if self._queue or self._running or self._adopted:
            self._last_activity = time.monotonic()
        return time.monotonic() - self._last_activity

    def _on_signals(self) -> None:
        received = set(os.read(self._wakeup_r, 4096))
        if received & set(_STOP_SIGNALS):
            log("stop signal: exiting; running workers carry on without us")
            self._stopping = True
        while True:  # reap every worker (and adopted process) that ended; nothing else to do
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return

    # --- requests -----------------------------------------------------------------------

    def _accept(self) -> None:
        if self._listener is None:
            return
        while True:
            try:
                connection, _ = self._listener.accept()
            except BlockingIOError:
                return
            connection.setblocking(False)
            fd = connection.fileno()
            self._connections[fd] = (connection, bytearray())
            self._selector.register(fd, selectors.EVENT_READ, ("connection", fd))

    def _on_readable(self, fd: int) -> None:
        """Answer every whole request line; a client may keep its connection for the next."""
        connection, buffer = self._connections[fd]
        try:
            chunk = connection.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        buffer += chunk
        self._last_activity = time.monotonic()
        replies = bytearray()
        while b"\n" in buffer:
            line, _, rest = bytes(buffer).partition(b"\n")
            buffer[:] = rest
            replies += json.dumps(self._answer(line)).encode() + b"\n"
        if replies and not self._reply(connection, bytes(replies)):
            chunk = b""
        if chunk and len(buffer) < REQUEST_LIMIT_BYTES:
            return
        self._selector.unregister(fd)
        del self._connections[fd]
        connection.close()

    @staticmethod
    def _reply(connection: socket.socket, data: bytes) -> bool:
        """Send a whole reply, waiting a little for room; False if the client is gone or
        does not read its answers."""
        try:
            connection.settimeout(1.0)
            connection.sendall(data)
        except OSError:
            return False
        finally:
            with contextlib.suppress(OSError):
                connection.setblocking(False)
        return True

    def _answer(self, line: bytes) -> jsontypes.JSONObject:
        try:
            request = json.loads(line)
            if not isinstance(request, dict):
                raise ValueError("a request is a JSON object")
            return self._handle(request)
        except (ValueError, TypeError) as exc:
            return {"ok": False, "error": str(exc)}

    def _handle(self, request: jsontypes.JSONObject) -> jsontypes.JSONObject:
        match request.get("op"):
            case "ping":
                return {
                    "ok": True,
                    "pid": os.getpid(),
                    "slots": self.slots,
                    "queued": len(self._queue),
                    "running": len(self._running) + len(self._adopted),
                    "idle_workers": len(self._idle),
                    "settings": dict(self.settings),
                }
            case "submit":
                self._enqueue(_attempt_key(request))
                return {"ok": True}
            case "cancel":
                key = _attempt_key(request)
                # The worker of a cancelled attempt only records the cancellation: start it at
                # once, out of turn and beyond the slots, so that the stop is confirmed now.
                if key in self._queued:
                    self._queue.remove(key)
                    self._queued.discard(key)
                self._enqueue(key)
                return {"ok": True}
            case "status":
                key = _attempt_key(request)
                position = self._queue.index(key) if key in self._queued else None
                return {"ok": True, "queued": position is not None, "position": position}
            case "configure":
                slots = request.get("slots")
                if not isinstance(slots, int) or isinstance(slots, bool) or slots < 1:
                    raise ValueError("slots must be a positive integer")
                self.slots = slots
                return {"ok": True}
            case "shutdown":
                self._stopping = True
                return {"ok": True}
            case other:
                raise ValueError(f"unknown op {other!r}")

    # --- attempts -----------------------------------------------------------------------

    @staticmethod
    def _startable(attempt: layout.AttemptDir) -> bool:
        return (
            attempt.spec.exists()
            and not attempt.worker_record.exists()
            and not attempt.exit_record.exists()
        )

    def _enqueue(self, key: str) -> None:
        if key in self._queued or key in self._running:
            return
        attempt = self.home.attempt_for_key(key)
        if not self._startable(attempt):
            return
        if attempt.cancel_request.exists():
            self._start_worker(key)
            return
        self._queue.append(key)
        self._queued.add(key)

    def _start_ready(self) -> None:
        if self._stopping:
            return  # what waits stays on disk for the next supervisor
        if self._retry_start_at is not None and time.monotonic() < self._retry_start_at:
            return
        self._retry_start_at = None
        while self._queue and len(self._running) + len(self._adopted) < self.slots:
            key = self._queue.popleft()
            self._queued.discard(key)
            if not self._start_worker(key):
                self._queue.appendleft(key)
                self._queued.add(key)
                self._retry_start_at = time.monotonic() + 0.5
                return

    def _start_worker(self, key: str) -> bool:
        """Give the attempt a worker, warm or newly forked; False when the system refused to
        make one (try again later)."""
        attempt = self.home.attempt_for_key(key)
        if not self._startable(attempt):
            return True  # started by an earlier supervisor, or cleaned up: nothing to do
        worker_ = self._idle.pop() if self._idle else self._fork_worker()
        if worker_ is None:
            return False
        try:
            os.link(worker_.record, attempt.worker_record)
        except OSError as exc:
            log(f"cannot record the worker of {key}: {exc}")
            self._idle.append(worker_)
            return False
        # Unrecorded, no worker runs an attempt: the record comes first, then the key.
        worker_.key, worker_.told = key, False
        self._running[key] = worker_
        try:
            worker_.control.sendall(key.encode() + b"\n")
        except OSError:
            # It ended while it waited: the key goes back to the head of the queue.
            self._on_worker_gone(worker_)
        return True

    def _fork_worker(self) -> _Worker | None:
        try:
            forked = worker.fork_supervised(
                self.home, in_child=self._in_worker, user=self.task_user
            )
        except OSError as exc:
            log(f"cannot fork and record a worker: {exc}")
            return None
        worker_ = _Worker(control=forked.control, identity=forked.identity, record=forked.record)
        fd = forked.control.fileno()
        self._workers[fd] = worker_
        self._selector.register(fd, selectors.EVENT_READ, ("worker", fd))
        return worker_

    def _in_worker(self) -> None:
        """In a new worker: a session of its own, and the supervisor's sockets forgotten
        without closing them for the supervisor (the worker then closes their descriptors)."""
        os.setsid()
        self._selector.close()
        if self._listener is not None:
            self._listener.detach()
        for connection, _ in self._connections.values():
            connection.detach()
        for other in self._workers.values():
            other.control.detach()

    def _on_worker(self, fd: int) -> None:
        worker_ = self._workers[fd]
        try:
            news = worker_.control.recv(4096)
        except BlockingIOError:
            return
        except OSError:
            news = b""
        if not news:
            self._on_worker_gone(worker_)
            return
        for message in news:
            match bytes((message,)):
                case worker.TOLD:
                    worker_.told = True
                case worker.TASK_ENDED:
                    self._free_slot(worker_)
                case worker.READY:
                    self._free_slot(worker_)
                    worker_.key, worker_.told = None, False
                    worker_.idle_since = time.monotonic()
                    self._idle.append(worker_)

    def _free_slot(self, worker_: _Worker) -> None:
        """The worker's attempt no longer holds a slot (its task ended, or the worker did)."""
        if worker_.key is not None and self._running.get(worker_.key) is worker_:
            del self._running[worker_.key]

    def _on_worker_gone(self, worker_: _Worker) -> None:
        """Its socket closed: the worker ended (or is ending). Its slot is free; an attempt it
        was given but never read goes back to the head of the queue, unrecorded."""
        fd = worker_.control.fileno()
        self._selector.unregister(fd)
        del self._workers[fd]
        worker_.control.close()
        layout.remove_quietly(worker_.record)  # the attempts' links keep what they need
        if worker_ in self._idle:
            self._idle.remove(worker_)
        key = worker_.key
        self._free_slot(worker_)
        if key is None or worker_.told:
            return
        attempt = self.home.attempt_for_key(key)
        with contextlib.suppress(OSError, ValueError):
            recorded = records.read_process_record(attempt.worker_record)
            if recorded is not None and recorded.engine_id == worker_.identity.engine_id:
                attempt.worker_record.unlink()
        if self._startable(attempt):
            self._queue.appendleft(key)
            self._queued.add(key)

    def _let_go_of_idle_workers(self) -> None:
        """Idle workers past their wait, and any beyond ``slots``, are told to end (their
        socket closes), the one that waited longest first."""
        now = time.monotonic()
        while self._idle and (
            len(self._idle) > self.slots or now - self._idle[0].idle_since >= IDLE_WORKER_SECONDS
        ):
            self._on_worker_gone(self._idle[0])


def _attempt_key(request: jsontypes.JSONObject) -> str:
    key = request.get("attempt")
    if not isinstance(key, str):
        raise ValueError("the request needs an 'attempt' key")
    layout.parse_attempt_key(key)
    return key


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="veritask-supervisor")
    parser.add_argument("--home", type=Path, required=True, help="VERITASK_HOME/executor")
    parser.add_argument("--slots", type=int, required=True)
    parser.add_argument("--idle-exit-seconds", type=float, required=True)
    parser.add_argument("--foreground", action="store_true", help="do not double-fork")
    parser.add_argument(
        "--environment-on-stdin",
        action="store_true",
        help="read the workers' environment from stdin (a JSON object)",
    )
    args = parser.parse_args(argv)
    if args.environment_on_stdin:
        receive_environment(sys.stdin.buffer)
    if not args.foreground and os.fork() > 0:
        # The launcher reaps this intermediate process; the daemon is adopted by init and is
        # not a session leader, so it can never acquire a controlling terminal.
        os._exit(0)
    home = layout.ExecutorHome(args.home.resolve())
    try:
        supervisor = Supervisor(home, slots=args.slots, idle_exit_seconds=args.idle_exit_seconds)
    except task_user.TaskUserError as exc:
        log(f"cannot start: {exc}")
        return 2
    return supervisor.serve()


if __name__ == "__main__":
    sys.exit(main())
