"""An attempt run inside a long-lived process (a Celery pool process: ``run_attempt_here``),
with a companion ticking beside it, and the process's own signal handling put back after."""

from __future__ import annotations

import fcntl
import os
import secrets
import signal
import threading
import time
from datetime import timedelta
from pathlib import Path
from types import FrameType

from veritask.execution import layout, port, records, worker


class CountingCompanion:
    """Counts its ticks, and asks for a stop from the tick numbered ``stop_at`` on."""

    def __init__(self, *, interval: float, stop_at: int | None = None) -> None:
        self.interval = interval
        self.stop_at = stop_at
        self.ticks: list[float] = []

    def tick(self) -> bool:
        self.ticks.append(time.monotonic())
        return self.stop_at is not None and len(self.ticks) >= self.stop_at


def prepared(tmp_path: Path, command: str) -> tuple[layout.AttemptDir, port.AttemptSpec]:
    home = layout.ExecutorHome(tmp_path / "executor")
    spec = port.AttemptSpec(
        instance_id=f"here-{secrets.token_hex(4)}",
        attempt_no=1,
        attempt_token="token-1",
        task=port.ShellCommand(command),
        callback=port.OutboxCallback(tmp_path / "outbox"),
        grace_period=timedelta(seconds=0.2),
    )
    attempt = home.attempt(spec.instance_id, spec.attempt_no)
    attempt.path.mkdir(parents=True)
    layout.write_json_atomically(attempt.spec, records.encode_spec(spec), durable=False)
    return attempt, spec


def category(attempt: layout.AttemptDir) -> port.ErrorCategory:
    record = records.read_exit_record(attempt)
    assert record is not None
    return record.error_category


def test_the_companion_ticks_while_the_task_runs_and_its_stop_cancels_it(tmp_path: Path) -> None:
    attempt, spec = prepared(tmp_path, "exec sleep 30")
    companion = CountingCompanion(interval=0.05, stop_at=4)
    started = time.monotonic()

    status = worker.run_attempt_here(attempt, spec, companion=companion).status

    assert status == worker.EXIT_FAILED
    assert category(attempt) is port.ErrorCategory.CANCELLED
    assert len(companion.ticks) >= 4
    assert companion.ticks[0] - started >= 0.04  # a tick comes an interval after the start
    assert time.monotonic() - started < 10  # the stop, not the task, ended it


class FailingFirstCompanion(CountingCompanion):
    """Its first tick fails, as a call to an engine that is away for a moment does."""

    def tick(self) -> bool:
        if not self.ticks:
            self.ticks.append(time.monotonic())
            raise ConnectionError("Redis is restarting")
        return super().tick()


def test_a_companion_that_fails_once_does_not_end_the_supervision(tmp_path: Path) -> None:
    attempt, spec = prepared(tmp_path, "exec sleep 30")
    companion = FailingFirstCompanion(interval=0.05, stop_at=3)

    status = worker.run_attempt_here(attempt, spec, companion=companion).status

    # The run went on after the failed tick, and the later stop still reached the task.
    assert status == worker.EXIT_FAILED
    assert category(attempt) is port.ErrorCategory.CANCELLED
    assert "Redis is restarting" in attempt.log.read_text()


def test_a_quick_task_ends_before_its_companion_is_due(tmp_path: Path) -> None:
    attempt, spec = prepared(tmp_path, "true")
    companion = CountingCompanion(interval=60)

    ran = worker.run_attempt_here(attempt, spec, companion=companion)

    assert ran.status == worker.EXIT_SUCCEEDED
    assert category(attempt) is port.ErrorCategory.NONE
    assert companion.ticks == []
    # What the run hands back is what it wrote: the delivery stores it without reading it.
    written = records.read_exit_record(attempt)
    assert ran.exit_record is not None and written is not None
    assert ran.exit_record.encode() == written.encode()


def test_a_sigterm_during_the_run_stops_the_attempt_and_the_process_keeps_its_handler(
    tmp_path: Path,
) -> None:
    attempt, spec = prepared(tmp_path, "exec sleep 30")
    received: list[int] = []

    def own_handler(signum: int, frame: FrameType | None) -> None:
        received.append(signum)

    previous = signal.signal(signal.SIGTERM, own_handler)
    mask_before = signal.pthread_sigmask(signal.SIG_BLOCK, set())
    try:
        # As a revoke's terminate does: SIGTERM to the process running the attempt.
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM)).start()
        status = worker.run_attempt_here(
            attempt, spec, companion=CountingCompanion(interval=60)
        ).status

        assert status == worker.EXIT_FAILED
        assert category(attempt) is port.ErrorCategory.CANCELLED
        assert received == []  # the attempt's stop, not the process's
        assert signal.getsignal(signal.SIGTERM) is own_handler
        assert signal.pthread_sigmask(signal.SIG_BLOCK, set()) == mask_before
        assert signal.set_wakeup_fd(-1) == -1  # none before the run, none after it
        os.kill(os.getpid(), signal.SIGTERM)
        assert received == [signal.SIGTERM]  # after the run, SIGTERM is the process's again
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_an_attempt_another_worker_holds_is_not_run(tmp_path: Path) -> None:
    attempt, spec = prepared(tmp_path, "true")
    held = os.open(attempt.path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)  # what a worker running the attempt holds
        status = worker.run_attempt_here(
            attempt, spec, companion=CountingCompanion(interval=60)
        ).status
    finally:
        os.close(held)
    assert status == worker.EXIT_BUSY
    assert records.read_exit_record(attempt) is None
