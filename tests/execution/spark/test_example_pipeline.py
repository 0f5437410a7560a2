"""The example that runs on both external engines (examples/numbers_to_spark.yaml), as it is
written: a local task makes the shared folder, a container writes the run's numbers there, and
a Spark driver adds them up. Through a scheduler (in this process) on a real Podman and a real
standalone master."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import SQLITE
from tests.execution.container.conftest import IMAGE, container_host  # noqa: F401 (a fixture)
from tests.execution.spark.conftest import Cluster
from tests.scheduling.harness import Harness
from veritask.core.states import InstanceState, RunExecutionState
from veritask.execution.container import engine as container_engine
from veritask.execution.container import registration as container_registration
from veritask.execution.spark import engine as spark_engine

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
#: The image the example names, which a machine with no registry cannot pull: the test image is
#: given its name.
EXAMPLE_IMAGE = "docker.io/library/busybox:1.36"
SHARED = "/tmp/veritask-examples"

pytestmark = pytest.mark.slow


@pytest.fixture
def both_engines(
    database_url: str,
    tmp_path: Path,
    container_host: str,  # noqa: F811 (the fixture imported above)
    spark_cluster: Cluster,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[tuple[Harness, spark_engine.SparkExecutor]]:
    subprocess.run(["podman", "tag", IMAGE, EXAMPLE_IMAGE], check=True, timeout=60)
    monkeypatch.setenv(container_registration.VOLUMES_ENV, SHARED)
    containers = container_engine.ContainerExecutor(host=container_host, allowed_volumes=[SHARED])
    drivers = spark_engine.SparkExecutor(
        master=spark_cluster.master,
        ui=spark_cluster.ui,
        state_dir=tmp_path / "spark-state",
        work_dir=spark_cluster.work_dir,
        python=spark_cluster.python,
        apps=EXAMPLES,
    )
    harness = Harness(
        database_url, tmp_path / "home", others={"container": containers, "spark": drivers}
    )
    yield harness, drivers
    harness.close()
    containers.close()
    drivers.close()


# One database is enough: what the example shows is the engines, not the ledger.
@pytest.mark.parametrize("database_kind", [SQLITE], indirect=True)
def test_a_container_feeds_a_spark_job_in_one_run(
    both_engines: tuple[Harness, spark_engine.SparkExecutor],
) -> None:
    run, drivers = both_engines
    run.apply((EXAMPLES / "numbers_to_spark.yaml").read_text())
    run_id = run.trigger("numbers_to_spark")

    state, _ = run.finish(run_id, timeout=150)

    instances = run.instances(run_id)
    assert state is RunExecutionState.SUCCESS, {n: i.state for n, i in instances.items()}
    assert {name: instance.state for name, instance in instances.items()} == {
        "make_folder": InstanceState.SUCCESS,
        "make_numbers": InstanceState.SUCCESS,
        "add_up": InstanceState.SUCCESS,
    }
    assert Path(SHARED, "numbers", f"{run_id}.txt").read_text().split() == [
        str(n) for n in range(1, 101)
    ]
    log = drivers.read_log(instance_id=instances["add_up"].id, attempt_no=1) or b""
    assert b"add up to 5050" in log
