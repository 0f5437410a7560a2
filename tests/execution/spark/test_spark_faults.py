"""Faults around Spark tasks, with the real ``veritask up`` (a subprocess on a SQLite ledger in
a temporary home) and a real standalone master: the platform killed with SIGKILL while a driver
runs, a driver killed outside Veritask, a master restarted without recovery mode.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from tests.acceptance.conftest import Veritask, eventually, shut_down, start_up
from tests.execution.spark import helpers
from tests.execution.spark.conftest import Cluster, start_local, stop_local
from veritask.execution.spark import engine
from veritask.ledger import dialects, schema

pytestmark = pytest.mark.slow

DEADLINE = 60.0
#: A master and worker of the master-restart test's own, so that the shared one keeps running.
RESTARTED_PORTS = {
    "SPARK_LOCAL_MASTER_PORT": "17277",
    "SPARK_LOCAL_REST_PORT": "16266",
    "SPARK_LOCAL_UI_PORT": "18280",
    "SPARK_LOCAL_WORKER_UI_PORT": "18281",
}


def definition(name: str, apps: Path, seconds: float, *, lease: str = "30s") -> str:
    return f"""\
name: {name}
tasks:
  job:
    app: {apps / "sleeper.py"}
    args: [{helpers.starts_file(apps, name)}, {seconds}]
    lease: {lease}
    evidence_window: 2s
    on_unknown: fail
    retry: {{max_retries: 0}}
"""


class Platform:
    """``veritask up`` processes on one home and one Spark master, and looks at the ledger."""

    def __init__(self, root: Path, cluster: Cluster) -> None:
        self.root = root
        self.cluster = cluster
        self.home = root / "home"
        self.definitions = root / "definitions"
        self.definitions.mkdir(parents=True)
        self.ups: list[Veritask] = []

    def up(self) -> Veritask:
        started = start_up(
            self.home,
            self.definitions,
            self.root / f"up{len(self.ups)}.log",
            VERITASK_SPARK_STATE_DIR=str(self.root / "spark-state"),
            **self.cluster.environ(),
        )
        self.ups.append(started)
        return started

    def kill(self, veritask: Veritask) -> None:
        veritask.process.kill()  # SIGKILL: nothing of `up` runs any more
        veritask.process.wait(timeout=10)

    def trigger(self, veritask: Veritask, name: str) -> str:
        done = veritask.cli("trigger", name)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    def state_is(self, veritask: Veritask, run_id: str, *states: str) -> Any:
        def seen() -> Any:
            found = veritask.cli_json("show", run_id)["instances"][0]
            return found if found["state"] in states else None

        return eventually(seen, what=f"the instance to be {states}", timeout=DEADLINE)

    def rows(self, table: sa.Table, instance_id: str, kind: str | None = None) -> list[Any]:
        ledger = dialects.create_engine(f"sqlite:///{self.home / 'veritask.db'}")
        query = sa.select(table).where(table.c.instance_id == instance_id)
        if kind is not None:
            query = query.where(table.c.kind == kind)
        try:
            with dialects.read_transaction(ledger) as connection:
                return list(connection.execute(query.order_by(table.c[_order(table)])).all())
        finally:
            ledger.dispose()

    def evidence(self, instance_id: str, kind: str) -> list[dict[str, Any]]:
        return [dict(row.evidence) for row in self.rows(schema.events, instance_id, kind)]

    def driver_id(self, instance_id: str) -> str:
        [acknowledged] = self.rows(schema.events, instance_id, "submit_acknowledged")
        external_id = str(acknowledged.evidence["external_id"])
        return external_id.removeprefix(engine.EXTERNAL_ID_PREFIX)

    def close(self) -> None:
        for veritask in self.ups:
            if veritask.process.poll() is None:
                shut_down(veritask)


def _order(table: sa.Table) -> str:
    return "position" if "position" in table.c else "id"


@pytest.fixture
def platform(tmp_path: Path, spark_cluster: Cluster, spark_apps: Path) -> Iterator[Platform]:
    made = Platform(tmp_path, spark_cluster)
    try:
        yield made
    finally:
        made.close()


def test_a_driver_outlives_a_killed_platform_and_finishes_once(
    platform: Platform, spark_apps: Path
) -> None:
    (platform.definitions / "survivor.yaml").write_text(
        definition("survivor", spark_apps, 6, lease="3s")
    )
    first = platform.up()
    run_id = platform.trigger(first, "survivor")
    instance = platform.state_is(first, run_id, "RUNNING")
    platform.kill(first)

    second = platform.up()
    finished = platform.state_is(second, run_id, "SUCCESS", "FAILED", "CANCELLED")

    assert finished["state"] == "SUCCESS"
    assert [a["state"] for a in finished["attempts"]] == ["SUCCESS"], "no retry, no twin"
    assert helpers.starts(spark_apps, "survivor") == 1, "the app ran once"
    # The second platform found the driver by the journal and reported its end.
    [completed] = platform.evidence(instance["id"], "completed")
    details = completed["engine"]["details"]
    assert details["driver_id"] == platform.driver_id(instance["id"])
    assert details["driver_state"] == "FINISHED"
    # Both watchers reported the start the journal keeps: one moment, however often said.
    starts = platform.evidence(instance["id"], "started")
    assert {started["started_at"] for started in starts} == {starts[0]["started_at"]}
    assert starts[0]["started_at_source"] == "first_seen_running"


def test_a_driver_killed_outside_veritask_fails_with_the_masters_evidence(
    platform: Platform, spark_apps: Path, spark_cluster: Cluster
) -> None:
    (platform.definitions / "victim.yaml").write_text(definition("victim", spark_apps, 60))
    veritask = platform.up()
    run_id = platform.trigger(veritask, "victim")
    instance = platform.state_is(veritask, run_id, "RUNNING")
    driver_id = platform.driver_id(instance["id"])
    killed = httpx.post(f"{spark_cluster.master}/v1/submissions/kill/{driver_id}", timeout=30)
    assert killed.json()["success"] is True

    finished = platform.state_is(veritask, run_id, "FAILED", "SUCCESS", "CANCELLED")

    assert finished["state"] == "FAILED", "a kill by someone else is a failure, per policy"
    [completed] = platform.evidence(instance["id"], "completed")
    assert completed["error_category"] == "killed"
    assert completed["engine"]["details"]["driver_state"] == "KILLED"
    assert completed["engine"]["engine_id"] == driver_id


@pytest.fixture
def own_cluster(tmp_path: Path) -> Iterator[Cluster]:
    cluster = start_local(RESTARTED_PORTS, tmp_path / "cluster")
    try:
        yield cluster
    finally:
        stop_local(cluster, tmp_path / "cluster")


def test_a_master_restarted_without_recovery_is_absence_then_on_unknown(
    tmp_path: Path, own_cluster: Cluster, spark_apps: Path
) -> None:
    platform = Platform(tmp_path / "platform", own_cluster)
    try:
        (platform.definitions / "forgotten.yaml").write_text(
            definition("forgotten", spark_apps, 60)
        )
        first = platform.up()
        run_id = platform.trigger(first, "forgotten")
        instance = platform.state_is(first, run_id, "RUNNING")
        platform.kill(first)
        stop_local(own_cluster, tmp_path / "cluster")
        start_local(RESTARTED_PORTS, tmp_path / "cluster")

        second = platform.up()
        finished = platform.state_is(second, run_id, "FAILED", "SUCCESS", "CANCELLED")
    finally:
        platform.close()

    assert finished["state"] == "FAILED", "on_unknown: fail, after the evidence window"
    assert [a["state"] for a in finished["attempts"]] == ["ABANDONED"], "fenced, no retry"
    # The restart's reconciler recorded the master's answer, then raised its alert.
    observed = platform.evidence(instance["id"], "engine_observed")
    assert observed and observed[0]["engine_state"] == "not_found"
    assert observed[0]["details"]["driver_id"] == platform.driver_id(instance["id"])
    alerts = platform.rows(schema.alerts, instance["id"])
    absent = [row for row in alerts if str(row.dedup_key).endswith(":absent")]
    assert len(absent) == 1 and absent[0].category == "reconciliation"
    assert json.loads(json.dumps(absent[0].evidence))["engine"]["engine_state"] == "not_found"
    [fenced] = platform.evidence(instance["id"], "fenced")
    assert fenced["on_unknown"] == "fail"
