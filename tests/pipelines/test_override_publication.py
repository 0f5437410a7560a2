"""An override of a run keeps its publication consistent with its execution, on SQLite and
PostgreSQL, with the real scheduler: a run whose publication has started cannot be made
FAILED, and a run made SUCCESS publishes through its own checks and commit; ``verify`` holds
after either (docs/operations.md, 'Overrides')."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from tests.acceptance.test_operations import veritask
from tests.pipelines.harness import Platform, platform_fixture
from veritask.core.events import OverrideScope
from veritask.core.states import InstanceState as I
from veritask.core.states import PublicationState as P
from veritask.core.states import RunExecutionState as R
from veritask.core.states import TriggerKind
from veritask.ledger import dialects, queries
from veritask.scheduling import triggers
from veritask.services import overrides
from veritask.services import platform as services
from veritask.services.errors import Conflict

PUBLISHED = """
name: published
tasks:
  extract: {run: "%s", retry: {max_retries: 0}}
publish:
  checks:
    - {name: row_count, run: "true"}
  commit: {run: "true"}
"""


@pytest.fixture
def platform(engine: Engine, tmp_path: Path) -> Iterator[Platform]:
    yield from platform_fixture(engine, tmp_path)


def _finished_run(platform: Platform, command: str) -> tuple[str, str]:
    definition = triggers.apply_definition(platform.ledger, PUBLISHED % command)
    run_id = triggers.trigger(
        platform.ledger, name=definition.name, kind=TriggerKind.MANUAL, actor="operator:test"
    ).run_id
    platform.settle(run_id)
    with dialects.read_transaction(platform.ledger.engine) as connection:
        ids = {row.task_key: row.id for row in queries.instances_of_run(connection, run_id)}
    return run_id, ids["extract"]


def _verify_holds(database_url: str, home: Path) -> None:
    found = veritask("verify", "--database-url", database_url, "--json", home=home)
    assert found.returncode == 0, found.stdout
    assert json.loads(found.stdout)


def _override(platform: Platform, home: Path, instance_id: str, to_state: I) -> None:
    overrides.override(
        services.Platform(platform.ledger, home / "home"),
        instance_id,
        to_state=to_state,
        scope=OverrideScope.RUN,
        reason="checked by hand",
        actor="operator:test",
    )


def test_a_published_run_cannot_be_overridden_to_failed(
    platform: Platform, database_url: str, tmp_path: Path
) -> None:
    run_id, extract = _finished_run(platform, "true")
    assert platform.run(run_id).publication_state is P.PUBLISHED
    with pytest.raises(Conflict, match="publication has started"):
        _override(platform, tmp_path, extract, I.FAILED)
    view = platform.run(run_id)
    assert (view.execution_state, view.publication_state) == (R.SUCCESS, P.PUBLISHED)
    assert view.instances["extract"] is I.SUCCESS
    _verify_holds(database_url, tmp_path / "cli")


def test_a_failed_run_overridden_to_success_publishes_through_its_own_steps(
    platform: Platform, database_url: str, tmp_path: Path
) -> None:
    run_id, extract = _finished_run(platform, "exit 3")
    view = platform.run(run_id)
    assert (view.execution_state, view.publication_state) == (R.FAILED, P.PENDING)
    _override(platform, tmp_path, extract, I.SUCCESS)
    # The steps are not overridden: the scheduler opens and runs them as for any success.
    assert platform.run(run_id).instances["publish.commit"] is I.CREATED
    view = platform.settle(run_id)
    assert (view.execution_state, view.publication_state) == (R.SUCCESS, P.PUBLISHED)
    assert view.instances["publish.check.row_count"] is I.SUCCESS
    assert view.instances["publish.commit"] is I.SUCCESS
    _verify_holds(database_url, tmp_path / "cli")
