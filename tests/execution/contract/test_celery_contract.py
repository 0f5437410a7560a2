"""The executor contract, run against the Celery executor: real RabbitMQ, Redis and Veritask
Celery worker processes (tests/execution/celery/conftest.py)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import ClassVar

import pytest

from tests.execution.celery.conftest import (  # noqa: F401
    Hosts,
    celery_services,
    make_hosts,
)
from tests.execution.contract.suite import ExecutorContract, Harness, Work
from veritask.execution import layout, port, procfs, records
from veritask.execution.celery import executor as celery_executor
from veritask.execution.celery import registration as celery_registration

pytestmark = [pytest.mark.slow]
HOST = "host-a"


class CeleryHarness(Harness):
    """One host (a Celery worker process) consuming the test's own queue."""

    engine_name = "celery"
    patience = 30.0
    killed_evidence: ClassVar[dict[str, port.DetailValue]] = {
        "signal": signal.SIGKILL,
        "exit_record": True,
    }
    unknown_source = celery_registration.Source.SUBMISSION
    queued_source = celery_registration.Source.SUBMISSION
    ended_source = celery_registration.Source.RESULT
    stopped_source = celery_registration.Source.RESULT
    killed_source = celery_registration.Source.RESULT

    def __init__(self, hosts: Hosts, tmp_path: Path) -> None:
        self.hosts = hosts
        self.workspace = tmp_path / "workspace"
        self.workspace.mkdir()
        self.celery = hosts.executor()
        self.executor = self.celery
        self.unconsumed: set[str] = set()

    def spec(self, work: Work, *, instance_id: str | None = None) -> port.AttemptSpec:
        instance_id = instance_id or self.new_instance_id()
        marker = self._marker(instance_id)
        command = {
            Work.QUICK: f"echo start >> {marker}",
            Work.LONG: f"echo start >> {marker}; exec sleep 60",
        }[work]
        return port.AttemptSpec(
            instance_id=instance_id,
            attempt_no=1,
            attempt_token=f"token-{instance_id}",
            task=port.ShellCommand(command),
            callback=port.OutboxCallback(self.workspace / "outbox"),
            grace_period=timedelta(seconds=1),
            heartbeat_interval=timedelta(seconds=0.5),
        )

    def starts(self, spec: port.AttemptSpec) -> int:
        marker = self._marker(spec.instance_id)
        return len(marker.read_text().splitlines()) if marker.exists() else 0

    def external_id(self, instance_id: str, attempt_no: int) -> str:
        return celery_executor.external_id(instance_id, attempt_no)

    def queued_spec(self, work: Work) -> port.AttemptSpec:
        """On a queue no host consumes: the message waits in the broker."""
        queue = f"{self.hosts.queue}-unconsumed"
        self.unconsumed.add(queue)
        return dataclasses.replace(self.spec(work), queue=queue)

    def kill_outside_veritask(self, spec: port.AttemptSpec) -> None:
        attempt = self._attempt(spec)
        task = self.wait(
            lambda: records.read_process_record(attempt.task_record),
            f"the task process of {spec.instance_id} to be recorded",
        )
        os.kill(task.pid, signal.SIGKILL)

    def still_runs(self, spec: port.AttemptSpec) -> bool:
        task = records.read_process_record(self._attempt(spec).task_record)
        return task is not None and procfs.is_running(task.pid, task.start_ticks)

    def _attempt(self, spec: port.AttemptSpec) -> layout.AttemptDir:
        """The attempt's directory on the host that ran it (each host has a home of its own)."""
        home = layout.ExecutorHome(self.hosts.tmp_path / HOST / "executor")
        return home.attempt(spec.instance_id, spec.attempt_no)

    def close(self) -> None:
        with contextlib.suppress(Exception), self.celery.app.connection_for_write() as conn:
            for queue in self.unconsumed:
                conn.default_channel.queue_delete(queue)

    def _marker(self, instance_id: str) -> Path:
        return self.workspace / f"{instance_id}.starts"


class TestCeleryExecutorContract(ExecutorContract):
    @pytest.fixture
    def harness(
        self,
        make_hosts: Callable[..., Hosts],  # noqa: F811
        tmp_path: Path,
    ) -> Iterator[Harness]:
        hosts = make_hosts()
        hosts.start(HOST)
        made = CeleryHarness(hosts, tmp_path)
        yield made
        made.close()
