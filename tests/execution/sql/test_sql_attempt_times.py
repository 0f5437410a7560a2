"""A SQL attempt tells the truth about time: RUNNING from the statement's start in the server,
its phases on the attempt, and the task's ``timeout`` enforced by the platform.

A real scheduler process on a ledger (SQLite and PostgreSQL) and a real warehouse.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from tests.conftest import POSTGRES, SQLITE
from tests.execution.sql.conftest import warehouse_query
from tests.execution.sql.test_sql_with_schedulers import Cluster
from tests.scheduling.harness import wait_for
from veritask.core import durations
from veritask.core.states import AttemptState, InstanceState, RunExecutionState
from veritask.execution.sql import markers
from veritask.services import runs, views
from veritask.services.platform import Platform

pytestmark = [pytest.mark.slow]


@pytest.fixture(params=[SQLITE, pytest.param(POSTGRES, marks=pytest.mark.postgres)])
def database_kind(request: pytest.FixtureRequest) -> str:
    """One scheduler process: the ledger may be SQLite too."""
    kind: str = request.param
    return kind


@pytest.fixture
def cluster(database_url: str, warehouse_url: str, tmp_path: Path) -> Iterator[Cluster]:
    made = Cluster(database_url, warehouse_url, tmp_path)
    warehouse_query(warehouse_url, "CREATE TABLE loaded (n int)")
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def reader(cluster: Cluster, tmp_path: Path) -> Iterator[Platform]:
    platform = Platform.open(cluster.url, tmp_path / "reader")
    try:
        yield platform
    finally:
        platform.close()


def attempt_of(
    reader: Platform, cluster: Cluster, run_id: str, attempt_no: int = 1
) -> views.Attempt | None:
    instance = cluster.db.instances(run_id)["load"].id
    found = runs.get_instance(reader, instance).instance.attempts
    return next((a for a in found if a.attempt_no == attempt_no), None)


def claim(cluster: Cluster, run_id: str, attempt_no: int = 1) -> tuple[object, ...]:
    """The attempt's claim row in the warehouse: backend pid, backend start, statement start."""
    instance = cluster.db.instances(run_id)["load"].id
    key = markers.AttemptName(instance, attempt_no).key
    (row,) = warehouse_query(
        cluster.warehouse_url,
        "SELECT backend_pid, backend_start, started_at FROM veritask.sql_attempts "
        f"WHERE attempt_key = '{key}'",
    )
    return row


def test_an_attempt_is_running_from_its_statements_start_with_the_servers_evidence(
    cluster: Cluster, reader: Platform
) -> None:
    cluster.start_scheduler()
    run_id = cluster.trigger("INSERT INTO loaded SELECT 1 FROM pg_sleep(3)")

    def running() -> views.Attempt | None:
        attempt = attempt_of(reader, cluster, run_id)
        if attempt is not None and attempt.state.is_terminal:
            pytest.fail(f"the attempt ended {attempt.state} and was never seen RUNNING")
        if attempt is None or attempt.state is not AttemptState.RUNNING:
            return None
        # ``started`` and the first phase are two reports: a reader may come between them.
        return attempt if attempt.progress is not None else None

    seen = wait_for(running, what="the attempt to be RUNNING while its statement runs")
    (backend,) = cluster.backends(run_id, sleeping=True)
    assert seen.progress is not None and seen.progress.phase == "executing"
    assert seen.worker == "sql:warehouse"
    pid, backend_start, started_at = claim(cluster, run_id)
    assert backend == (pid,)
    assert seen.started_at == started_at, "the statement's start, by the server's clock"
    (started,) = cluster.evidence(run_id, "started")
    assert started["pid"] == pid
    assert isinstance(backend_start, datetime)
    assert started["backend_start"] == backend_start.isoformat()
    assert isinstance(started["query_start"], str)
    server = started["server"]
    assert isinstance(server, dict)
    ((identifier, database),) = warehouse_query(
        cluster.warehouse_url,
        "SELECT system_identifier::text, current_database() FROM pg_control_system()",
    )
    assert (server["system_identifier"], server["database"]) == (identifier, database)

    assert cluster.finished(run_id)[0] is RunExecutionState.SUCCESS
    ended = attempt_of(reader, cluster, run_id)
    assert ended is not None and ended.state is AttemptState.SUCCESS
    assert ended.progress is not None and ended.progress.phase == "writing results"


def test_queue_time_is_the_wait_before_the_statement_not_the_statement(
    cluster: Cluster, reader: Platform
) -> None:
    cluster.start_scheduler()
    run_id = cluster.trigger("INSERT INTO loaded SELECT 1 FROM pg_sleep(1.5)")

    assert cluster.finished(run_id)[0] is RunExecutionState.SUCCESS
    attempt = attempt_of(reader, cluster, run_id)
    assert attempt is not None
    _, _, statement_start = claim(cluster, run_id)
    assert isinstance(statement_start, datetime)
    assert attempt.started_at == statement_start, "started_at is the statement's start"
    assert attempt.ended_at is not None and attempt.ended_at - statement_start >= timedelta(
        seconds=1.5
    )
    loaded = cluster.db.ledger.snapshot(cluster.db.instances(run_id)["load"].id)
    assert loaded is not None
    spent = durations.totals(durations.instance_phases(loaded[0]))
    assert spent[durations.Phase.QUEUE] < timedelta(seconds=1)
    assert spent[durations.Phase.EXECUTION] >= timedelta(seconds=1.5)


def test_a_statement_past_its_timeout_is_stopped_by_the_platform_and_retried(
    cluster: Cluster, reader: Platform
) -> None:
    cluster.start_scheduler()
    policy = "    timeout: 2s\n    retry: {max_retries: 1, backoff: fixed, delay: 1s}\n"
    run_id = cluster.trigger("SELECT pg_sleep(30)", policy)

    def retried() -> views.Attempt | None:
        instance = cluster.db.instances(run_id)["load"].id
        found = runs.get_instance(reader, instance).instance.attempts
        return found[0] if len(found) > 1 else None

    first = wait_for(retried, what="attempt 2 to open after attempt 1 timed out")
    assert first.state is AttemptState.TIMEOUT
    assert first.started_at is not None and first.ended_at is not None
    asked = {
        datetime.fromisoformat(str(e["started_at"])): e
        for e in cluster.evidence(run_id, "timeout_requested")
    }
    assert asked[first.started_at]["timeout_seconds"] == 2.0, "the monitor's, from the start"
    instance = cluster.db.instances(run_id)["load"].id
    key = markers.AttemptName(instance, 1).key
    assert warehouse_query(
        cluster.warehouse_url,
        f"SELECT count(*) FROM veritask.sql_cancels WHERE attempt_key = '{key}'",
    ) == [(1,)], "the platform asked the server to stop it"
    assert not warehouse_query(
        cluster.warehouse_url,
        "SELECT pid FROM pg_stat_activity WHERE application_name = "
        f"'{markers.AttemptName(instance, 1).application_name}'",
    ), "the confirmation is the server's: the backend is gone"
    state, _ = cluster.finished(run_id)
    assert state is RunExecutionState.FAILED
    assert cluster.db.instances(run_id)["load"].state is InstanceState.TIMEOUT


#: A statement that catches every cancel (the platform's, and the server's statement_timeout
#: backstop): only terminating its backend ends it.
STUBBORN = (
    "DO $$ BEGIN LOOP BEGIN PERFORM pg_sleep(0.2); "
    "EXCEPTION WHEN query_canceled THEN NULL; END; END LOOP; END $$"
)


def test_a_statement_that_ignores_the_cancel_is_terminated_after_the_grace_period(
    cluster: Cluster, reader: Platform
) -> None:
    cluster.start_scheduler("--cancel-window=40")  # room for the 10 s grace period
    run_id = cluster.trigger(STUBBORN, "    timeout: 2s\n")

    state, _ = cluster.finished(run_id)

    assert state is RunExecutionState.FAILED
    instance = cluster.db.instances(run_id)["load"].id
    assert cluster.db.instances(run_id)["load"].state is InstanceState.TIMEOUT
    (attempt,) = runs.get_instance(reader, instance).instance.attempts
    assert attempt.state is AttemptState.TIMEOUT
    assert attempt.started_at is not None and attempt.ended_at is not None
    # The cancel came at the timeout and was ignored; the terminate, a grace period later.
    assert attempt.ended_at - attempt.started_at >= timedelta(seconds=2 + 10)
    assert not cluster.evidence(run_id, "cancel_unconfirmed")
    assert not warehouse_query(
        cluster.warehouse_url,
        "SELECT pid FROM pg_stat_activity WHERE application_name = "
        f"'{markers.AttemptName(instance, 1).application_name}'",
    ), "terminated: the backend is gone"
