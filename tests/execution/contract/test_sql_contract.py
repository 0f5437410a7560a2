"""The executor contract, run against the SQL executor on a real PostgreSQL "warehouse"."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import ClassVar

import pytest

from tests.execution.contract.suite import ExecutorContract, Harness, Work
from tests.execution.sql.conftest import warehouse_query, warehouse_url  # noqa: F401
from veritask.execution import port
from veritask.execution.sql import engine, markers
from veritask.execution.sql import registration as sql_registration

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


class SqlHarness(Harness):
    """Each attempt's task counts its starts on a sequence of its own: a sequence moves
    outside transactions, so a start shows while the statement runs and after it rolled back.
    """

    engine_name = "sql"
    killed_evidence: ClassVar[dict[str, port.DetailValue]] = {
        "error_sqlstate": "57P01",  # terminating connection due to administrator command
        "completion_marker": False,
        "backend_alive": False,
    }
    unknown_source = sql_registration.Source.MARKER
    ended_source = sql_registration.Source.MARKER
    stopped_source = sql_registration.Source.MARKER
    # The server's activity can answer before the marker: the backend is still connected, its
    # statement cancelled and its transaction aborted, until the watcher closes the connection.
    also_stopped_by = frozenset({sql_registration.Source.ACTIVITY})
    killed_source = sql_registration.Source.MARKER

    def __init__(self, url: str) -> None:
        self.url = url
        self.sql = engine.SqlExecutor(servers={"warehouse": url})
        self.executor = self.sql

    def spec(self, work: Work, *, instance_id: str | None = None) -> port.AttemptSpec:
        instance_id = instance_id or self.new_instance_id()
        sequence = _sequence(instance_id)
        warehouse_query(self.url, f"CREATE SEQUENCE IF NOT EXISTS {sequence}")
        seconds = {Work.QUICK: 0.2, Work.LONG: 60}[work]
        statement = f"SELECT nextval('{sequence}'), pg_sleep({seconds})"
        return port.AttemptSpec(
            instance_id=instance_id,
            attempt_no=1,
            attempt_token=f"token-{instance_id}",
            task=port.SqlStatement(statement, "warehouse"),
            callback=port.HttpCallback("http://127.0.0.1:9"),
            grace_period=timedelta(seconds=1),
        )

    def starts(self, spec: port.AttemptSpec) -> int:
        rows = warehouse_query(
            self.url, f"SELECT last_value, is_called FROM {_sequence(spec.instance_id)}"
        )
        value, called = rows[0]
        return int(str(value)) if called else 0

    def external_id(self, instance_id: str, attempt_no: int) -> str:
        return f"{engine.EXTERNAL_ID_PREFIX}warehouse:{instance_id}/{attempt_no}"

    def still_runs(self, spec: port.AttemptSpec) -> bool:
        # A backend left idle (its statement cancelled, its transaction aborted) runs nothing.
        working = f"{_of(spec)} AND state IN ('active', 'idle in transaction')"
        return warehouse_query(self.url, f"SELECT count(*) FROM pg_stat_activity {working}") != [
            (0,)
        ]

    def queued_spec(self, work: Work) -> port.AttemptSpec:
        pytest.skip(
            "a SQL engine has no queue: the statement goes to the server as it is submitted, "
            "and waits only for the moment it takes to claim it (no phase a test can hold)"
        )

    def kill_outside_veritask(self, spec: port.AttemptSpec) -> None:
        killed = warehouse_query(
            self.url, f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity {_of(spec)}"
        )
        assert killed == [(True,)], f"one backend runs {spec.instance_id}: {killed}"
        # The server's error code is what this process reads on the attempt's connection.
        self.sql.wait_for_answers(10)


def _of(spec: port.AttemptSpec) -> str:
    """The attempt's backends in ``pg_stat_activity``, by the name the executor gives them."""
    name = markers.AttemptName(spec.instance_id, spec.attempt_no).application_name
    return f"WHERE application_name = '{name}'"


def _sequence(instance_id: str) -> str:
    return "starts_" + instance_id.replace("-", "_")


class TestSqlExecutorContract(ExecutorContract):
    @pytest.fixture
    def harness(self, warehouse_url: str) -> Iterator[Harness]:  # noqa: F811
        made = SqlHarness(warehouse_url)
        yield made
        made.sql.wait_for_answers(10)
