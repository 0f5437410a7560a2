"""Stopping attempts: cancel, timeout, the platform's stop answer, and a worker that dies."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from tests.execution.conftest import Engine, FakePlatform, engine_on, evidence, wait_until
from veritask.core.states import PROCESSES_ENDED
from veritask.execution import local, port, procfs, records


def _ended(pid: int) -> bool:
    stat = procfs.read_stat(pid)
    return stat is None or stat.ended


def _blocking(gate: Path) -> str:
    """A task that runs until ``gate`` exists, quietly (nothing to write to a dead pipe)."""
    return f"while [ ! -e {gate} ]; do sleep 0.02; done"


def test_cancel_stops_the_whole_task_group(engine: Engine) -> None:
    child_pid_file = engine.workspace / "child.pid"
    spec = engine.spec(
        f"sleep 60 & echo $! > {child_pid_file}.tmp; mv {child_pid_file}.tmp {child_pid_file}; wait"
    )
    external_id = engine.executor.submit(spec=spec).external_id
    child_pid = int(
        wait_until(
            lambda: child_pid_file.read_text() if child_pid_file.exists() else None,
            what="the task's background child",
        )
    )

    engine.executor.cancel(external_id=external_id)
    observation = engine.wait_ended(external_id)

    assert observation.engine_state is port.EngineState.FAILED
    assert observation.error_category is port.ErrorCategory.CANCELLED
    assert observation.details["signal"] == signal.SIGTERM
    wait_until(lambda: _ended(child_pid), what="the task's background child to end")
    assert evidence(engine.wait_delivered(spec))["error_category"] == "cancelled"


def test_a_task_that_ignores_sigterm_is_killed_after_the_grace_period(engine: Engine) -> None:
    ready = engine.workspace / "ready"
    spec = engine.spec(
        f"trap '' TERM; touch {ready}; {_blocking(engine.workspace / 'never')}",
        grace_period=timedelta(seconds=0.3),
    )
    external_id = engine.executor.submit(spec=spec).external_id
    wait_until(ready.exists, what="the task to ignore SIGTERM")

    cancelled_at = time.monotonic()
    engine.executor.cancel(external_id=external_id)
    observation = engine.wait_ended(external_id)

    assert time.monotonic() - cancelled_at >= 0.3
    assert observation.error_category is port.ErrorCategory.CANCELLED
    assert observation.details["signal"] == signal.SIGKILL
    assert "grace period over" in engine.attempt(spec).log.read_text()


def test_the_timeout_stops_the_task(engine: Engine) -> None:
    spec = engine.spec("sleep 30", timeout=timedelta(seconds=0.3))

    started = time.monotonic()
    observation = engine.run(spec)

    assert observation.engine_state is port.EngineState.FAILED
    assert observation.error_category is port.ErrorCategory.TIMEOUT
    assert time.monotonic() - started < 10
    assert evidence(engine.wait_delivered(spec))["error_category"] == "timeout"


def test_a_stop_answer_from_the_platform_stops_the_task(engine: Engine) -> None:
    spec = engine.spec(_blocking(engine.workspace / "never"))
    engine.platform.stop_instances.add(spec.instance_id)

    observation = engine.run(spec)

    assert observation.error_category is port.ErrorCategory.CANCELLED
    assert "the platform answered stop" in engine.attempt(spec).log.read_text()


def test_a_killed_worker_leaves_evidence_not_a_verdict(engine: Engine) -> None:
    spec = engine.spec(_blocking(engine.workspace / "never"))
    external_id = engine.executor.submit(spec=spec).external_id
    engine.wait_state(external_id, port.EngineState.RUNNING)
    worker = records.read_process_record(engine.attempt(spec).worker_record)
    assert worker is not None

    os.kill(worker.pid, signal.SIGKILL)
    wait_until(lambda: not procfs.is_running(worker.pid, worker.start_ticks), what="the worker")
    orphaned = engine.executor.describe(external_id=external_id)

    # The task outlived its worker: the process table says it runs, and that nobody watches it.
    assert orphaned.engine_state is port.EngineState.RUNNING
    assert orphaned.source is local.Source.PROCESS_TABLE
    assert orphaned.details["orphaned"] is True
    assert orphaned.details["worker_alive"] is False
    assert orphaned.details["exit_record"] is False

    # Cancel reaches the orphaned task's group without its worker.
    engine.executor.cancel(external_id=external_id)
    unknown = engine.wait_state(external_id, port.EngineState.UNKNOWN)

    assert unknown.details["exit_record"] is False
    assert unknown.details["worker_alive"] is False
    assert unknown.details["task_alive"] is False
    assert unknown.exit_code is None and unknown.error_category is None
    assert not engine.attempt(spec).exit_record.exists()


def test_a_frozen_workers_task_group_is_stopped_by_the_repeated_cancel(engine: Engine) -> None:
    """A worker frozen by SIGSTOP stops nothing: the cancel repeated past the grace period
    signals the task's group itself (SIGTERM, then SIGKILL), and describe, which cannot say
    running any more, says that no process of the task runs."""
    ready = engine.workspace / "ready"
    grace = timedelta(seconds=0.3)
    spec = engine.spec(
        f"trap '' TERM; touch {ready}; {_blocking(engine.workspace / 'never')}",
        grace_period=grace,
    )
    external_id = engine.executor.submit(spec=spec).external_id
    wait_until(ready.exists, what="the task to ignore SIGTERM")
    # The task may run before its worker recorded it: frozen before that, it never would.
    wait_until(engine.attempt(spec).task_record.exists, what="the task's record")
    worker = records.read_process_record(engine.attempt(spec).worker_record)
    assert worker is not None
    os.kill(worker.pid, signal.SIGSTOP)
    try:
        wait_until(
            lambda: procfs.is_stopped(worker.pid, worker.start_ticks), what="the worker to freeze"
        )
        frozen = engine.executor.describe(external_id=external_id)
        assert frozen.engine_state is port.EngineState.RUNNING
        assert frozen.details["worker_stopped"] is True
        assert frozen.details["task_alive"] is True
        assert PROCESSES_ENDED not in frozen.details

        cancelled_at = time.monotonic()

        def task_gone() -> port.Observation | None:
            engine.executor.cancel(external_id=external_id)  # as each reconciler sweep does
            seen = engine.executor.describe(external_id=external_id)
            return None if seen.engine_state is port.EngineState.RUNNING else seen

        stopped = wait_until(task_gone, what="the frozen worker's task to be stopped")

        # The task ignores SIGTERM: only the SIGKILL after the second grace period ends it.
        assert time.monotonic() - cancelled_at >= 2 * grace.total_seconds()
        assert stopped.engine_state is port.EngineState.UNKNOWN
        assert stopped.source is local.Source.PROCESS_TABLE
        assert stopped.details[PROCESSES_ENDED] is True
        assert stopped.details["worker_stopped"] is True
        assert stopped.details["worker_alive"] is True
        assert stopped.details["task_alive"] is False
        assert stopped.details["exit_record"] is False
    finally:
        os.kill(worker.pid, signal.SIGCONT)
    # Thawed, the worker reaps its task and records the stop it was asked for.
    ended = engine.wait_ended(external_id)
    assert ended.error_category is port.ErrorCategory.CANCELLED
    assert ended.details["signal"] == signal.SIGKILL
    assert ended.details["worker_stopped"] is False


def test_a_gone_workers_task_ended_is_known_to_run_no_process(engine: Engine) -> None:
    spec = engine.spec(_blocking(engine.workspace / "never"))
    external_id = engine.executor.submit(spec=spec).external_id
    engine.wait_state(external_id, port.EngineState.RUNNING)
    worker = records.read_process_record(engine.attempt(spec).worker_record)
    task = records.read_process_record(engine.attempt(spec).task_record)
    assert worker is not None and task is not None and task.pgid is not None

    os.kill(worker.pid, signal.SIGKILL)
    wait_until(lambda: not procfs.is_running(worker.pid, worker.start_ticks), what="the worker")
    procfs.signal_group(task.pgid, signal.SIGKILL)
    unknown = engine.wait_state(external_id, port.EngineState.UNKNOWN)

    assert unknown.details[PROCESSES_ENDED] is True
    assert unknown.details["worker_stopped"] is False


@pytest.fixture
def one_slot(tmp_path: Path, platform: FakePlatform) -> Iterator[Engine]:
    with engine_on(tmp_path, platform, slots=1) as engine:
        yield engine


def test_cancelling_a_queued_attempt_confirms_at_once_without_starting_it(
    one_slot: Engine,
) -> None:
    gate = one_slot.workspace / "gate"
    first = one_slot.spec(_blocking(gate))
    second = one_slot.spec("touch should-not-run")
    first_id = one_slot.executor.submit(spec=first).external_id
    one_slot.wait_state(first_id, port.EngineState.RUNNING)
    second_id = one_slot.executor.submit(spec=second).external_id

    queued = one_slot.executor.describe(external_id=second_id)
    one_slot.executor.cancel(external_id=second_id)
    cancelled = one_slot.wait_ended(second_id)

    assert queued.engine_state is port.EngineState.PENDING
    assert queued.source is local.Source.SUPERVISOR
    assert queued.details["queue_position"] == 0
    assert cancelled.error_category is port.ErrorCategory.CANCELLED
    assert cancelled.started_at is None and cancelled.exit_code is None
    assert not (one_slot.workspace / "should-not-run").exists()
    one_slot.wait_delivered(second)
    assert one_slot.platform.kinds_of(second.instance_id) == ["completed"]
    assert one_slot.executor.describe(external_id=first_id).engine_state is port.EngineState.RUNNING
    gate.touch()
    assert one_slot.wait_ended(first_id).error_category is port.ErrorCategory.NONE
