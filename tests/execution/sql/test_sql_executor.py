"""The SQL engine executor against a real PostgreSQL server, without a scheduler."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from tests.execution.sql.conftest import warehouse_query
from tests.scheduling.harness import wait_for
from veritask.execution import errors, port
from veritask.execution.sql import engine
from veritask.scheduling import templates

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


@pytest.fixture
def executor(warehouse_url: str) -> Iterator[engine.SqlExecutor]:
    made = engine.SqlExecutor(servers={"warehouse": warehouse_url})
    yield made
    made.wait_for_answers(10)


def spec(
    statement: str,
    *,
    instance: str = "load-1",
    token: str = "token-1",
    timeout: float | None = None,
) -> port.AttemptSpec:
    return port.AttemptSpec(
        instance_id=instance,
        attempt_no=1,
        attempt_token=token,
        task=port.SqlStatement(statement, "warehouse"),
        callback=port.HttpCallback("http://127.0.0.1:9"),
        timeout=None if timeout is None else timedelta(seconds=timeout),
        grace_period=timedelta(seconds=1),
    )


def ended(executor: engine.SqlExecutor, external_id: str) -> port.Observation:

    def seen() -> port.Observation | None:
        observation = executor.describe(external_id=external_id)
        return observation if observation.ended else None

    return wait_for(seen, what=f"{external_id} to end", interval=0.05)


def test_a_statement_commits_with_its_completion_marker(
    executor: engine.SqlExecutor, warehouse_url: str
) -> None:
    # Idempotence, a second token, cleanup and the states' sources are the contract's
    # (tests/execution/contract); here, what the server holds.
    warehouse_query(warehouse_url, "CREATE TABLE loaded (n int)")
    submitted = executor.submit(spec=spec("INSERT INTO loaded SELECT 1 FROM pg_sleep(0.3)"))
    running = executor.describe(external_id=submitted.external_id)
    assert running.engine_state in (port.EngineState.PENDING, port.EngineState.RUNNING)
    seen = ended(executor, submitted.external_id)
    assert seen.engine_state is port.EngineState.SUCCEEDED
    assert seen.details["completion_marker"] is True
    assert seen.ended_at is not None and seen.engine_id is not None
    assert warehouse_query(warehouse_url, "SELECT count(*) FROM loaded") == [(1,)]


def test_copies_sent_at_once_by_two_executors_run_the_statement_once(
    warehouse_url: str,
) -> None:
    warehouse_query(warehouse_url, "CREATE TABLE loaded (n int)")
    executors = [engine.SqlExecutor(servers={"warehouse": warehouse_url}) for _ in range(4)]
    executors[0].describe(external_id="sql:warehouse:warm/1")  # creates the marker tables
    barrier = threading.Barrier(len(executors))

    def send(one: engine.SqlExecutor) -> None:
        barrier.wait()
        one.submit(spec=spec("INSERT INTO loaded SELECT 1 FROM pg_sleep(0.5)"))

    threads = [threading.Thread(target=send, args=(one,)) for one in executors]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seen = ended(executors[0], "sql:warehouse:load-1/1")
    for one in executors:
        one.wait_for_answers(10)
    assert seen.engine_state is port.EngineState.SUCCEEDED
    assert warehouse_query(warehouse_url, "SELECT count(*) FROM loaded") == [(1,)]


@pytest.mark.parametrize(
    ("statement", "timeout", "category", "sqlstate"),
    [
        ("SELECT 1/0", None, port.ErrorCategory.TASK_ERROR, "22012"),
        ("SELECT pg_sleep(30)", 0.3, port.ErrorCategory.TIMEOUT, "57014"),
    ],
)
def test_a_statement_that_does_not_commit_failed_with_the_servers_code(
    executor: engine.SqlExecutor,
    statement: str,
    timeout: float | None,
    category: port.ErrorCategory,
    sqlstate: str,
) -> None:
    submitted = executor.submit(spec=spec(statement, timeout=timeout))
    executor.wait_for_answers(10)
    seen = ended(executor, submitted.external_id)
    assert seen.engine_state is port.EngineState.FAILED
    assert seen.error_category is category
    assert seen.details["error_sqlstate"] == sqlstate
    assert seen.details["completion_marker"] is False


def test_an_unknown_connection_is_a_clear_error(executor: engine.SqlExecutor) -> None:
    with pytest.raises(errors.ExecutorError, match="VERITASK_SQL_URL_ELSEWHERE"):
        executor.describe(external_id="sql:elsewhere:load-1/1")


def test_a_value_is_bound_as_data_never_run_as_sql(
    executor: engine.SqlExecutor, warehouse_url: str
) -> None:
    warehouse_query(
        warehouse_url, "CREATE TABLE x (n int); CREATE TABLE names (name text, day date)"
    )
    values = templates.context(
        run_id="run-1",
        logical_time=datetime(2024, 1, 31, 2, tzinfo=UTC),
        params={"name": "'; DROP TABLE x; --"},
    )
    statement, bound = templates.render_sql(
        "INSERT INTO names SELECT {{ params.name }}, {{ ds }} WHERE {{ params.name }} <> ''",
        values,
    )
    attempt = replace(spec("unused"), task=port.SqlStatement(statement, "warehouse", bound))
    seen = ended(executor, executor.submit(spec=attempt).external_id)
    assert seen.engine_state is port.EngineState.SUCCEEDED, seen.details
    assert warehouse_query(warehouse_url, "SELECT name, day::text FROM names") == [
        ("'; DROP TABLE x; --", "2024-01-31")
    ]
    assert warehouse_query(warehouse_url, "SELECT count(*) FROM x") == [(0,)]


def test_a_value_stays_data_whatever_text_surrounds_its_placeholder(
    executor: engine.SqlExecutor, warehouse_url: str
) -> None:
    # The admin's statement leaves a comment open after the placeholder: pasted into one
    # script, the value would close it and run its own statements.
    warehouse_query(warehouse_url, "CREATE TABLE victim (n int); INSERT INTO victim VALUES (7)")
    warehouse_query(warehouse_url, "CREATE TABLE names (name text)")
    value = "*/; DROP TABLE victim; --"
    values = templates.context(run_id="run-1", logical_time=None, params={"name": value})
    statement, bound = templates.render_sql(
        "INSERT INTO names VALUES ({{ params.name }}) /* the open comment", values
    )
    attempt = replace(spec("unused"), task=port.SqlStatement(statement, "warehouse", bound))
    external_id = ended(executor, executor.submit(spec=attempt).external_id).external_id
    executor.wait_for_answers(10)  # the server's error is recorded once its answer is read
    seen = executor.describe(external_id=external_id)
    assert warehouse_query(warehouse_url, "SELECT n FROM victim") == [(7,)]
    # The open comment is the admin's own syntax error, told as the server's, and nothing of
    # the statement committed.
    assert seen.engine_state is port.EngineState.FAILED
    assert seen.details["error_sqlstate"] == "42601", seen.details
    assert "comment" in str(seen.details["error_message"])
    assert warehouse_query(warehouse_url, "SELECT count(*) FROM names") == [(0,)]


def test_a_value_arrives_intact_beside_a_closed_comment(
    executor: engine.SqlExecutor, warehouse_url: str
) -> None:
    warehouse_query(warehouse_url, "CREATE TABLE victim (n int); CREATE TABLE names (name text)")
    value = "*/; DROP TABLE victim; -- ' \" $$ \\ é"
    values = templates.context(run_id="run-1", logical_time=None, params={"name": value})
    statement, bound = templates.render_sql(
        "INSERT INTO names /* where */ VALUES ({{ params.name }}) /* closed */", values
    )
    attempt = replace(spec("unused"), task=port.SqlStatement(statement, "warehouse", bound))
    seen = ended(executor, executor.submit(spec=attempt).external_id)
    assert seen.engine_state is port.EngineState.SUCCEEDED, seen.details
    assert warehouse_query(warehouse_url, "SELECT name FROM names") == [(value,)]
    assert warehouse_query(warehouse_url, "SELECT count(*) FROM victim") == [(0,)]


@pytest.mark.parametrize(
    "statement",
    [
        "INSERT INTO loaded VALUES (1) -- the last line is a comment",
        "INSERT INTO loaded VALUES (1);",
        "INSERT INTO loaded\n  VALUES (1) -- one\n-- two",
    ],
)
def test_a_statement_that_ends_in_a_comment_runs(
    executor: engine.SqlExecutor, warehouse_url: str, statement: str
) -> None:
    warehouse_query(warehouse_url, "CREATE TABLE loaded (n int)")
    seen = ended(executor, executor.submit(spec=spec(statement)).external_id)
    assert seen.engine_state is port.EngineState.SUCCEEDED, seen.details
    assert warehouse_query(warehouse_url, "SELECT n FROM loaded") == [(1,)]


def test_a_statement_the_server_cannot_parse_fails_with_its_cause(
    executor: engine.SqlExecutor,
) -> None:
    external_id = ended(executor, executor.submit(spec=spec("SELEC 1")).external_id).external_id
    executor.wait_for_answers(10)
    seen = executor.describe(external_id=external_id)
    assert seen.engine_state is port.EngineState.FAILED
    assert seen.error_category is port.ErrorCategory.TASK_ERROR
    assert seen.details["error_sqlstate"] == "42601"
    assert "SELEC" in str(seen.details["error_message"])
