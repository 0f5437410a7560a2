"""SQL tasks through real scheduler processes: the statement lives in the server, not in us.

Each test runs ``python -m veritask.scheduling`` on a PostgreSQL ledger with the warehouse
named by ``VERITASK_SQL_URL_WAREHOUSE``, and looks at the server itself for the evidence.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.execution.sql.conftest import warehouse_query
from tests.scheduling.harness import Ledgers, scheduler_command, scheduler_env, wait_for
from veritask.core.states import (
    DefinitionLifecycle,
    InstanceState,
    RunExecutionState,
    TriggerKind,
)
from veritask.execution import local
from veritask.execution.sql import engine, markers
from veritask.ledger import dialects, queries, schema
from veritask.scheduling import triggers
from veritask.services import definitions, runs
from veritask.services.platform import Platform

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


def definition(statement: str, policy: str = "") -> str:
    """``policy`` adds lines to the task (indented as its other fields)."""
    return f"""
name: nightly
tasks:
  load:
    sql: "{statement}"
    connection: warehouse
    lease: 2s
    evidence_window: 1s
    on_unknown: fail
{policy}"""


class Cluster:
    """Scheduler processes on one ledger and one warehouse, started and killed by the test."""

    def __init__(self, database_url: str, warehouse_url: str, tmp_path: Path) -> None:
        self.url = database_url
        self.warehouse_url = warehouse_url
        self.tmp_path = tmp_path
        self.db = Ledgers(dialects.create_engine(database_url))
        self.processes: list[subprocess.Popen[bytes]] = []

    def start_scheduler(self, *flags: str) -> subprocess.Popen[bytes]:
        env = scheduler_env()
        env["VERITASK_SQL_URL_WAREHOUSE"] = self.warehouse_url
        with open(self.tmp_path / "schedulers.log", "ab") as output:
            process = subprocess.Popen(
                scheduler_command(self.tmp_path / f"home{len(self.processes)}", self.url, *flags),
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=output,
                env=env,
            )
        self.processes.append(process)
        return process

    def trigger(self, statement: str, policy: str = "") -> str:
        triggers.apply_definition(self.db.ledger, definition(statement, policy))
        return triggers.trigger(
            self.db.ledger, name="nightly", kind=TriggerKind.MANUAL, actor="operator:test"
        ).run_id

    def backends(self, run_id: str, *, sleeping: bool = False) -> list[tuple[object, ...]]:
        """The warehouse's server processes running the run's ``load`` attempt 1; with
        ``sleeping``, only one inside ``pg_sleep``: past the claim, which commits first."""
        instance = self.db.instances(run_id)["load"].id
        name = markers.AttemptName(instance, 1).application_name
        in_sleep = " AND wait_event = 'PgSleep'" if sleeping else ""
        return warehouse_query(
            self.warehouse_url,
            "SELECT pid FROM pg_stat_activity WHERE state = 'active' "
            f"AND application_name = '{name}'{in_sleep}",
        )

    def finished(self, run_id: str) -> tuple[RunExecutionState, str]:
        active = (RunExecutionState.RUNNING, RunExecutionState.QUEUED, RunExecutionState.CANCELLING)

        def done() -> tuple[RunExecutionState, str] | None:
            state = self.db.run(run_id)
            return None if state[0] in active else state

        return wait_for(done, what=f"run {run_id} to finish", interval=0.1)

    def evidence(self, run_id: str, kind: str) -> list[dict[str, object]]:
        e = schema.events.c
        instance = self.db.instances(run_id)["load"].id
        with dialects.read_transaction(self.db.engine) as connection:
            rows = connection.execute(
                sa.select(e.evidence).where(e.instance_id == instance, e.kind == kind)
            ).scalars()
            return [dict(row) for row in rows]

    def sender(
        self, run_id: str, processes: list[subprocess.Popen[bytes]]
    ) -> subprocess.Popen[bytes]:
        """The scheduler process holding the connection that sent the run's statement: the
        one whose socket has the backend's client port (``/proc/net/tcp``)."""
        instance = self.db.instances(run_id)["load"].id
        name = markers.AttemptName(instance, 1).application_name
        ((port,),) = warehouse_query(
            self.warehouse_url,
            f"SELECT client_port FROM pg_stat_activity WHERE application_name = '{name}'",
        )
        inodes = set()
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if int(fields[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(f"socket:[{fields[9]}]")
        for process in processes:
            for fd in Path(f"/proc/{process.pid}/fd").iterdir():
                with contextlib.suppress(OSError):
                    if os.readlink(fd) in inodes:
                        return process
        raise AssertionError(f"no scheduler holds the connection from port {port}")

    def schedulers_recovered(self) -> int:
        """How many scheduler processes are past their start recovery, which would take up the
        reports of any statement already running."""
        log = (self.tmp_path / "schedulers.log").read_text(errors="replace")
        return log.count("recovery done:")

    def schedulers_registered(self) -> int:
        with dialects.read_transaction(self.db.engine) as connection:
            found = connection.execute(sa.select(sa.func.count()).select_from(schema.schedulers))
            return int(found.scalar_one())

    def engine_word(self, run_id: str) -> dict[str, object]:
        """What the server said when the statement ended: the ``completed`` report its watcher
        made of ``describe``'s answer, or the reconciler's ``engine_observed``."""
        for report in self.evidence(run_id, "completed"):
            engine = report.get("engine")
            assert isinstance(engine, dict), report
            return {**engine, "error_category": report["error_category"]}
        observed = self.evidence(run_id, "engine_observed")
        assert observed, "the end is the engine's word, not a guess"
        return observed[-1]

    def close(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=10)
        self.db.engine.dispose()


@pytest.fixture
def cluster(database_url: str, warehouse_url: str, tmp_path: Path) -> Iterator[Cluster]:
    made = Cluster(database_url, warehouse_url, tmp_path)
    warehouse_query(warehouse_url, "CREATE TABLE loaded (n int)")
    try:
        yield made
    finally:
        made.close()


def test_a_long_statement_survives_every_veritask_process_and_is_reconciled_to_success(
    cluster: Cluster,
) -> None:
    first = cluster.start_scheduler()
    run_id = cluster.trigger("INSERT INTO loaded SELECT 1 FROM pg_sleep(4)")
    wait_for(lambda: cluster.backends(run_id), what="the statement to run in the warehouse")
    first.kill()  # the only Veritask process: nothing of ours is left
    first.wait(timeout=10)
    assert cluster.backends(run_id), "the statement runs on without its client"
    cluster.start_scheduler()
    state, _ = cluster.finished(run_id)
    assert state is RunExecutionState.SUCCESS
    assert cluster.db.instances(run_id)["load"].state is InstanceState.SUCCESS
    assert warehouse_query(cluster.warehouse_url, "SELECT count(*) FROM loaded") == [(1,)]
    assert cluster.engine_word(run_id)["source"] == "sql_marker"
    assert len(cluster.db.attempts(cluster.db.instances(run_id)["load"].id)) == 1


def test_a_cancelled_statement_is_confirmed_cancelled(cluster: Cluster) -> None:
    cluster.start_scheduler()
    run_id = cluster.trigger("INSERT INTO loaded SELECT 1 FROM pg_sleep(60)")
    wait_for(lambda: cluster.backends(run_id), what="the statement to run in the warehouse")
    triggers.request_run_cancel(cluster.db.ledger, run_id, actor="operator:test", reason="stop")
    state, _ = cluster.finished(run_id)
    assert state is RunExecutionState.CANCELLED
    assert cluster.db.instances(run_id)["load"].state is InstanceState.CANCELLED
    assert not cluster.backends(run_id)
    assert warehouse_query(cluster.warehouse_url, "SELECT count(*) FROM loaded") == [(0,)]


def test_a_statement_killed_in_the_server_is_failed_with_the_servers_evidence(
    cluster: Cluster,
) -> None:
    cluster.start_scheduler()
    run_id = cluster.trigger("INSERT INTO loaded SELECT 1 FROM pg_sleep(60)")
    # Killed before its claim committed, the attempt leaves no trace in the server: the
    # reconciler takes it as never received and resubmits it as a new attempt, which sleeps its
    # 60 s. Killed inside the statement, it is FAILED with the server's evidence.
    sleeping = wait_for(lambda: cluster.backends(run_id, sleeping=True), what="the statement")
    (pid,) = sleeping[0]
    warehouse_query(cluster.warehouse_url, f"SELECT pg_terminate_backend({pid})")
    state, _ = cluster.finished(run_id)
    assert state is RunExecutionState.FAILED
    assert cluster.db.instances(run_id)["load"].state is InstanceState.FAILED
    evidence = cluster.engine_word(run_id)
    assert evidence["engine_state"] == "failed"
    assert evidence["error_category"] == "killed"
    details = evidence.get("details")
    assert isinstance(details, dict)
    assert details["error_sqlstate"] == "57P01"  # terminating connection: administrator command
    assert details["backend_pid"] == pid


def test_a_failed_statement_carries_the_servers_error_as_its_error_message(
    cluster: Cluster, tmp_path: Path
) -> None:
    cluster.start_scheduler()
    run_id = cluster.trigger("INSERT INTO loaded SELECT 1 / 0")

    assert cluster.finished(run_id)[0] is RunExecutionState.FAILED
    platform = Platform.open(cluster.url, tmp_path / "reader")
    try:
        instance = cluster.db.instances(run_id)["load"].id
        attempt = runs.get_instance(platform, instance).instance.attempts[0]
    finally:
        platform.close()
    assert attempt.error_message == "division by zero (SQLSTATE 22012)"
    # What a statement cost is the server's to tell, and PostgreSQL tells it to nobody cheaply.
    assert attempt.cpu_user_seconds is None and attempt.peak_rss_bytes is None


def test_another_scheduler_takes_up_the_reports_of_a_statement_whose_watcher_died(
    cluster: Cluster,
) -> None:
    schedulers = [cluster.start_scheduler(), cluster.start_scheduler()]
    # Both past their start recovery: the survivor must find the statement by taking over.
    wait_for(lambda: cluster.schedulers_recovered() == 2, what="both schedulers to recover")
    run_id = cluster.trigger("INSERT INTO loaded SELECT 1 FROM pg_sleep(10)")
    instance = cluster.db.instances(run_id)["load"].id
    wait_for(
        lambda: cluster.db.instances(run_id)["load"].state is InstanceState.RUNNING,
        what="the statement to be reported running",
    )
    watcher = cluster.sender(run_id, schedulers)
    watcher.kill()  # it sent the statement and watched it; the other one never looked
    watcher.wait(timeout=10)

    state, _ = cluster.finished(run_id)

    assert state is RunExecutionState.SUCCESS, "not fenced: the server shows it running"
    # The survivor took the dead one's share once its heartbeat went stale and asked the
    # server at once, as a restart would, before any lease could lapse unnoticed.
    taken_up = [r for r in cluster.db.history(instance) if r.kind == "engine_observed"]
    assert [r.actor for r in taken_up] == ["reconciler"], "the survivor never asked the server"
    assert [a[1] for a in cluster.db.attempts(instance)] == ["SUCCESS"]
    assert warehouse_query(cluster.warehouse_url, "SELECT count(*) FROM loaded") == [(1,)]


def _markers(cluster: Cluster, key: str) -> list[int]:
    return [
        int(str(count))
        for table in ("sql_attempts", "sql_completions")
        for (count,) in warehouse_query(
            cluster.warehouse_url,
            f"SELECT count(*) FROM veritask.{table} WHERE attempt_key = '{key}'",
        )
    ]


def test_purging_a_deleted_definition_removes_its_marker_rows_in_the_warehouse(
    cluster: Cluster, tmp_path: Path
) -> None:
    scheduler = cluster.start_scheduler()
    run_id = cluster.trigger("INSERT INTO loaded SELECT 1")
    assert cluster.finished(run_id)[0] is RunExecutionState.SUCCESS
    scheduler.kill()  # the deletion below is this process's own
    scheduler.wait(timeout=10)
    key = markers.AttemptName(cluster.db.instances(run_id)["load"].id, 1).key
    assert _markers(cluster, key) == [1, 1]
    platform = Platform(cluster.db.ledger, tmp_path / "api")
    definitions.delete_definition(platform, "nightly", actor="operator:test", purge=True)
    home = local.LocalExecutor(home=tmp_path / "local")

    # A scheduler without the SQL executor leaves it purging, the markers in place.
    definitions.advance_deletions(platform, executors={"local": home})
    with cluster.db.engine.connect() as connection:
        row = queries.get_definition(connection, name="nightly")
    assert row is not None and row.lifecycle == DefinitionLifecycle.PURGING
    assert _markers(cluster, key) == [1, 1]
    sql = engine.SqlExecutor(servers={"warehouse": cluster.warehouse_url})
    assert definitions.advance_deletions(platform, executors={"sql": sql}) == 2

    with cluster.db.engine.connect() as connection:
        row = queries.get_definition(connection, name="nightly")
    assert row is not None and row.lifecycle == DefinitionLifecycle.PURGED
    assert _markers(cluster, key) == [0, 0]
    # The work itself is the warehouse's data: the purge leaves it alone.
    assert warehouse_query(cluster.warehouse_url, "SELECT count(*) FROM loaded") == [(1,)]
