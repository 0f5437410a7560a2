"""The Spark executor on a real standalone master: what the contract suite does not cover."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from tests.execution.spark import helpers
from tests.execution.spark.conftest import Cluster, start_local, stop_local
from tests.scheduling.harness import Harness, wait_for
from veritask.core.states import InstanceState, RunExecutionState
from veritask.execution import errors, port
from veritask.execution.spark import engine, registration
from veritask.ledger import dialects, schema


def _ended(executor: engine.SparkExecutor, external_id: str) -> port.Observation:
    def ended() -> port.Observation | None:
        observation = executor.describe(external_id=external_id)
        return observation if observation.ended else None

    return wait_for(ended, what=f"{external_id} to end", timeout=45, interval=0.1)


def _executor(cluster: Cluster, state: Path) -> engine.SparkExecutor:
    return engine.SparkExecutor(
        master=cluster.master,
        ui=cluster.ui,
        state_dir=state,
        work_dir=cluster.work_dir,
        python=cluster.python,
    )


def test_a_submission_whose_answer_was_lost_finds_its_driver_by_name(
    spark_cluster: Cluster, spark_apps: Path, tmp_path: Path
) -> None:
    spec = helpers.spec(spark_apps, 0.5)
    first = _executor(spark_cluster, tmp_path / "state")
    submitted = first.submit(spec=spec)
    first.close()
    wait_for(lambda: helpers.starts(spark_apps, spec.instance_id) > 0, what="the driver to start")
    # As a process killed between sending the submission and writing down its answer leaves
    # the journal: the attempt was sent, its driver's id is not known.
    record = tmp_path / "state" / "attempts" / f"{engine.attempt_name(spec.instance_id, 1)}.json"
    written = json.loads(record.read_text())
    record.write_text(json.dumps({**written, "driver_id": None}))

    again = _executor(spark_cluster, tmp_path / "state")
    try:
        found = again.submit(spec=spec)
        ended = _ended(again, found.external_id)
        log = again.read_log(instance_id=spec.instance_id, attempt_no=1)
    finally:
        again.close()

    assert found == port.Submission(submitted.external_id, created=False)
    assert ended.engine_state is port.EngineState.SUCCEEDED
    assert helpers.starts(spark_apps, spec.instance_id) == 1
    assert log is not None and b"started\ndone\n" in log and b"--- stderr ---" in log


def test_a_driver_that_fails_is_failed_with_its_log_kept_after_cleanup(
    spark_executor: engine.SparkExecutor, spark_cluster: Cluster, spark_apps: Path
) -> None:
    spec = helpers.spec(spark_apps, 0.1, exit_code=3)

    external_id = spark_executor.submit(spec=spec).external_id
    ended = _ended(spark_executor, external_id)
    spark_executor.cleanup(external_id=external_id)
    driver_id = external_id.removeprefix(engine.EXTERNAL_ID_PREFIX)
    kept = spark_executor.read_log(instance_id=spec.instance_id, attempt_no=1)

    assert ended.engine_state is port.EngineState.FAILED
    assert ended.error_category is port.ErrorCategory.TASK_ERROR
    assert ended.details["driver_state"] == "FAILED" and ended.engine_id == driver_id
    assert not (spark_cluster.work_dir / driver_id).exists()
    assert kept is not None and b"started\n" in kept


@pytest.fixture
def spark_run(
    database_url: str, tmp_path: Path, spark_cluster: Cluster
) -> Iterator[tuple[Harness, engine.SparkExecutor]]:
    spark = _executor(spark_cluster, tmp_path / "spark-state")
    made = Harness(database_url, tmp_path / "home", others={"spark": spark})
    yield made, spark
    made.close()
    spark.close()


def test_a_spark_tasks_outcome_is_what_the_master_says_of_its_driver(
    spark_run: tuple[Harness, engine.SparkExecutor], spark_apps: Path
) -> None:
    run, _ = spark_run
    app = spark_apps / "sleeper.py"
    run.apply(
        f"""
name: sparks
tasks:
  ok:
    app: {app}
    args: [{spark_apps / "ok.starts"}, 0.1]
  broken:
    executor: spark
    app: {app}
    args: [{spark_apps / "broken.starts"}, 0.1, 3]
    conf: {{spark.driver.memory: 512m}}
    retry: {{max_retries: 0}}
"""
    )
    run_id = run.trigger("sparks")

    state, _ = run.finish(run_id, timeout=90)

    instances = run.instances(run_id)
    assert state is RunExecutionState.FAILED
    assert instances["ok"].state is InstanceState.SUCCESS
    assert instances["broken"].state is InstanceState.FAILED
    [(number, _, _, external_id)] = run.attempts(instances["broken"].id)
    assert number == 1 and external_id is not None
    assert external_id.startswith(engine.EXTERNAL_ID_PREFIX)
    # The watcher reported the end, with the master's answer as its evidence.
    [completed] = _evidence(run, instances["broken"].id, "completed")
    details = completed["engine"]["details"]
    assert completed["error_category"] == "task_error"
    assert details["driver_state"] == "FAILED"
    assert details["driver_id"] == external_id.removeprefix(engine.EXTERNAL_ID_PREFIX)


def _evidence(run: Harness, instance_id: str, kind: str) -> list[dict[str, Any]]:
    e = schema.events.c
    with dialects.read_transaction(run.engine) as connection:
        found = connection.execute(
            sa.select(e.evidence).where(e.instance_id == instance_id, e.kind == kind)
        ).scalars()
        return [dict(evidence) for evidence in found]


def test_a_master_restarted_without_recovery_no_longer_knows_the_driver(
    spark_apps: Path, tmp_path: Path
) -> None:
    """On a master of its own (other ports), so that the other tests' master keeps going."""
    ports = {
        "SPARK_LOCAL_MASTER_PORT": "17177",
        "SPARK_LOCAL_REST_PORT": "16166",
        "SPARK_LOCAL_UI_PORT": "18180",
        "SPARK_LOCAL_WORKER_UI_PORT": "18181",
    }
    cluster = start_local(ports, tmp_path / "cluster")
    executor = _executor(cluster, tmp_path / "state")
    try:
        spec = helpers.spec(spark_apps, 60)
        external_id = executor.submit(spec=spec).external_id
        wait_for(
            lambda: (
                executor.describe(external_id=external_id).engine_state is port.EngineState.RUNNING
            ),
            what="the driver to run",
            timeout=45,
        )
        stop_local(cluster, tmp_path / "cluster")
        start_local(ports, tmp_path / "cluster")

        gone = executor.describe(external_id=external_id)
    finally:
        executor.close()
        stop_local(cluster, tmp_path / "cluster")

    assert gone.engine_state is port.EngineState.NOT_FOUND
    assert gone.source is registration.Source.STATUS
    assert gone.details["driver_id"] == external_id.removeprefix(engine.EXTERNAL_ID_PREFIX)


def test_a_relative_app_without_a_folder_to_find_it_in_is_refused_for_good(
    tmp_path: Path,
) -> None:
    # No master answers at this address: the refusal comes before anything is sent or written.
    executor = engine.SparkExecutor(master="http://127.0.0.1:9", state_dir=tmp_path / "state")
    relative = helpers.spec(tmp_path, 0)
    relative = dataclasses.replace(
        relative, task=port.SparkApplication(app="jobs/sleeper.py", args=(), conf={})
    )
    try:
        with pytest.raises(errors.ExecutorError, match="VERITASK_SPARK_APPS") as refused:
            executor.submit(spec=relative)
    finally:
        executor.close()

    assert refused.value.retryable is False
    assert "'jobs/sleeper.py'" in str(refused.value)
    assert not list((tmp_path / "state").rglob("*.json"))  # no journal entry to find again
