"""The executor contract, run against the container executor on a real Podman."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import ClassVar

import pytest

from tests.execution.container import helpers
from tests.execution.container.conftest import container_host  # noqa: F401
from tests.execution.contract.suite import ExecutorContract, Harness, Work
from veritask.execution import port
from veritask.execution.container import engine
from veritask.execution.container import registration as container_registration

_LINES = {
    Work.QUICK: "echo started; sleep 0.2",
    Work.LONG: "echo started; sleep 60",
}


class ContainerHarness(Harness):
    """Each attempt's task writes ``started`` to its output as it starts; its starts are the
    ``started`` lines in the logs of every container labelled with its instance."""

    engine_name = "container"
    unknown_source = container_registration.Source.INSPECT
    ended_source = container_registration.Source.INSPECT
    stopped_source = container_registration.Source.INSPECT
    killed_source = container_registration.Source.INSPECT
    killed_evidence: ClassVar[dict[str, port.DetailValue]] = {
        "signal": 9,
        "oom_killed": False,
    }

    def __init__(self, host: str) -> None:
        self.host = host
        self.containers = engine.ContainerExecutor(host=host)
        self.executor = self.containers

    def spec(self, work: Work, *, instance_id: str | None = None) -> port.AttemptSpec:
        return helpers.spec(_LINES[work], instance_id=instance_id or self.new_instance_id())

    def starts(self, spec: port.AttemptSpec) -> int:
        total = 0
        for found in helpers.containers_of(self.host, spec.instance_id):
            names = found.get("Names")
            name = str(names[0]).lstrip("/") if isinstance(names, list) and names else ""
            instance_id, _, number = name.rpartition("-a")
            del instance_id
            log = self.containers.read_log(instance_id=spec.instance_id, attempt_no=int(number))
            total += (log or b"").count(b"started\n")
        return total

    def external_id(self, instance_id: str, attempt_no: int) -> str:
        return engine.EXTERNAL_ID_PREFIX + engine.container_name(instance_id, attempt_no)

    def queued_spec(self, work: Work) -> port.AttemptSpec:
        pytest.skip(
            "a container engine has no queue: the container is made and started as it is "
            "submitted (its short 'created' state is no phase a test can hold)"
        )

    def kill_outside_veritask(self, spec: port.AttemptSpec) -> None:
        name = engine.container_name(spec.instance_id, spec.attempt_no)
        subprocess.run(["podman", "kill", "--signal", "KILL", name], check=True, timeout=30)

    def still_runs(self, spec: port.AttemptSpec) -> bool:
        inspected = helpers.inspect(self.host, spec)
        state = inspected.get("State") if inspected else None
        return isinstance(state, dict) and state.get("Running") is True


class TestContainerExecutorContract(ExecutorContract):
    @pytest.fixture
    def harness(self, container_host: str) -> Iterator[Harness]:  # noqa: F811
        made = ContainerHarness(container_host)
        yield made
        made.containers.close()
