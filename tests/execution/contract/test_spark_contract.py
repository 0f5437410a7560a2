"""The executor contract, run against the Spark executor on a real standalone master."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import httpx
import pytest

from tests.execution.contract.suite import ExecutorContract, Harness, Work
from tests.execution.spark import helpers
from tests.execution.spark.conftest import Cluster, spark_apps, spark_cluster  # noqa: F401
from veritask.execution import port
from veritask.execution.spark import engine
from veritask.execution.spark import registration as spark_registration

_SECONDS = {Work.QUICK: 0.2, Work.LONG: 60.0}
#: No driver's id: the master never made one this early.
_UNKNOWN_DRIVER = "driver-20000101000000-0000"


class SparkHarness(Harness):
    """Each attempt's driver runs the sleeper app, which appends ``started`` to a file of its
    instance as it starts."""

    engine_name = "spark"
    patience = 45.0
    unknown_source = spark_registration.Source.STATUS
    queued_source = spark_registration.Source.STATUS
    ended_source = spark_registration.Source.STATUS
    stopped_source = spark_registration.Source.STATUS
    killed_source = spark_registration.Source.STATUS
    killed_evidence: ClassVar[dict[str, port.DetailValue]] = {"driver_state": "KILLED"}

    def __init__(self, cluster: Cluster, apps: Path, state: Path) -> None:
        self.cluster = cluster
        self.apps = apps
        self.spark = engine.SparkExecutor(
            master=cluster.master,
            ui=cluster.ui,
            state_dir=state,
            work_dir=cluster.work_dir,
            python=cluster.python,
        )
        self.executor = self.spark

    def spec(self, work: Work, *, instance_id: str | None = None) -> port.AttemptSpec:
        return helpers.spec(self.apps, _SECONDS[work], instance_id=instance_id)

    def starts(self, spec: port.AttemptSpec) -> int:
        return helpers.starts(self.apps, spec.instance_id)

    def external_id(self, instance_id: str, attempt_no: int) -> str:
        found = self.spark.external_id_of(instance_id=instance_id, attempt_no=attempt_no)
        return found or engine.EXTERNAL_ID_PREFIX + _UNKNOWN_DRIVER

    def queued_spec(self, work: Work) -> port.AttemptSpec:
        # A driver that asks for more cores than the worker has waits in the master's queue.
        return helpers.spec(self.apps, _SECONDS[work], conf={"spark.driver.cores": "3"})

    def kill_outside_veritask(self, spec: port.AttemptSpec) -> None:
        external_id = self.external_id(spec.instance_id, spec.attempt_no)
        driver_id = external_id.removeprefix(engine.EXTERNAL_ID_PREFIX)
        answer = httpx.post(f"{self.cluster.master}/v1/submissions/kill/{driver_id}", timeout=30)
        assert answer.json()["success"] is True, answer.text

    def still_runs(self, spec: port.AttemptSpec) -> bool:
        """Whether a process of this host names the attempt's application (the driver's JVM
        has it in its command line; its Python app is the JVM's child)."""
        wanted = engine.app_name(
            engine.attempt_name(spec.instance_id, spec.attempt_no), spec.attempt_token
        ).encode()
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                if wanted in (proc / "cmdline").read_bytes():
                    return True
            except OSError:
                continue
        return False


class TestSparkExecutorContract(ExecutorContract):
    @pytest.fixture
    def harness(
        self,
        spark_cluster: Cluster,  # noqa: F811
        spark_apps: Path,  # noqa: F811
        tmp_path: Path,
    ) -> Iterator[Harness]:
        made = SparkHarness(spark_cluster, spark_apps, tmp_path / "spark-state")
        yield made
        made.spark.close()

    def test_describe_of_an_ended_attempt_is_its_outcome_and_cleanup_forgets_it(
        self, harness: Harness
    ) -> None:
        pytest.skip(
            "a Spark master keeps its ended drivers (spark.deploy.retainedDrivers) and has no "
            "request to forget one: cleanup keeps the driver's log and removes its directory "
            "(tests/execution/spark), and the master still describes the driver's end"
        )
