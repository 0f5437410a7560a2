"""A definition's ``env:`` and secrets end to end: the scheduler sends the secret's name, the
worker looks it up; the value reaches the task, is masked in its log, and is nowhere in the
ledger (events, definition versions, anything the API or the UI could read)."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

from tests.scheduling.harness import Harness
from veritask.core.states import InstanceState, RunExecutionState
from veritask.ledger import dialects, schema

SECRET_VALUE = "e2e-warehouse-pw-1234"
DATABASE_URL = "postgresql://veritask:ledger-password-5678@db/veritask"

pytestmark = pytest.mark.slow

DEFINITION = """\
name: with_secrets
env:
  TARGET: warehouse
  PGPASSWORD: {secret: warehouse_password}
tasks:
  load:
    run: 'echo "target=$TARGET password=$PGPASSWORD db=$VERITASK_DATABASE_URL"'
    env: {TARGET: staging}
"""


def _everything_stored(harness: Harness) -> str:
    with dialects.read_transaction(harness.engine) as connection:
        return "\n".join(
            repr(tuple(row))
            for table in schema.metadata.sorted_tables
            for row in connection.execute(sa.select(table))
        )


def test_a_secret_reaches_the_task_masked_and_is_nowhere_in_the_ledger(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The worker's environment: the platform's own settings and the secret's provider.
    monkeypatch.setenv("VERITASK_DATABASE_URL", DATABASE_URL)
    monkeypatch.setenv("VERITASK_SECRET_WAREHOUSE_PASSWORD", SECRET_VALUE)
    harness.apply(DEFINITION)
    run_id = harness.trigger("with_secrets")

    assert harness.finish(run_id)[0] is RunExecutionState.SUCCESS

    load = harness.instances(run_id)["load"]
    log = harness.executor.home.attempt(load.id, 1).log.read_text()
    assert log == "target=staging password=*** db=\n"
    stored = _everything_stored(harness)
    assert (
        "{'secret': 'warehouse_password'}" in stored or '"secret": "warehouse_password"' in stored
    )
    assert SECRET_VALUE not in stored and DATABASE_URL not in stored
    spec = harness.executor.home.attempt(load.id, 1).spec.read_text()
    assert json.loads(spec)["secret_env"] == {"PGPASSWORD": "warehouse_password"}
    assert SECRET_VALUE not in spec


def test_an_unknown_secret_makes_the_attempt_start_failed_naming_it(harness: Harness) -> None:
    harness.apply(DEFINITION.replace("warehouse_password", "no_such_secret"))
    run_id = harness.trigger("with_secrets")

    harness.finish(run_id)

    load = harness.instances(run_id)["load"]
    assert load.state is InstanceState.START_FAILED
    reason = harness.instance_reason(load.id)
    assert "could not start the task: unknown secret 'no_such_secret'" in reason
    assert [state for _, state, _, _ in harness.attempts(load.id)] == ["START_FAILED"]
    e = schema.events.c
    with dialects.read_transaction(harness.engine) as connection:
        evidence = connection.execute(
            sa.select(e.evidence).where(e.instance_id == load.id, e.kind == "completed")
        ).scalar_one()
    if isinstance(evidence, str):
        evidence = json.loads(evidence)
    assert evidence["error_category"] == "start_error"
    assert evidence["start_error"].startswith(
        "unknown secret 'no_such_secret': no secret provider holds it"
    )
