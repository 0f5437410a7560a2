"""How long the Spark executor takes from submission to a RUNNING driver, beside a bare REST
submission of the same application to the same master in the same run.

Each round submits the app once through ``SparkExecutor.submit`` and polls ``describe`` until
the driver is RUNNING, then once as a bare ``POST /v1/submissions/create`` polled with
``/v1/submissions/status``; each driver is killed once it runs (one at a time: the local worker
has two cores, and a driver holds one). The ratio reads as "what the executor adds to the
master's own submit-to-running latency" (the journal write, the idempotency lock).

Needs a master: ``VERITASK_SPARK_MASTER`` (``tools/spark-local start``; ``tools/spark-local
env`` prints the variables), else it says so and exits 0.

    python -m bench.spark [--rounds 5]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

import httpx

from veritask.execution import port
from veritask.execution.spark import client, engine

_APP = "import time\nprint('running', flush=True)\ntime.sleep(30)\n"
_POLL = 0.02


def _wait_running(state: Callable[[], str | None], deadline: float = 60.0) -> None:
    limit = time.monotonic() + deadline
    while time.monotonic() < limit:
        if state() == "RUNNING":
            return
        time.sleep(_POLL)
    raise SystemExit("a driver did not reach RUNNING in 60 s")


def _wait_gone(http: httpx.Client, master: str, driver_id: str) -> None:
    http.post(f"{master}/v1/submissions/kill/{driver_id}")
    limit = time.monotonic() + 60
    while time.monotonic() < limit:
        status = http.get(f"{master}/v1/submissions/status/{driver_id}").json()
        if status.get("driverState") not in ("SUBMITTED", "RUNNING", "RELAUNCHING"):
            return
        time.sleep(0.1)


def _through_executor(executor: engine.SparkExecutor, app: Path) -> tuple[float, str]:
    instance_id = f"bench-{uuid.uuid4().hex[:12]}"
    spec = port.AttemptSpec(
        instance_id=instance_id,
        attempt_no=1,
        attempt_token=f"token-{instance_id}",
        task=port.SparkApplication(app=str(app)),
        callback=port.HttpCallback("http://127.0.0.1:9"),
    )
    started = time.perf_counter()
    external_id = executor.submit(spec=spec).external_id
    _wait_running(
        lambda: str(executor.describe(external_id=external_id).details.get("driver_state"))
    )
    return time.perf_counter() - started, external_id.removeprefix(engine.EXTERNAL_ID_PREFIX)


def _bare(http: httpx.Client, master: str, app: Path, python: str | None) -> tuple[float, str]:
    properties = {
        "spark.app.name": f"bench-bare-{uuid.uuid4().hex[:8]}",
        "spark.master": "spark://" + master.split("://", 1)[1],
        "spark.submit.deployMode": "cluster",
    }
    if python:
        properties["spark.pyspark.python"] = python
    request = {
        "action": "CreateSubmissionRequest",
        "appResource": str(app),
        "mainClass": engine.PYTHON_RUNNER,
        "appArgs": [str(app), ""],
        "clientSparkVersion": client.CLIENT_SPARK_VERSION,
        "environmentVariables": {"PYSPARK_PYTHON": python} if python else {},
        "sparkProperties": properties,
    }
    started = time.perf_counter()
    driver_id = str(
        http.post(f"{master}/v1/submissions/create", json=request).json()["submissionId"]
    )
    _wait_running(
        lambda: http.get(f"{master}/v1/submissions/status/{driver_id}").json().get("driverState")
    )
    return time.perf_counter() - started, driver_id


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    # No platform listens for the watcher's reports: each would be a warning, none is timed.
    logging.getLogger("veritask.execution.engine_watch").setLevel(logging.ERROR)
    master = os.environ.get(client.MASTER_ENV)
    if not master:
        print(f"bench.spark: {client.MASTER_ENV} is not set (tools/spark-local start); skipped")
        return
    python = os.environ.get("VERITASK_SPARK_PYTHON")
    with tempfile.TemporaryDirectory() as folder, httpx.Client(timeout=30) as http:
        app = Path(folder) / "bench_app.py"
        app.write_text(_APP)
        executor = engine.SparkExecutor(
            master=master,
            ui=client.ui_from_environment(os.environ, master),
            state_dir=Path(folder) / "state",
            python=python,
        )
        ours: list[float] = []
        bare: list[float] = []
        try:
            for _ in range(args.rounds):
                seconds, driver_id = _through_executor(executor, app)
                ours.append(seconds)
                _wait_gone(http, master, driver_id)
                seconds, driver_id = _bare(http, master, app, python)
                bare.append(seconds)
                _wait_gone(http, master, driver_id)
        finally:
            executor.close()
    ours_median, bare_median = statistics.median(ours), statistics.median(bare)
    print(f"spark submit -> RUNNING, {args.rounds} rounds (median):")
    print(f"  through the executor: {ours_median * 1000:8.0f} ms  (all: {_list(ours)})")
    print(f"  bare REST submission: {bare_median * 1000:8.0f} ms  (all: {_list(bare)})")
    print(f"  ratio executor / bare: {ours_median / bare_median:.2f}")


def _list(values: list[float]) -> str:
    return ", ".join(f"{value * 1000:.0f}" for value in values)


if __name__ == "__main__":
    main()
