"""The worker: the one program that runs every attempt on every engine (docs/executors.md,
section 3).

``veritask-worker <attempt dir>/spec.json`` (or ``python -m veritask.execution.worker``) runs
the attempt whose spec it is given (:func:`main`); the local supervisor forks warm workers
instead (:func:`fork_supervised`), each running the attempts it is handed with
:func:`run_attempt`. Either way it:

1. takes the attempt's worker lock (one worker per attempt directory);
2. starts the task in its own process group, output to the capped ``task.log``;
3. sends ``started``, a ``heartbeat`` every ``heartbeat_interval``, the task's ``progress`` and
   ``output_committed`` notices, and ``completed`` — every event spooled before it is sent;
4. on SIGTERM, a ``stop`` answer from the platform or the timeout, sends SIGTERM to the task's
   group, waits ``grace_period``, then SIGKILLs the group;
5. writes the exit record (atomically, fsync-ed) before it sends ``completed``;
6. keeps delivering until the spool is empty or ``delivery_deadline`` passes.

Run again on a directory whose worker died, it starts nothing twice: it delivers what the spool
still holds (and the exit record's completion, if the spool missed it) and exits.

Under the local supervisor a worker is kept warm: once an attempt is over (its exit record
written, its events delivered), it lets go of that attempt and waits on its control socket for
the supervisor to give it another (:func:`serve_supervisor`), up to ``ATTEMPTS_PER_WORKER``.
Forking a Python process and its first writes to the pages it shares with its parent cost
more CPU than the worker's whole run of a short task; a warm worker pays them once for many
attempts.

A Celery pool process runs its deliveries' attempts itself (:func:`run_attempt_here`), with a
:class:`Companion` that the worker's loop ticks: it refreshes the delivery's lease, ships the
log and reports a stop requested in Redis. The pool process is long-lived already; a worker of
its own would only add a hand-over per attempt.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import resource
import selectors
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import NoReturn, Protocol, cast

from veritask.core import jsontypes, outputs
from veritask.execution import (
    cgroups,
    delivery,
    endings,
    layout,
    port,
    procfs,
    progress,
    records,
    secrets,
    spool,
    task_env,
    task_process,
    task_user,
    transports,
    wire,
)

EXIT_SUCCEEDED = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_BUSY = 3
"""Another worker holds the attempt."""

#: How long to keep reading output after the task's leader ended (its group was killed then;
#: only a process that left the group can still hold the pipe).
OUTPUT_DRAIN_SECONDS = 1.0
#: After this long, a worker still waiting for the task's killed processes to end says so.
LEFTOVER_NOTE_SECONDS = 5.0
#: The largest output a task may leave, unless VERITASK_MAX_OUTPUT_BYTES in the worker's
#: environment says otherwise: a larger one fails the attempt (it stays in output.json).
OUTPUT_EVENT_LIMIT_BYTES = 1024 * 1024
MAX_OUTPUT_SETTING = "VERITASK_MAX_OUTPUT_BYTES"
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: How long an ending attempt waits for its delivery thread (busy with a request) to end.
DELIVERY_JOIN_SECONDS = 0.2
#: How long a process that runs attempts one after another waits more for such a thread,
#: before it takes its next attempt: longer than a request to the platform may take.
LINGERING_DELIVERY_SECONDS = 60.0


class Companion(Protocol):
    """What an engine runs beside an attempt, in the worker's own loop: the Celery delivery's
    lease, log shipping and stop requests (``execution/celery/task.py``)."""

    #: Seconds between two ticks, while the task runs and while its events are delivered.
    interval: float

    def tick(self) -> bool:
        """Do the engine's part; True when the engine asks that the attempt stop."""
        ...


class AttemptRun:
    """One worker's run of one attempt. Not reusable."""

    def __init__(
        self,
        attempt: layout.AttemptDir,
        spec: port.AttemptSpec,
        *,
        on_task_ended: Callable[[], object] | None = None,
        companion: Companion | None = None,
        user: task_user.TaskUser | None = None,
    ):
        self.attempt = attempt
        self.spec = spec
        #: The user the task runs as, when it is another than this process's.
        self._user = user
        self._on_task_ended = on_task_ended
        self._companion = companion
        self._companion_due = (
            float("inf") if companion is None else time.monotonic() + companion.interval
        )
        self.log = task_process.LogSink(attempt.log, cap_bytes=spec.log_cap_bytes)
        self.journal = spool.Spool(attempt.path)
        self._transport = transports.make_transport(spec)
        self._selector = selectors.DefaultSelector()
        self._signal_r, self._signal_w = nonblocking_pipe()
        self._notify_r, self._notify_w = nonblocking_pipe()
        self._deliverer = delivery.Deliverer(
            journal=self.journal,
            transport=self._transport,
            log=self.log,
            retry_max=spec.delivery_retry_max.total_seconds(),
            notify_fd=self._notify_w,
        )
        self._selector.register(self._notify_r, selectors.EVENT_READ, "notify")
        self._task: task_process.TaskProcess | None = None
        #: The attempt's cgroup, when this machine lets the worker make one (cgroups.py).
        self._cgroup: Path | None = None
        self._stop_cause: port.ErrorCategory | None = None
        self._kill_at: float | None = None
        self._commit_marker: str | None = None
        self._channel_fd: int | None = None
        self._channel_keepalive_fd: int | None = None
        self._channel_buffer = b""
        self._progress = progress.Pacer(lambda evidence: self._emit("progress", evidence))
        #: Why the task could not be started, when the worker knows (a secret no one holds).
        self._start_error: str | None = None
        #: What the task's process cost, from the wait that reaped it.
        self._usage: resource.struct_rusage | None = None
        #: How the task ended, once the run knows it: what it wrote, or found, as ``exit.json``.
        self.exit_record: records.ExitRecord | None = None

    # --- the run ------------------------------------------------------------------------

    def run(self) -> int:
        try:
            self._install_signal_handlers()
            previous = records.read_exit_record(self.attempt)
            if previous is not None:
                return self._resume(previous)
            if self.attempt.task_record.exists():
                self.log.note(
                    "an earlier worker started the task and ended without an exit record; "
                    "not starting it again, only delivering what the spool holds"
                )
                return self._resume(None)
            self._read_signals()
            if self._stop_cause is None and self.attempt.cancel_request.exists():
                self._stop_cause = port.ErrorCategory.CANCELLED
            if self._stop_cause is not None:
                self.log.note(f"stop requested before the task started ({self._stop_cause})")
                return self._complete(None)
            self._open_channel()
            # Whatever the task starts stays below this process, even once its parent ended
            # (setsid, a daemon's double fork): the stop finds and ends all of it.
            procfs.become_subreaper()
            try:
                self._cgroup = self._make_cgroup()
                workdir = self.spec.workdir or self.attempt.path
                if self._user is not None:
                    self._hand_over(self._user)
                    workdir = self.spec.workdir or self.attempt.work
                self._task = task_process.start(
                    self.spec.task,
                    env=self._task_env(),
                    workdir=workdir,
                    output_path=self.attempt.output,
                    cgroup=self._cgroup,
                    user=self._user,
                )
            except task_process.StartFailed as exc:
                self.log.note(str(exc))
                self._start_error = str(exc)
                self._stop_cause = port.ErrorCategory.START_ERROR
                return self._complete(None)
            self._record_start(self._task)
            status = self._supervise(self._task)
            return self._complete(status)
        finally:
            self._close()

    def _resume(self, previous: records.ExitRecord | None) -> int:
        self.exit_record = previous
        if previous is not None and not self.journal.holds(previous.completed["seq"]):
            self.journal.append(previous.completed)
        self._release_slot()
        for spooled in self.journal.undelivered():
            self._deliverer.push(spooled)
        self._await_delivery()
        if previous is None:
            return EXIT_FAILED
        return exit_status(previous.error_category)

    def _supervise(self, task: task_process.TaskProcess) -> int:
        """Pump output, relay the channel, beat, enforce stops; returns the wait status."""
        selector = self._selector
        selector.register(task.output_fd, selectors.EVENT_READ, "output")
        selector.register(task.pidfd, selectors.EVENT_READ, "exit")
        heartbeat = self.spec.heartbeat_interval.total_seconds()
        now = time.monotonic()
        next_heartbeat = now + heartbeat
        deadline = None if self.spec.timeout is None else now + self.spec.timeout.total_seconds()
        wait_status: int | None = None
        output_open = True
        drain_until = float("inf")
        while wait_status is None or (output_open and time.monotonic() < drain_until):
            timers = [drain_until if wait_status is not None else next_heartbeat]
            if wait_status is None:
                timers += [
                    t for t in (deadline, self._kill_at, self._progress.due) if t is not None
                ]
                timers.append(self._companion_due)
            for key, _ in selector.select(max(0.0, min(timers) - time.monotonic())):
                match key.data:
                    case "output":
                        output_open = self._pump_output(task.output_fd)
                    case "exit":
                        selector.unregister(task.pidfd)
                        wait_status = self._reap(task)
                        drain_until = time.monotonic() + OUTPUT_DRAIN_SECONDS
                    case "channel":
                        self._read_channel()
                    case "signal":
                        self._read_signals()
                    case "notify":
                        self._read_notices()
            if wait_status is not None:
                continue
            now = time.monotonic()
            self._progress.send_due()
            if self._tick_companion(now):
                self._request_stop(port.ErrorCategory.CANCELLED)
            if now >= next_heartbeat:
                self._emit("heartbeat", wire.HeartbeatEvidence())
                next_heartbeat = now + heartbeat
                self._reap_orphans(task)
            if deadline is not None and now >= deadline:
                self._request_stop(port.ErrorCategory.TIMEOUT)
            if self._kill_at is not None and now >= self._kill_at:
                self.log.note("grace period over: killing the task's process group")
                self._signal_task(task, signal.SIGKILL)
                self._kill_at = None
        if output_open:
            self.log.note("output still open after the task ended; a process left its group")
            selector.unregister(task.output_fd)
        self.log.end_output()
        if self._channel_fd is not None:
            self._read_channel()  # the task's last notices were written before it exited
            selector.unregister(self._channel_fd)
        return wait_status

    def _tick_companion(self, now: float) -> bool:
        """Tick the companion when it is due; True when its engine asks for a stop."""
        companion = self._companion
        if companion is None or now < self._companion_due:
            return False
        self._companion_due = now + companion.interval
        try:
            return companion.tick()
        except Exception as exc:  # the engine away for a moment must not end the supervision
            self.log.note(
                f"the engine's part beside the attempt failed ({exc!r});"
                f" it is tried again in {companion.interval:g}s"
            )
            return False

    def _reap(self, task: task_process.TaskProcess) -> int:
        # The leader ended. What is left of its group dies with it; killing it before the
        # leader is reaped means its group id cannot have been reused by then.
        procfs.signal_group(task.pgid, signal.SIGKILL)
        # wait4, not waitpid: the same reaping, with the child's own resource use.
        _, status, self._usage = os.wait4(task.pid, 0)
        if task.popen is not None:
            task.popen.returncode = os.waitstatus_to_exitcode(status)
        self._end_leftovers(task)
        return status

    @staticmethod
    def _reap_orphans(task: task_process.TaskProcess) -> None:
        """Reap the task's processes that were handed to this process (their parent ended
        first) and have ended since: else each would wait as a zombie until the task ends."""
        procfs.reap_children([pid for pid in procfs.children() if pid != task.pid])

    def _leftovers(self, task: task_process.TaskProcess) -> list[procfs.ProcStat]:
        """The task's processes below this one (the leader aside), ended ones included."""
        return [
            stat
            for stat in procfs.descendants(os.getpid(), started_since=task.start_ticks)
            if stat.pid != task.pid
        ]

    def _make_cgroup(self) -> Path | None:
        """The attempt's cgroup; None where none can be made. Raises StartFailed for a
        ``VERITASK_TASK_CGROUPS`` that is neither auto nor off."""
        try:
            if not cgroups.enabled(os.environ):
                return None
        except ValueError as exc:
            raise task_process.StartFailed(str(exc)) from exc
        return cgroups.create(self.attempt.path)

    def _signal_task(self, task: task_process.TaskProcess, signum: int) -> None:
        """Signal the task's group, and each of its processes that left the group."""
        escaped = [s for s in self._leftovers(task) if s.pgrp != task.pgid and not s.ended]
        procfs.signal_group(task.pgid, signum)
        if task.cgroup is not None:
            cgroups.signal_all(task.cgroup, signum)
        if escaped:
            name = signal.Signals(signum).name
            self.log.note(f"{name} to {len(escaped)} processes that left the task's process group")
        for stat in escaped:
            procfs.signal_process(stat.pid, stat.start_ticks, signum)

    def _end_leftovers(self, task: task_process.TaskProcess) -> None:
        """Kill and reap every process the task left, and return once none is left.

        This process is their subreaper: those that left the task's group (``setsid``, a
        double fork) are still below it; with a cgroup, they are also in it. The exit record,
        which confirms a stop, is written only after this, so a confirmed stop leaves nothing
        of the task running. The common case costs one system call (no child left at all), and
        the removal of the attempt's empty cgroup.
        """
        cgroup = task.cgroup
        if not _has_children() and (cgroup is None or cgroups.remove(cgroup)):
            return
        noted_at = time.monotonic() + LEFTOVER_NOTE_SECONDS
        pause = 0.002
        while True:
            left = self._leftovers(task)
            in_cgroup = [] if cgroup is None else cgroups.members(cgroup)
            if not left and not in_cgroup:
                if cgroup is not None:
                    cgroups.remove(cgroup)
                return
            if cgroup is not None and in_cgroup:
                cgroups.signal_all(cgroup, signal.SIGKILL)
            live = [stat for stat in left if not stat.ended]
            if live and pause == 0.002:
                self.log.note(
                    f"killing {len(live)} processes the task left; {_escapees(live, task)} of"
                    " them left the task's process group"
                )
            for stat in live:
                procfs.signal_process(stat.pid, stat.start_ticks, signal.SIGKILL)
            procfs.reap_children([stat.pid for stat in left if stat.ppid == os.getpid()])
            if time.monotonic() >= noted_at:
                self.log.note(f"{len(left)} processes of the task are not gone yet; waiting")
                noted_at = float("inf")
            time.sleep(pause)  # a killed process needs the kernel's time to end
            pause = min(pause * 2, 0.1)

    def _request_stop(self, cause: port.ErrorCategory) -> None:
        """The first stop wins: a timeout after a cancel is still a cancel."""
        if self._stop_cause is not None:
            return
        self._stop_cause = cause
        if self._task is None:
            return
        grace = self.spec.grace_period.total_seconds()
        self.log.note(f"stopping the task ({cause}): SIGTERM to its group, SIGKILL after {grace}s")
        if grace > 0:
            self._signal_task(self._task, signal.SIGTERM)
            self._kill_at = time.monotonic() + grace
        else:
            self._signal_task(self._task, signal.SIGKILL)

    def _complete(self, wait_status: int | None) -> int:
        self._progress.flush()  # the task's last progress goes before its end
        self._take_back()
        exit_code, signum = (
            (None, None) if wait_status is None else task_process.decode_wait_status(wait_status)
        )
        category = self._categorize(exit_code, signum)
        output, output_error = self._read_output()
        if output_error is not None and category is port.ErrorCategory.NONE:
            # Nothing half-stored: the attempt fails and its output is not recorded.
            category = port.ErrorCategory.TASK_ERROR
        ended_at = wire.utc_now()
        evidence = wire.CompletedEvidence(
            exit_code=exit_code,
            signal=signum,
            error_category=category.value,
            commit_marker=self._commit_marker,
            log_path=str(self.attempt.log),
            output=output,
        )
        if self._start_error is not None:
            evidence["start_error"] = self._start_error[:1000]
        if category not in (port.ErrorCategory.NONE, port.ErrorCategory.SKIPPED):
            error = output_error or self.log.error_tail() or self._start_error
            if error:
                evidence["error_message"] = error
        if self._usage is not None:
            evidence["cpu_user_seconds"] = round(self._usage.ru_utime, 6)
            evidence["cpu_system_seconds"] = round(self._usage.ru_stime, 6)
            # Linux counts ru_maxrss in KiB.
            evidence["peak_rss_bytes"] = self._usage.ru_maxrss * 1024
        event = self._event("completed", evidence, event_time=ended_at)
        # Durable, and the exit record under its second name before the journal has it.
        spooled = self.journal.append(event, durable=True, also=self.attempt.exit_record)
        self.exit_record = records.ExitRecord(
            started_at=None if self._task is None else self._task.started_at,
            ended_at=ended_at,
            completed=cast(wire.CompletedEvent, event),
        )
        self._release_slot()
        self._deliverer.push(spooled)
        if self.log.dropped_bytes:
            self.log.note(f"{self.log.dropped_bytes} bytes of output dropped past the log cap")
        self._await_delivery()
        return exit_status(category)

    def _categorize(self, exit_code: int | None, signum: int | None) -> port.ErrorCategory:
        stopped = self._stop_cause
        if stopped is None and signum is not None and self.attempt.cancel_request.exists():
            # A stop asked while this worker was frozen may have killed the task's group
            # (the escalation) before the stop signal queued for this worker was read: the
            # request's file says it was ours.
            stopped = port.ErrorCategory.CANCELLED
        return endings.categorize(
            endings.Ending(
                exit_code=exit_code,
                signal=signum,
                skip_exit_code=self.spec.skip_exit_code,
                stopped_by_us=stopped,
                started=signum is not None or self._start_confirmed(exit_code),
            )
        )

    def _start_confirmed(self, exit_code: int | None) -> bool:
        task = self._task
        if task is None:
            return False
        if task.confirmation_fd is None:
            return exit_code not in task_process.SHELL_START_ERROR_CODES
        try:
            return os.read(task.confirmation_fd, 1) == b"S"
        except BlockingIOError:
            return False

    # --- events -------------------------------------------------------------------------

    def _emit(self, kind: wire.WorkerEventKind, evidence: wire.Evidence) -> None:
        self._deliverer.push(self.journal.append(self._event(kind, evidence)))

    def _event(
        self,
        kind: wire.WorkerEventKind,
        evidence: wire.Evidence,
        event_time: datetime | None = None,
    ) -> wire.WorkerEvent:
        """This attempt's next event, numbered by the journal."""
        return wire.make_event(
            kind=kind,
            instance_id=self.spec.instance_id,
            attempt_no=self.spec.attempt_no,
            attempt_token=self.spec.attempt_token,
            seq=self.journal.next_seq(),
            evidence=evidence,
            event_time=event_time,
        )

    def _await_delivery(self) -> None:
        deliverer = self._deliverer
        if deliverer.finish():
            return
        give_up_at = time.monotonic() + self.spec.delivery_deadline.total_seconds()
        while (remaining := give_up_at - time.monotonic()) > 0:
            # The task has ended: a stop asked for now changes nothing, the ticks go on.
            self._tick_companion(time.monotonic())
            wait = min(remaining, max(0.0, self._companion_due - time.monotonic()))
            for key, _ in self._selector.select(wait):
                if key.data == "signal" and self._drain(self._signal_r):
                    self.log.note("stopped while delivering: the spool keeps the rest")
                    deliverer.abort()
                    return
                if key.data == "notify" and delivery.NOTIFY_DRAINED in self._drain(key.fd):
                    return
        left = deliverer.undelivered_count
        self.log.note(f"delivery deadline passed: {left} events stay in the spool")
        deliverer.abort()

    def _record_start(self, task: task_process.TaskProcess) -> None:
        """The ``started`` event is also the task record (``task.json``, its second name):
        once it exists, no later worker on this directory starts the task again."""
        host = procfs.hostname()
        evidence = wire.StartedEvidence(
            worker=f"{host}:{os.getpid()}",
            host=host,
            pid=task.pid,
            pid_start_time=task.start_ticks,
            pgid=task.pgid,
        )
        event = self._event("started", evidence, event_time=task.started_at)
        self._deliverer.push(self.journal.append(event, also=self.attempt.task_record))

    # --- the task's side ----------------------------------------------------------------

    def _hand_over(self, user: task_user.TaskUser) -> None:
        """Give a task that runs as another user what it may write, and nothing else: its
        working directory, its output file and its FIFO to this worker. The attempt directory
        stays this process's; the task's group may only pass through it and its instance's.
        Raises StartFailed when the files cannot be handed over."""
        attempt = self.attempt
        try:
            task_user.open_passage([attempt.path.parent, attempt.path], user)
            attempt.work.mkdir(mode=task_user.PRIVATE_DIR_MODE, exist_ok=True)
            task_user.give(attempt.work, user)
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(attempt.output, flags, 0o600)
            try:
                os.fchown(fd, user.uid, user.gid)
            finally:
                os.close(fd)
            task_user.give(attempt.channel, user)
        except OSError as exc:
            raise task_process.StartFailed(
                f"could not hand the attempt directory over to the task user {user.name}: {exc}"
            ) from exc

    def _take_back(self) -> None:
        """The task has ended and left nothing running: what it was given is this process's
        again, so that no other task of its user can change its output or its files."""
        if self._user is None or self._task is None:
            return
        for path, mode in ((self.attempt.work, 0o700), (self.attempt.output, 0o600)):
            try:
                task_user.take_back(path, mode=mode)
            except FileNotFoundError:
                continue
            except OSError as exc:
                self.log.note(f"could not take {path.name} back from the task user: {exc}")

    def _task_env(self) -> dict[str, str]:
        """The task's environment (``task_env``): never the worker's own settings. Its
        secrets are looked up here, at the attempt's start, and masked in its log from now.
        Raises StartFailed naming what could not be had (a secret, a bad pass-through)."""
        own: dict[str, str] = {}
        if self.spec.upstream_outputs:
            layout.write_json_atomically(
                self.attempt.upstream_outputs, dict(self.spec.upstream_outputs), durable=False
            )
            if self._user is not None:
                task_user.give(self.attempt.upstream_outputs, self._user)
            own["VERITASK_UPSTREAM_OUTPUTS"] = str(self.attempt.upstream_outputs)
        # A task of another user gets that user's HOME, USER and LOGNAME, as a login would.
        environ = {**os.environ, **(self._user.environment() if self._user else {})}
        try:
            providers = secrets.providers_from_environment(os.environ)
            resolved = secrets.resolve(self.spec.secret_env, providers=providers)
            self.log.mask(resolved.values())
            return task_env.build(
                environ,
                declared=self.spec.env,
                secrets=resolved,
                own={
                    "VERITASK_INSTANCE_ID": self.spec.instance_id,
                    "VERITASK_ATTEMPT_NO": str(self.spec.attempt_no),
                    "VERITASK_ATTEMPT_TOKEN": self.spec.attempt_token,
                    "VERITASK_OUTPUT": str(self.attempt.output),
                    "VERITASK_CALLBACK": transports.platform_base_url(self.spec.callback) or "",
                    "VERITASK_CHANNEL": str(self.attempt.channel),
                    "VERITASK_SKIP_EXIT_CODE": str(self.spec.skip_exit_code),
                    **own,
                },
            )
        except (secrets.SecretError, task_env.TaskEnvError) as exc:
            raise task_process.StartFailed(str(exc)) from exc

    def _open_channel(self) -> None:
        path = self.attempt.channel
        layout.remove_quietly(path)
        os.mkfifo(path, 0o600)
        self._channel_fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        # A writer of our own keeps the FIFO from reporting end-of-file between task writes.
        self._channel_keepalive_fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        self._selector.register(self._channel_fd, selectors.EVENT_READ, "channel")

    def _read_channel(self) -> None:
        if self._channel_fd is None:
            return
        self._channel_buffer += self._drain(self._channel_fd)
        *lines, self._channel_buffer = self._channel_buffer.split(b"\n")
        for line in lines:
            if line.strip():
                self._relay_notice(line)

    def _relay_notice(self, line: bytes) -> None:
        try:
            notice = json.loads(line)
            if not isinstance(notice, dict):
                raise TypeError("a notice is a JSON object")
            match notice.get("kind"):
                case "progress":
                    self._progress.tell(progress.evidence_of(notice))
                case "output_committed":
                    marker = notice.get("marker")
                    if not isinstance(marker, str):
                        raise TypeError("output_committed needs a string marker")
                    self._commit_marker = marker
                    self._emit("output_committed", wire.OutputCommittedEvidence(marker=marker))
                case other:
                    raise TypeError(f"unknown notice kind {other!r}")
        except (ValueError, TypeError) as exc:
            self.log.note(f"ignored a malformed notice from the task: {exc}")

    def _read_output(self) -> tuple[jsontypes.JSONValue, str | None]:
        """The task's output, and why it fails the attempt when it is too large."""
        limit = max_output_bytes(os.environ)
        try:
            size = self.attempt.output.stat().st_size
            if size == 0:
                return None, None  # made empty for a task of another user, left so
            if size > limit:
                error = (
                    f"the task's output is {size} bytes, more than the {limit} bytes an output"
                    f" may be ({MAX_OUTPUT_SETTING}); write the data to storage and return"
                    " its path (or another small reference) instead"
                )
                self.log.note(error)
                return None, error
            value: jsontypes.JSONValue = json.loads(self.attempt.output.read_bytes())
        except FileNotFoundError:
            return None, None
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            self.log.note(f"output.json is not JSON, ignored: {exc}")
            return None, None
        where = outputs.nul_at(value)
        if where is not None:
            error = (
                f"the task's output holds a NUL character (U+0000) at {where}, which the "
                "ledger cannot store; remove it or encode the value (base64, hex)"
            )
            self.log.note(error)
            return None, error
        return value, None

    def _pump_output(self, fd: int) -> bool:
        """Copy what the task wrote to the log; False at end of file."""
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return True
        if chunk:
            self.log.write_output(chunk)
            return True
        self._selector.unregister(fd)
        return False

    # --- signals and plumbing -----------------------------------------------------------

    def _install_signal_handlers(self) -> None:
        # The wakeup fd receives each signal's number; the handler itself needs to do nothing.
        signal.set_wakeup_fd(self._signal_w)
        for signum in _STOP_SIGNALS:
            signal.signal(signum, ignore_signal)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        # The supervisor blocks stop signals across fork: one sent early is handled now.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, set(_STOP_SIGNALS))
        self._selector.register(self._signal_r, selectors.EVENT_READ, "signal")

    def _read_signals(self) -> None:
        if self._drain(self._signal_r):
            self._request_stop(port.ErrorCategory.CANCELLED)

    def _read_notices(self) -> None:
        if delivery.NOTIFY_STOP in self._drain(self._notify_r):
            self.log.note("the platform answered stop: it no longer wants this attempt")
            self._request_stop(port.ErrorCategory.CANCELLED)

    @staticmethod
    def _drain(fd: int) -> bytes:
        data = b""
        while True:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                return data
            if not chunk:
                return data
            data += chunk

    def _release_slot(self) -> None:
        """Tell the supervisor, once, that this attempt's task has ended: its slot is free."""
        on_task_ended, self._on_task_ended = self._on_task_ended, None
        if on_task_ended is not None:
            on_task_ended()

    def _close(self) -> None:
        self._deliverer.abort()
        # A thread that outlives the attempt would keep this process from taking another.
        self._deliverer.join(DELIVERY_JOIN_SECONDS)
        signal.set_wakeup_fd(-1)
        self._selector.close()
        self._transport.close()
        self._release_slot()
        if self._cgroup is not None:
            cgroups.remove(self._cgroup)  # left only if a process of the task still runs
        task = self._task
        fds: list[int | None] = [self._signal_r, self._signal_w, self._notify_r, self._notify_w]
        fds += [self._channel_fd, self._channel_keepalive_fd]
        if task is not None:
            fds += [task.pidfd, task.output_fd, task.confirmation_fd]
        for fd in fds:
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.log.close()


def _has_children() -> bool:
    """This process has a child, running or ended and not yet reaped (none is reaped here)."""
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False
    return True


def _escapees(stats: list[procfs.ProcStat], task: task_process.TaskProcess) -> int:
    return sum(1 for stat in stats if stat.pgrp != task.pgid)


def max_output_bytes(environ: Mapping[str, str]) -> int:
    """The largest output a task may leave: ``VERITASK_MAX_OUTPUT_BYTES`` (a whole number of
    bytes), else 1 MiB."""
    configured = environ.get(MAX_OUTPUT_SETTING, "").strip()
    if configured.isdigit() and int(configured) > 0:
        return int(configured)
    return OUTPUT_EVENT_LIMIT_BYTES


def exit_status(category: port.ErrorCategory) -> int:
    """The worker's exit status for an attempt that ended so."""
    ok = (port.ErrorCategory.NONE, port.ErrorCategory.SKIPPED)
    return EXIT_SUCCEEDED if category in ok else EXIT_FAILED


def ignore_signal(signum: int, frame: object) -> None:
    """A handler for loops that learn of signals from ``signal.set_wakeup_fd``."""


def nonblocking_pipe() -> tuple[int, int]:
    """A pipe for wakeups: neither a full nor an empty one may block a loop."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    os.set_blocking(write_fd, False)
    return read_fd, write_fd


def _lock_attempt(attempt: layout.AttemptDir) -> int | None:
    """Lock the attempt directory while this process works on it; None when another worker
    holds it."""
    return _try_flock(attempt, fcntl.LOCK_EX)


def is_worked_on(attempt: layout.AttemptDir) -> bool:
    """A worker holds the attempt directory's lock: it runs the attempt or delivers its events
    still. False once that worker ended, or left the attempt for another one."""
    try:
        fd = _try_flock(attempt, fcntl.LOCK_SH)
    except FileNotFoundError:
        return False
    if fd is None:
        return True
    os.close(fd)  # and with it the shared lock
    return False


def _try_flock(attempt: layout.AttemptDir, operation: int) -> int | None:
    """The attempt directory, open and locked with ``operation``; None when a lock that
    excludes it is held."""
    fd = os.open(attempt.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, operation | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def pin_worker(attempt: layout.AttemptDir) -> contextlib.AbstractContextManager[None]:
    """While this is held, the attempt's worker cannot leave it for another attempt.

    Whoever signals a worker about an attempt holds it, and first checks that the attempt has
    no exit record: a worker leaves an attempt only after writing one, so a signal sent under
    the pin reaches the worker while that attempt is still its own (see :func:`_leave`).
    """
    return _spec_lock(attempt, fcntl.LOCK_SH)


@contextlib.contextmanager
def _spec_lock(attempt: layout.AttemptDir, operation: int) -> Iterator[None]:
    try:
        fd = os.open(attempt.spec, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        yield  # no spec, no worker: nothing to pin
        return
    try:
        fcntl.flock(fd, operation)
        yield
    finally:
        os.close(fd)


def _leave(attempt: layout.AttemptDir, lock_fd: int) -> None:
    """Let go of an attempt whose exit record is written, to wait for another one.

    Taking the spec's lock exclusively waits for every holder of :func:`pin_worker`: once we
    have it, no signal meant for this attempt can still be on its way (those that came were
    delivered on the way out of the wait, to the do-nothing handler). From here until the next
    assignment a stop signal is meant for this process itself, and ends it.
    """
    try:
        with _spec_lock(attempt, fcntl.LOCK_EX):
            _idle_signals()
    finally:
        os.close(lock_fd)


def _idle_signals() -> None:
    for signum in _STOP_SIGNALS:
        signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, set(_STOP_SIGNALS))


def run_attempt(
    attempt: layout.AttemptDir,
    *,
    on_task_ended: Callable[[], object],
    user: task_user.TaskUser | None = None,
) -> tuple[int, bool]:
    """Run an attempt the supervisor assigned to this process and recorded as its worker.

    Returns the worker's exit status and whether this process may take another attempt: only
    when it is done with this one for good (exit record written, nothing left to deliver, no
    thread left running), so that nothing about this attempt can depend on its pid again.
    """
    lock_fd = _lock_attempt(attempt)
    if lock_fd is None:
        on_task_ended()
        return EXIT_BUSY, False  # its worker.json names us now: never be anyone else's worker
    spec = records.read_spec(attempt)
    status = AttemptRun(attempt, spec, on_task_ended=on_task_ended, user=user).run()
    reusable = attempt.exit_record.exists() and threading.active_count() == 1
    if reusable:
        _leave(attempt, lock_fd)
    # Otherwise the lock stays ours until this process ends, which it does now.
    return status, reusable


@dataclass(frozen=True)
class Ran:
    """What :func:`run_attempt_here` saw of an attempt."""

    #: The worker's exit status for it.
    status: int
    #: Its exit record as the run wrote or found it; None when the run has none (the attempt
    #: was busy, or its task started under an earlier worker that left no record).
    exit_record: records.ExitRecord | None


def run_attempt_here(
    attempt: layout.AttemptDir, spec: port.AttemptSpec, *, companion: Companion
) -> Ran:
    """Run an attempt in this process, which goes on with other work once it is over (a
    Celery pool process).

    The attempt's worker lock is taken for the run and let go after it. The signal handlers
    (and the wakeup fd and the signal mask) that the run sets are put back as they were: a
    stop signal during the run is the attempt's, after it the process's own again. No pin is
    needed (:func:`pin_worker`): whoever signals this process signals the attempt it runs.
    """
    lock_fd = _lock_attempt(attempt)
    if lock_fd is None:
        return Ran(EXIT_BUSY, None)
    try:
        with _signals_restored():
            run = AttemptRun(attempt, spec, companion=companion)
            return Ran(run.run(), run.exit_record)
    finally:
        # A delivery thread stopped in the middle of a request ends with that request. Wait
        # for it: this process forks the next attempt's callables, and a fork must not copy a
        # thread in the middle of anything (a warm worker ends instead, see run_attempt).
        for thread in threading.enumerate():
            if thread.name == delivery.THREAD_NAME:
                thread.join(LINGERING_DELIVERY_SECONDS)
        os.close(lock_fd)


@contextlib.contextmanager
def _signals_restored() -> Iterator[None]:
    touched = (*_STOP_SIGNALS, signal.SIGCHLD, signal.SIGHUP)
    handlers = {signum: signal.getsignal(signum) for signum in touched}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, set())
    wakeup_fd = signal.set_wakeup_fd(-1)
    try:
        yield
    finally:
        signal.set_wakeup_fd(wakeup_fd)
        for signum, handler in handlers.items():
            if handler is not None:
                signal.signal(signum, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


#: A warm worker runs at most this many attempts, then ends, so that whatever an attempt
#: leaves behind in the interpreter cannot pile up without bound.
ATTEMPTS_PER_WORKER = 500

# A supervised worker's control socket. Supervisor -> worker: one attempt key per line, once
# the worker record is written. Worker -> supervisor, one byte each:
TOLD = b"A"
"""It read its attempt key: from now on the attempt is its to start (or to never start)."""
TASK_ENDED = b"R"
"""The attempt's task ended: its slot is free."""
READY = b"I"
"""Done with the attempt: it may be given another."""


class _Control:
    """The worker's end of its control socket. A supervisor that went away ends nothing but
    the warmth: what is running finishes, and the worker then ends."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buffer = b""

    def next_key(self) -> str | None:
        """Block until the supervisor assigns an attempt; None when it closed the socket."""
        while b"\n" not in self._buffer:
            try:
                chunk = self._sock.recv(4096)
            except OSError:
                return None
            if not chunk:
                return None
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode()

    def tell(self, message: bytes) -> bool:
        try:
            self._sock.sendall(message, socket.MSG_NOSIGNAL)
        except OSError:
            return False
        return True


@dataclass(frozen=True)
class Supervised:
    """A warm worker seen from the process that forked it: its end of the control socket,
    its identity, and its record (``workers/<pid>-<ticks>.json``), of which each attempt's
    ``worker.json`` is a link."""

    control: socket.socket
    identity: records.ProcessRecord
    record: Path


def fork_supervised(
    home: layout.ExecutorHome,
    *,
    in_child: Callable[[], None],
    user: task_user.TaskUser | None = None,
) -> Supervised:
    """Fork a warm worker that serves the calling process (:func:`serve_supervisor`), and
    record it. Raises OSError when the system refuses; unrecorded, the child ends.

    ``in_child`` runs first in the child: its session or process group, and forgetting the
    parent's socket objects without closing them for the parent. Every descriptor but the
    control socket is then closed, the parent's locks above all.
    """
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    # A stop signal sent to the new worker before it installed its handlers must wait for
    # them, not kill it on the spot: the child inherits this mask and lifts it itself.
    previous_mask = signal.pthread_sigmask(signal.SIG_BLOCK, set(_STOP_SIGNALS))
    try:
        pid = os.fork()
    except OSError:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)
        ours.close()
        theirs.close()
        raise
    if pid == 0:
        ours.detach()
        _become_supervised(home, theirs, in_child, user)
    signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)
    theirs.close()
    try:
        identity = records.ProcessRecord.of_worker(pid)
        record = home.worker_record(identity.pid, identity.start_ticks)
        home.workers.mkdir(exist_ok=True)
        records.write_process_record(record, identity)
    except OSError:
        ours.close()  # closing our end unrecorded makes it end
        raise
    return Supervised(control=ours, identity=identity, record=record)


def _become_supervised(
    home: layout.ExecutorHome,
    control: socket.socket,
    in_child: Callable[[], None],
    user: task_user.TaskUser | None,
) -> NoReturn:
    status = 70
    try:
        in_child()
        # ps and top show the command name: a worker should not pass for its parent.
        with contextlib.suppress(OSError), open("/proc/self/comm", "w") as comm:
            comm.write("veritask-worker")
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        fd = control.fileno()
        os.closerange(3, fd)
        os.closerange(fd + 1, os.sysconf("SC_OPEN_MAX"))
        status = serve_supervisor(home, control, user=user)
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(status)


def serve_supervisor(
    home: layout.ExecutorHome, control: socket.socket, *, user: task_user.TaskUser | None = None
) -> int:
    """A supervised worker's life: the attempts the supervisor assigns, one at a time, until
    it closes the socket, an attempt leaves this process unfit for another, or the budget of
    ``ATTEMPTS_PER_WORKER`` is spent. Returns the last attempt's exit status."""
    channel = _Control(control)
    status = EXIT_SUCCEEDED
    _idle_signals()
    for _ in range(ATTEMPTS_PER_WORKER):
        key = channel.next_key()
        if key is None:
            break
        # A stop signal from here on is for the attempt: it waits for the attempt's handlers.
        # One that came before ended this process, before it told the supervisor that it
        # read the key: the supervisor then gives the attempt to another worker.
        signal.pthread_sigmask(signal.SIG_BLOCK, set(_STOP_SIGNALS))
        channel.tell(TOLD)
        attempt = home.attempt_for_key(key)
        status, reusable = run_attempt(
            attempt, on_task_ended=lambda: channel.tell(TASK_ENDED), user=user
        )
        if not (reusable and channel.tell(READY)):
            break
    return status


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="veritask-worker", description="Run one Veritask attempt from its spec file."
    )
    parser.add_argument("spec", type=Path, help="the attempt's spec.json, in its attempt directory")
    args = parser.parse_args(argv)
    attempt = layout.AttemptDir(args.spec.resolve().parent)
    try:
        spec = records.read_spec(attempt)
    except (OSError, ValueError) as exc:
        print(f"veritask-worker: cannot read {args.spec}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if _lock_attempt(attempt) is None:
        print(f"veritask-worker: another worker holds {attempt.path}", file=sys.stderr)
        return EXIT_BUSY
    if not attempt.exit_record.exists() and not attempt.task_record.exists():
        identity = records.ProcessRecord.of_worker(os.getpid())
        records.write_process_record(attempt.worker_record, identity)
    return AttemptRun(attempt, spec).run()


if __name__ == "__main__":
    sys.exit(main())
