"""A task's processes that left its process group (``setsid``, a daemon's double fork) are
stopped with it, and the stop is confirmed only once none of them is left.

Each test runs twice: with the attempt's cgroup (where this machine has a cgroup v2 hierarchy
the worker may write to) and without (``VERITASK_TASK_CGROUPS=off``: the worker as subreaper
and the attempt's mark in the environment).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from tests.execution.conftest import Engine, FakePlatform, engine_on, evidence, wait_until
from veritask.core.states import PROCESSES_ENDED
from veritask.execution import cgroups, port, procfs, records


@pytest.fixture(params=["cgroup", "subreaper"])
def engine(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    platform: FakePlatform,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Engine]:
    if request.param == "cgroup" and cgroups.own_base() is None:
        pytest.skip("no cgroup v2 hierarchy this process may write to")
    # The supervisor, and so every worker, takes the setting from this environment.
    monkeypatch.setenv(cgroups.SETTING, "auto" if request.param == "cgroup" else "off")
    with engine_on(tmp_path, platform, slots=4) as engine:
        yield engine


def _uses_cgroup(engine: Engine, spec: port.AttemptSpec) -> bool:
    return cgroups.locate(engine.attempt(spec).path) is not None


def _left(pid: int) -> bool:
    """The process still exists in /proc and has not ended (a zombie has ended)."""
    stat = procfs.read_stat(pid)
    return stat is not None and not stat.ended


def _read_pid(path: Path) -> int:
    """The pid of the process that escaped (it writes it once in a session of its own), once
    it runs ``sleep``."""
    pid = int(wait_until(lambda: path.read_text() if path.exists() else None, what=str(path)))

    def escaped() -> bool:
        stat = procfs.read_stat(pid)
        comm = Path(f"/proc/{pid}/comm")
        return stat is not None and stat.session == pid and comm.read_text().strip() == "sleep"

    wait_until(escaped, what=f"{pid} to leave in a session of its own and run sleep")
    return pid


def _escaping(pid_file: Path, *, prefix: str = "") -> str:
    """A process that leaves in a session of its own (with ``prefix`` before its shell),
    writes its pid there, and becomes ``sleep 1000``."""
    write = f"echo $$ > {pid_file}.tmp; /bin/mv {pid_file}.tmp {pid_file}"
    return f"setsid {prefix}/bin/sh -c '{write}; exec /bin/sleep 1000'"


def _running(command: str) -> str:
    """``command`` (ending in ``&`` or ``;``), then run until stopped."""
    return f"{command} while :; do sleep 0.05; done"


def test_cancel_stops_a_child_that_left_the_group_with_setsid(engine: Engine) -> None:
    pid_file = engine.workspace / "escaped.pid"
    spec = engine.spec(_running(f"{_escaping(pid_file)} &"))
    external_id = engine.executor.submit(spec=spec).external_id
    escaped = _read_pid(pid_file)
    task = wait_until(lambda: records.read_process_record(engine.attempt(spec).task_record))
    stat = procfs.read_stat(escaped)
    assert stat is not None and stat.pgrp != task.pgid  # it left the task's group
    assert _uses_cgroup(engine, spec) is (os.environ[cgroups.SETTING] == "auto")

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
    spec = engine.spec(_running(f"({_escaping(pid_file, prefix='env -i ')} &);"))
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
    # The task ends once the child has left its group and written its pid.
    spec = engine.spec(f"{_escaping(pid_file)} & while [ ! -e {pid_file} ]; do sleep 0.01; done")

    ended = engine.run(spec)

    assert ended.error_category is port.ErrorCategory.NONE
    assert not _left(int(pid_file.read_text()))


def test_a_gone_workers_escaped_process_keeps_the_attempt_running_until_stopped(
    engine: Engine,
) -> None:
    """Without its worker, the attempt's processes are found by the mark the worker put in
    their environment: describe says running while one is left, and cancel stops it."""
    pid_file = engine.workspace / "escaped.pid"
    spec = engine.spec(_running(f"{_escaping(pid_file)} &"))
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


def test_a_gone_workers_process_without_group_or_mark_is_found_by_its_cgroup(
    engine: Engine,
) -> None:
    """The one case only the cgroup covers: a process that left the group, dropped its
    environment (so the mark) and outlived its worker."""
    if os.environ[cgroups.SETTING] == "off":
        pytest.skip("without a cgroup, nothing on the machine names this process's attempt")
    pid_file = engine.workspace / "daemon.pid"
    spec = engine.spec(_running(f"({_escaping(pid_file, prefix='env -i ')} &);"))
    external_id = engine.executor.submit(spec=spec).external_id
    escaped = _read_pid(pid_file)
    attempt = engine.attempt(spec)
    worker = wait_until(lambda: records.read_process_record(attempt.worker_record))
    task = wait_until(lambda: records.read_process_record(attempt.task_record))
    cgroup = cgroups.locate(attempt.path)
    assert task.pgid is not None and cgroup is not None
    assert escaped in cgroups.members(cgroup)

    os.kill(worker.pid, signal.SIGKILL)
    wait_until(lambda: not procfs.is_running(worker.pid, worker.start_ticks), what="the worker")
    procfs.signal_group(task.pgid, signal.SIGKILL)
    wait_until(lambda: not procfs.group_members(task.pgid or 0, started_since=task.start_ticks))

    seen = engine.executor.describe(external_id=external_id)
    assert seen.engine_state is port.EngineState.RUNNING

    def stopped() -> port.Observation | None:
        engine.executor.cancel(external_id=external_id)
        seen = engine.executor.describe(external_id=external_id)
        return None if seen.engine_state is port.EngineState.RUNNING else seen

    assert wait_until(stopped, what="the escaped process to be stopped").details[PROCESSES_ENDED]
    assert not _left(escaped)
    engine.executor.cleanup(external_id=external_id)
    assert not cgroup.exists()  # the worker could not remove it; cleanup did


def test_an_unknown_cgroup_setting_fails_the_attempt_naming_it(
    tmp_path: Path, platform: FakePlatform, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(cgroups.SETTING, "sometimes")
    with engine_on(tmp_path, platform, slots=1) as engine:
        spec = engine.spec("touch ran")
        ended = engine.run(spec)

        assert ended.error_category is port.ErrorCategory.START_ERROR
        reason = evidence(engine.wait_delivered(spec))["start_error"]
        assert isinstance(reason, str) and "VERITASK_TASK_CGROUPS must be auto or off" in reason
        assert not (engine.workspace / "ran").exists()


def test_the_tasks_orphans_that_end_are_reaped_while_it_runs(engine: Engine) -> None:
    """A process whose parent ended is handed to the worker; once it ends too, the worker
    reaps it at its next heartbeat, not only when the task ends."""
    ready = engine.workspace / "ready"
    spec = engine.spec(
        f"(true &); (true &); touch {ready}; while :; do sleep 0.05; done",
        heartbeat_interval=timedelta(seconds=0.1),
    )
    external_id = engine.executor.submit(spec=spec).external_id
    wait_until(ready.exists, what="the task's orphans")
    worker = wait_until(lambda: records.read_process_record(engine.attempt(spec).worker_record))
    task = wait_until(lambda: records.read_process_record(engine.attempt(spec).task_record))

    def zombies() -> list[int]:
        below = procfs.descendants(worker.pid, started_since=task.start_ticks)
        return [stat.pid for stat in below if stat.ended and stat.ppid == worker.pid]

    wait_until(lambda: not zombies(), timeout=5, what="the worker to reap its orphans")
    engine.executor.cancel(external_id=external_id)
    assert engine.wait_ended(external_id).error_category is port.ErrorCategory.CANCELLED
