"""The executor contract, run against the local executor: a real supervisor and real processes."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from tests.execution.conftest import Engine, FakePlatform, engine_on
from tests.execution.contract.suite import ExecutorContract, Harness, Work
from veritask.execution import layout, local, port, procfs, records


class LocalHarness(Harness):
    """One slot, so that a second attempt waits in the supervisor's queue behind the first."""

    engine_name = "local"
    killed_evidence: ClassVar[dict[str, port.DetailValue]] = {
        "signal": signal.SIGKILL,
        "exit_record": True,
    }
    unknown_source = local.Source.ATTEMPT_DIR
    queued_source = local.Source.SUPERVISOR
    ended_source = local.Source.EXIT_RECORD
    stopped_source = local.Source.EXIT_RECORD
    killed_source = local.Source.EXIT_RECORD

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.executor = engine.executor

    def spec(self, work: Work, *, instance_id: str | None = None) -> port.AttemptSpec:
        instance_id = instance_id or self.new_instance_id()
        return self.engine.spec(_command(work, self._marker(instance_id)), instance_id=instance_id)

    def starts(self, spec: port.AttemptSpec) -> int:
        marker = self._marker(spec.instance_id)
        return len(marker.read_text().splitlines()) if marker.exists() else 0

    def external_id(self, instance_id: str, attempt_no: int) -> str:
        return local.external_id(instance_id, attempt_no)

    def queued_spec(self, work: Work) -> port.AttemptSpec:
        ahead = self.spec(Work.LONG)
        self.executor.submit(spec=ahead)
        self.wait_started(ahead)
        return self.spec(work)

    def kill_outside_veritask(self, spec: port.AttemptSpec) -> None:
        task = records.read_process_record(self.engine.attempt(spec).task_record)
        assert task is not None, "a running attempt has recorded its task's process"
        os.kill(task.pid, signal.SIGKILL)

    def still_runs(self, spec: port.AttemptSpec) -> bool:
        return _task_runs(self.engine.attempt(spec))

    def _marker(self, instance_id: str) -> Path:
        return self.engine.workspace / f"{instance_id}.starts"


def _task_runs(attempt: layout.AttemptDir) -> bool:
    task = records.read_process_record(attempt.task_record)
    return task is not None and procfs.is_running(task.pid, task.start_ticks)


def _command(work: Work, marker: Path) -> str:
    """Shell tasks; ``exec`` makes the recorded task process the sleep itself."""
    match work:
        case Work.QUICK:
            return f"echo start >> {marker}"
        case Work.LONG:
            return f"echo start >> {marker}; exec sleep 60"


class TestLocalExecutorContract(ExecutorContract):
    @pytest.fixture
    def harness(self, tmp_path: Path, platform: FakePlatform) -> Iterator[Harness]:
        with engine_on(tmp_path, platform, slots=1) as engine:
            yield LocalHarness(engine)
