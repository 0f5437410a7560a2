"""A SQL connection's URL may be a secret: ``VERITASK_SQL_URL_<NAME>=secret:<name>`` is looked
up through the same providers as a task's secrets, at each connection."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.execution.sql.conftest import warehouse_query
from tests.execution.sql.test_sql_executor import ended, spec
from veritask.execution import engines, errors, port, secrets
from veritask.execution.sql import engine

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


def test_a_connection_url_given_as_a_secret_is_looked_up_when_connecting(
    warehouse_url: str, tmp_path: Path
) -> None:
    secrets_file = tmp_path / "secrets.json"
    secrets_file.write_text(json.dumps({"warehouse_url": warehouse_url}))
    secrets_file.chmod(0o600)
    environ = {
        "VERITASK_SQL_URL_WAREHOUSE": "secret:warehouse_url",
        "VERITASK_SECRETS_FILE": str(secrets_file),
    }
    configured = engines.from_environment(environ)["sql"]
    assert isinstance(configured, engine.SqlExecutor)
    assert configured.servers == {"warehouse": "secret:warehouse_url"}  # a name, no URL
    sql = engine.SqlExecutor(
        servers=configured.servers, secret_providers=secrets.providers_from_environment(environ)
    )
    warehouse_query(warehouse_url, "CREATE TABLE loaded (n int)")

    submitted = sql.submit(spec=spec("INSERT INTO loaded VALUES (1)"))

    assert ended(sql, submitted.external_id).engine_state is port.EngineState.SUCCEEDED
    assert warehouse_query(warehouse_url, "SELECT count(*) FROM loaded") == [(1,)]
    sql.wait_for_answers(10)


def test_an_unknown_url_secret_is_refused_naming_the_connection_and_the_secret() -> None:
    sql = engines.from_environment({"VERITASK_SQL_URL_WAREHOUSE": "secret:warehouse_url"})["sql"]

    with pytest.raises(errors.ExecutorError) as refused:
        sql.submit(spec=spec("SELECT 1"))

    assert not refused.value.retryable
    assert str(refused.value).startswith(
        "the SQL connection 'warehouse': unknown secret 'warehouse_url'"
    )
