"""The reports a Spark attempt's watcher sends for it (``execution/spark/watch.py``), into an
outbox folder, from a real master."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from tests.execution.spark import helpers
from tests.execution.spark.conftest import Cluster
from tests.scheduling.harness import wait_for
from veritask.execution import port
from veritask.execution.spark import engine


def _executor(cluster: Cluster, state: Path) -> engine.SparkExecutor:
    return engine.SparkExecutor(
        master=cluster.master,
        ui=cluster.ui,
        state_dir=state,
        work_dir=cluster.work_dir,
        python=cluster.python,
    )


def _reports(outbox: Path) -> list[dict[str, Any]]:
    found = [json.loads(path.read_text()) for path in outbox.glob("*.json")]
    return sorted(found, key=lambda event: int(event["seq"]))


def _outboxed(spec: port.AttemptSpec, outbox: Path) -> port.AttemptSpec:
    return replace(
        spec, callback=port.OutboxCallback(outbox), heartbeat_interval=timedelta(seconds=0.5)
    )


def test_the_watcher_reports_the_start_heartbeats_and_the_end_of_a_driver(
    spark_cluster: Cluster, spark_apps: Path, tmp_path: Path
) -> None:
    outbox = tmp_path / "outbox"
    spec = _outboxed(helpers.spec(spark_apps, 2), outbox)
    executor = _executor(spark_cluster, tmp_path / "state")
    try:
        external_id = executor.submit(spec=spec).external_id
        wait_for(
            lambda: any(e["kind"] == "completed" for e in _reports(outbox)),
            what="the watcher to report the end",
            timeout=45,
            interval=0.1,
        )
        ended = executor.describe(external_id=external_id)
    finally:
        executor.close()

    reports = _reports(outbox)
    kinds = [event["kind"] for event in reports]
    assert kinds[0] == "started" and kinds[-1] == "completed"
    assert kinds.count("started") == kinds.count("completed") == 1
    assert kinds.count("heartbeat") >= 2, "a driver that runs 2 s beats every 0.5 s"
    assert all(event["attempt_token"] == spec.attempt_token for event in reports)
    started, completed = reports[0], reports[-1]
    driver_id = external_id.removeprefix(engine.EXTERNAL_ID_PREFIX)
    assert started["seq"] == 1
    assert started["evidence"]["driver_id"] == driver_id
    assert started["evidence"]["started_at_source"] == "first_seen_running"
    assert started["event_time"] == started["evidence"]["started_at"]
    # The start is the journal's: describe answers it, so another watcher reports it alike.
    assert ended.started_at == datetime.fromisoformat(started["event_time"])
    assert completed["evidence"]["error_category"] == "none"
    assert completed["evidence"]["engine"]["details"]["driver_state"] == "FINISHED"
    seqs = [int(event["seq"]) for event in reports]
    assert seqs == sorted(set(seqs)), "each report its own number, in order"


def test_resume_takes_over_the_watching_of_a_running_driver_once(
    spark_cluster: Cluster, spark_apps: Path, tmp_path: Path
) -> None:
    outbox = tmp_path / "outbox"
    spec = _outboxed(helpers.spec(spark_apps, 2), outbox)
    first = _executor(spark_cluster, tmp_path / "state")
    external_id = first.submit(spec=spec).external_id
    wait_for(
        lambda: any(e["kind"] == "started" for e in _reports(outbox)),
        what="the first watcher to report the start",
        timeout=45,
        interval=0.1,
    )
    first.close()  # as a process that died: its watcher stops
    first.wait_for_watchers(10)
    before = _reports(outbox)

    # Another host: no journal, the driver found by its name among the master's drivers.
    second = _executor(spark_cluster, tmp_path / "elsewhere")
    try:
        watched = second.resume(spec=spec)
        again = second.resume(spec=spec)
        submitted = second.submit(spec=spec)
        second.wait_for_watchers(45)
    finally:
        second.close()

    assert watched and again
    assert submitted == port.Submission(external_id, created=False)
    assert helpers.starts(spark_apps, spec.instance_id) == 1, "the app ran once"
    after = [e for e in _reports(outbox) if e not in before]
    assert [e["kind"] for e in after].count("completed") == 1, "one watcher, one end"
    beats = [int(e["seq"]) for e in after if e["kind"] == "heartbeat"]
    assert beats and min(beats) > max(int(e["seq"]) for e in before), (
        "the second watcher numbers after the first: both count from the master's submission"
    )
