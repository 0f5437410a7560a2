"""A Spark standalone cluster for the Spark executor's tests.

``VERITASK_SPARK_MASTER`` (with ``VERITASK_SPARK_WORK_DIR`` and ``VERITASK_SPARK_PYTHON``) names
one already running (``.ci/run`` starts one with ``tools/spark-local start``); without it the
session starts its own with ``tools/spark-local`` on ports of its own, when pyspark is installed
where that script puts it. Without either the tests are skipped, unless
``VERITASK_REQUIRE_SERVICES=1``: then they fail.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from veritask.execution.spark import engine

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "tools" / "spark-local"
SPARK_HOME = Path(os.environ.get("VERITASK_SPARK_HOME", "/opt/veritask-spark"))


@dataclass(frozen=True)
class Cluster:
    """A master (its REST server and web UI), its worker's work directory and the drivers'
    Python, and the ports ``tools/spark-local`` runs it on (None: started by someone else)."""

    master: str
    ui: str
    work_dir: Path
    python: str
    ports: dict[str, str] | None = None

    def environ(self) -> dict[str, str]:
        return {
            "VERITASK_SPARK_MASTER": self.master,
            "VERITASK_SPARK_UI": self.ui,
            "VERITASK_SPARK_WORK_DIR": str(self.work_dir),
            "VERITASK_SPARK_PYTHON": self.python,
        }


def unavailable(message: str) -> None:
    if os.environ.get("VERITASK_REQUIRE_SERVICES") == "1":
        pytest.fail(f"VERITASK_REQUIRE_SERVICES=1 and {message}", pytrace=False)
    pytest.skip(message)


def local_environ(ports: dict[str, str], state: Path) -> dict[str, str]:
    return {**os.environ, **ports, "SPARK_LOCAL_STATE": str(state)}


def start_local(ports: dict[str, str], state: Path) -> Cluster:
    """A master and a worker of ``tools/spark-local`` on ``ports``, its files under ``state``."""
    if not (SPARK_HOME / "venv" / "bin" / "python").exists():
        unavailable(f"pyspark is not installed in {SPARK_HOME} (tools/spark-local install)")
    done = subprocess.run(
        [str(SCRIPT), "start"],
        env=local_environ(ports, state),
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode != 0:
        unavailable(f"tools/spark-local start failed: {done.stderr[-2000:]}")
    return Cluster(
        master=f"http://127.0.0.1:{ports['SPARK_LOCAL_REST_PORT']}",
        ui=f"http://127.0.0.1:{ports['SPARK_LOCAL_UI_PORT']}",
        work_dir=state / "work",
        python=str(SPARK_HOME / "venv" / "bin" / "python"),
        ports=ports,
    )


def stop_local(cluster: Cluster, state: Path) -> None:
    assert cluster.ports is not None
    subprocess.run(
        [str(SCRIPT), "stop"], env=local_environ(cluster.ports, state), timeout=120, check=False
    )


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    master = os.environ.get("VERITASK_SPARK_MASTER")
    if master:
        work_dir = os.environ.get("VERITASK_SPARK_WORK_DIR")
        if not work_dir:
            unavailable("VERITASK_SPARK_MASTER is set without VERITASK_SPARK_WORK_DIR")
            return
        yield Cluster(
            master=master,
            ui=os.environ.get("VERITASK_SPARK_UI", "http://127.0.0.1:8080"),
            work_dir=Path(work_dir),
            python=os.environ.get(
                "VERITASK_SPARK_PYTHON", str(SPARK_HOME / "venv" / "bin" / "python")
            ),
        )
        return
    state = tmp_path_factory.mktemp("spark")
    ports = {
        "SPARK_LOCAL_MASTER_PORT": "17077",
        "SPARK_LOCAL_REST_PORT": "16066",
        "SPARK_LOCAL_UI_PORT": "18080",
        "SPARK_LOCAL_WORKER_UI_PORT": "18081",
    }
    cluster = start_local(ports, state)
    try:
        yield cluster
    finally:
        stop_local(cluster, state)


@pytest.fixture(scope="session")
def spark_apps(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tests' Python applications: each appends ``started`` to the file its first argument
    names, then sleeps its second argument's seconds (then exits with its third, if any)."""
    folder = tmp_path_factory.mktemp("spark-apps")
    (folder / "sleeper.py").write_text(
        "import sys, time\n"
        "with open(sys.argv[1], 'a') as out:\n"
        "    out.write('started\\n')\n"
        "print('started', flush=True)\n"
        "time.sleep(float(sys.argv[2]))\n"
        "print('done', flush=True)\n"
        "sys.exit(int(sys.argv[3]) if len(sys.argv) > 3 else 0)\n"
    )
    return folder


@pytest.fixture
def spark_executor(spark_cluster: Cluster, tmp_path: Path) -> Iterator[engine.SparkExecutor]:
    executor = engine.SparkExecutor(
        master=spark_cluster.master,
        ui=spark_cluster.ui,
        state_dir=tmp_path / "spark-state",
        work_dir=spark_cluster.work_dir,
        python=spark_cluster.python,
    )
    yield executor
    executor.close()
