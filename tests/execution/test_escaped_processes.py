"""A task's processes that left its process group (``setsid``, a daemon's double fork) are
stopped with it, and the stop is confirmed only once none of them is left."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from tests.execution.conftest import Engine, wait_until
from veritask.core.states import PROCESSES_ENDED
from veritask.execution import port, procfs, records


def _left(pid: int) -> bool:
    """The process still exists in /proc and has not ended (a zombie has ended)."""
    stat = procfs.read_stat(pid)
    return stat is not None and not stat.ended


def _read_pid(path: Path) -> int:
    return int(wait_until(lambda: path.read_text() if path.exists() else None, what=str(path)))


def _escaping(pid_file: Path, command: str) -> str:
    """Start ``command`` in a session of its own, write its pid, then run until stopped."""
    return (
        f"setsid {command} & echo $! > {pid_file}.tmp; mv {pid_file}.tmp {pid_file}; "
        "while :; do sleep 0.05; done"
    )


def test_cancel_stops_a_child_that_left_the_group_with_setsid(engine: Engine) -> None:
    pid_file = engine.workspace / "escaped.pid"
    spec = engine.spec(_escaping(pid_file, "sleep 1000"))
    external_id = engine.executor.submit(spec=spec).external_id
    escaped = _read_pid(pid_file)
    task = wait_until(lambda: records.read_process_record(engine.attempt(spec).task_record))
    stat = procfs.read_stat(escaped)
    assert stat is not None and stat.pgrp != task.pgid  # it left the task's group

    engine.executor.cancel(external_id=external_id)
    confirmed = engine.wait_ended(external_id)

    # At the moment the stop is confirmed, no process of the task is left.
    assert not _left(escaped)
    assert confirmed.error_category is port.ErrorCategory.CANCELLED
    assert "left the task's process group" in engine.attempt(spec).log.read_text()


def test_cancel_stops_a_daemon_that_also_dropped_its_environment(engine: Engine) -> None:
    """A double fork into a new session, with ``env -i``: neither its group nor its
    environment says whose it is; its ancestry does (the worker is its subreaper)."""
    pid_file = engine.workspace / "daemon.pid"
    daemon = f"(setsid env -i sleep 1000 & echo $! > {pid_file}.tmp; mv {pid_file}.tmp {pid_file})"
    spec = engine.spec(f"{daemon}; while :; do sleep 0.05; done")
    external_id = engine.executor.submit(spec=spec).external_id
    escaped = _read_pid(pid_file)
    worker = wait_until(lambda: records.read_process_record(engine.attempt(spec).worker_record))
    # Its parent ended: it was handed to the nearest subreaper, the worker.
    wait_until(lambda: (s := procfs.read_stat(escaped)) is not None and s.ppid == worker.pid)

    engine.executor.cancel(external_id=external_id)
    engine.wait_ended(external_id)

    assert not _left(escaped)


def test_a_task_that_ends_leaves_no_process_behind(engine: Engine) -> None:
    pid_file = engine.workspace / "escaped.pid"
    spec = engine.spec(f"setsid sleep 1000 & echo $! > {pid_file}")

    ended = engine.run(spec)

    assert ended.error_category is port.ErrorCategory.NONE
    assert not _left(_read_pid(pid_file))


def test_a_gone_workers_escaped_process_keeps_the_attempt_running_until_stopped(
    engine: Engine,
) -> None:
    """Without its worker, the attempt's processes are found by the mark the worker put in
    their environment: describe says running while one is left, and cancel stops it."""
    pid_file = engine.workspace / "escaped.pid"
    spec = engine.spec(_escaping(pid_file, "sleep 1000"))
    external_id = engine.executor.submit(spec=spec).external_id
    escaped = _read_pid(pid_file)
    attempt = engine.attempt(spec)
    worker = wait_until(lambda: records.read_process_record(attempt.worker_record))
    task = wait_until(lambda: records.read_process_record(attempt.task_record))
    assert task.pgid is not None

    os.kill(worker.pid, signal.SIGKILL)
    wait_until(lambda: not procfs.is_running(worker.pid, worker.start_ticks), what="the worker")
    procfs.signal_group(task.pgid, signal.SIGKILL)
    wait_until(lambda: not procfs.group_members(task.pgid or 0, started_since=task.start_ticks))

    orphaned = engine.executor.describe(external_id=external_id)
    assert orphaned.engine_state is port.EngineState.RUNNING
    assert orphaned.details["orphaned"] is True

    def stopped() -> port.Observation | None:
        engine.executor.cancel(external_id=external_id)  # as each reconciler sweep does
        seen = engine.executor.describe(external_id=external_id)
        return None if seen.engine_state is port.EngineState.RUNNING else seen

    unknown = wait_until(stopped, what="the escaped process to be stopped")

    assert unknown.details[PROCESSES_ENDED] is True
    assert not _left(escaped)
