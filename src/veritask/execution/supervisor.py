"""The local supervisor: a small daemon that forks one worker per attempt, within its slots.

Why a daemon: a fresh Python interpreter per attempt costs tens of milliseconds; forking a
process that has already imported the worker costs well under one. Why detached: attempts must
outlive the scheduler that submitted them, so the supervisor runs in its own session (double
fork), and each worker in a session of its own, so that not even the supervisor's end stops them.

It keeps no state that the disk does not also hold. An attempt directory with a spec, without a
``worker.json`` and without an exit record, is waiting to start: the supervisor scans for those
when it starts, so a submission made while no supervisor ran (or one that died) is not lost.

Protocol: a client connects to ``supervisor.sock``, sends one JSON line and reads one JSON line
back. ``{"op": "submit" | "cancel" | "status", "attempt": "<instance>/<n>"}``, ``{"op": "ping"}``,
``{"op": "configure", "slots": N}``, ``{"op": "shutdown"}``; answers carry ``"ok"``.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import fcntl
import gc
import json
import os
import selectors
import signal
import socket
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from veritask.core import jsontypes
from veritask.execution import layout, procfs, records, wire, worker

#: How long a starting supervisor waits for the previous one to finish exiting.
LOCK_WAIT_SECONDS = 5.0
REQUEST_LIMIT_BYTES = 64 * 1024
_STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}


def log(message: str) -> None:
    """The supervisor's stderr is ``supervisor.log``."""
    print(
        f"{wire.format_time(wire.utc_now())} [{os.getpid()}] {message}", file=sys.stderr, flush=True
    )


class Supervisor:
    def __init__(self, home: layout.ExecutorHome, *, slots: int, idle_exit_seconds: float):
        self.home = home
        self.slots = slots
        self.idle_exit_seconds = idle_exit_seconds
        self._selector = selectors.DefaultSelector()
        self._listener: socket.socket | None = None
        self._connections: dict[int, tuple[socket.socket, bytearray]] = {}
        self._queue: collections.deque[str] = collections.deque()
        self._queued: set[str] = set()
        #: The read end of each running worker's slot pipe -> its attempt key.
        self._running: dict[int, str] = {}
        self._wakeup_r, self._wakeup_w = worker.nonblocking_pipe()
        self._stopping = False
        self._last_activity = time.monotonic()
        self._retry_start_at: float | None = None

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
        listener.listen(256)
        listener.setblocking(False)
        self._listener = listener
        self._selector.register(listener, selectors.EVENT_READ, "accept")
        signal.set_wakeup_fd(self._wakeup_w)
        for signum in (*_STOP_SIGNALS, signal.SIGCHLD):
            signal.signal(signum, worker.ignore_signal)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        self._selector.register(self._wakeup_r, selectors.EVENT_READ, "signal")
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
                    if self._startable(attempt):
                        key = layout.attempt_key(instance_dir.name, int(attempt_path.name))
                        waiting.append((attempt.spec.stat().st_mtime, key))
        for _, key in sorted(waiting):
            self._enqueue(key)
        if waiting:
            log(f"recovered {len(waiting)} waiting attempts from disk")

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
                    case ("slot", int(fd)):
                        self._on_slot(fd)
            self._start_ready()
            if self._idle_for() >= self.idle_exit_seconds:
                log(f"idle for {self.idle_exit_seconds}s; exiting")
                return

    def _select_timeout(self) -> float | None:
        timeouts = [self.idle_exit_seconds - self._idle_for()]
        if self._retry_start_at is not None:
            timeouts.append(self._retry_start_at - time.monotonic())
        return max(0.0, min(timeouts))

    def _idle_for(self) -> float:
        if self._queue or self._running or self._connections:
            self._last_activity = time.monotonic()
        return time.monotonic() - self._last_activity

    def _on_signals(self) -> None:
        received = set(os.read(self._wakeup_r, 4096))
        if received & set(_STOP_SIGNALS):
            log("stop signal: exiting; running workers carry on without us")
            self._stopping = True
        while True:  # reap every worker that ended; they need nothing else from us
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
        connection, buffer = self._connections[fd]
        try:
            chunk = connection.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        buffer += chunk
        if chunk and b"\n" not in buffer and len(buffer) < REQUEST_LIMIT_BYTES:
            return
        self._selector.unregister(fd)
        del self._connections[fd]
        with connection:
            if not chunk and not buffer:
                return
            reply = self._answer(bytes(buffer).partition(b"\n")[0])
            with contextlib.suppress(OSError):
                connection.setblocking(True)
                connection.settimeout(1.0)
                connection.sendall(json.dumps(reply).encode() + b"\n")

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
                    "running": len(self._running),
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
        if key in self._queued or key in self._running.values():
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
        if self._retry_start_at is not None and time.monotonic() < self._retry_start_at:
            return
        self._retry_start_at = None
        while self._queue and len(self._running) < self.slots:
            key = self._queue.popleft()
            self._queued.discard(key)
            if not self._start_worker(key):
                self._queue.appendleft(key)
                self._queued.add(key)
                self._retry_start_at = time.monotonic() + 0.5
                return

    def _start_worker(self, key: str) -> bool:
        """Fork the attempt's worker; False when the system refused (try again later)."""
        attempt = self.home.attempt_for_key(key)
        if not self._startable(attempt):
            return True  # started by an earlier supervisor, or cleaned up: nothing to do
        go_r, go_w = os.pipe()
        slot_r, slot_w = os.pipe()
        # A stop signal sent to the new worker before it installed its handlers must wait for
        # them, not kill it on the spot: the child inherits this mask and lifts it itself.
        previous_mask = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
        try:
            pid = os.fork()
        except OSError as exc:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)
            for fd in (go_r, go_w, slot_r, slot_w):
                os.close(fd)
            log(f"cannot fork a worker for {key}: {exc}")
            return False
        if pid == 0:
            self._become_worker(attempt, go_r, slot_w)
        signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)
        os.close(go_r)
        os.close(slot_w)
        try:
            identity = records.ProcessRecord.of_worker(pid)
            records.write_process_record(attempt.worker_record, identity)
        except OSError as exc:
            # Unrecorded, the worker must not run: closing the go pipe unsent makes it exit.
            log(f"cannot record the worker of {key}: {exc}")
            os.close(go_w)
            os.close(slot_r)
            return False
        os.write(go_w, b"G")
        os.close(go_w)
        self._running[slot_r] = key
        self._selector.register(slot_r, selectors.EVENT_READ, ("slot", slot_r))
        return True

    def _become_worker(self, attempt: layout.AttemptDir, go_r: int, slot_w: int) -> NoReturn:
        status = 70
        try:
            os.setsid()
            # ps and top show the command name: a worker should not pass for a supervisor.
            with contextlib.suppress(OSError), open("/proc/self/comm", "w") as comm:
                comm.write("veritask-worker")
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            # Forget the supervisor's sockets without closing them for the parent, then close
            # every descriptor but ours: the pidfile lock above all, or a live worker would
            # keep the next supervisor from starting.
            self._selector.close()
            if self._listener is not None:
                self._listener.detach()
            for connection, _ in self._connections.values():
                connection.detach()
            low, high = sorted((go_r, slot_w))
            os.closerange(3, low)
            os.closerange(low + 1, high)
            os.closerange(high + 1, os.sysconf("SC_OPEN_MAX"))
            go = os.read(go_r, 1)
            os.close(go_r)
            # Without the go-ahead the supervisor could not record us: we never ran.
            status = worker.run_forked(attempt.path, slot_fd=slot_w) if go == b"G" else 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(status)

    def _on_slot(self, fd: int) -> None:
        """The worker closed its slot pipe (its task ended) or died: the slot is free."""
        with contextlib.suppress(BlockingIOError):
            if os.read(fd, 1):
                return
        self._selector.unregister(fd)
        os.close(fd)
        self._running.pop(fd, None)


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
    args = parser.parse_args(argv)
    if not args.foreground and os.fork() > 0:
        # The launcher reaps this intermediate process; the daemon is adopted by init and is
        # not a session leader, so it can never acquire a controlling terminal.
        os._exit(0)
    home = layout.ExecutorHome(args.home.resolve())
    return Supervisor(home, slots=args.slots, idle_exit_seconds=args.idle_exit_seconds).serve()


if __name__ == "__main__":
    sys.exit(main())
