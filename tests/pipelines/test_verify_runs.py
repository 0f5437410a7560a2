"""``verify`` and ``doctor`` over runs made by the real scheduler, on SQLite and PostgreSQL: a
run's stored states are where its run-level events leave them, its events join up, and a
finished run's state is the one its instances imply (docs/operations.md)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests.acceptance.test_operations import veritask
from tests.pipelines.harness import Platform, platform_fixture
from veritask.core.states import PublicationState as P
from veritask.core.states import RunExecutionState as R
from veritask.core.states import TriggerKind
from veritask.ledger import dialects, schema
from veritask.scheduling import triggers

PLAIN = """
name: plain
tasks:
  extract: {run: "true"}
  load: {run: "true", after: [extract]}
"""

PUBLISHED = """
name: published
tasks:
  extract: {run: "true"}
publish:
  checks:
    - {name: row_count, run: "true"}
  commit: {run: "true"}
"""


@pytest.fixture
def platform(engine: Engine, tmp_path: Path) -> Iterator[Platform]:
    yield from platform_fixture(engine, tmp_path)


def _finished_run(platform: Platform, text: str) -> str:
    definition = triggers.apply_definition(platform.ledger, text)
    run_id = triggers.trigger(
        platform.ledger, name=definition.name, kind=TriggerKind.MANUAL, actor="operator:test"
    ).run_id
    platform.settle(run_id)
    return run_id


def _verify(database_url: str, home: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    found = veritask("verify", *extra, "--database-url", database_url, "--json", home=home)
    return found.returncode, json.loads(found.stdout)


def _doctor_runs_check(database_url: str, home: Path) -> dict[str, object]:
    found = veritask("doctor", "--database-url", database_url, "--json", home=home)
    checks = {c["name"]: c for c in json.loads(found.stdout)["checks"]}
    assert found.returncode == 1  # no scheduler is alive either; the runs check is ours
    runs: dict[str, object] = checks["runs"]
    return runs


def test_run_states_changed_with_plain_sql_are_found_and_repair_restores_them(
    platform: Platform, engine: Engine, database_url: str, tmp_path: Path
) -> None:
    plain = _finished_run(platform, PLAIN)
    published = _finished_run(platform, PUBLISHED)
    assert platform.run(published).publication_state is P.PUBLISHED
    home = tmp_path / "cli"
    code, held = _verify(database_url, home)
    assert code == 0, held

    with engine.begin() as connection:
        connection.execute(
            sa.text(
                "UPDATE runs SET execution_state = 'FAILED', publication_state = 'PUBLISHED' "
                "WHERE id = :id"
            ),
            {"id": plain},
        )

    code, broken = _verify(database_url, home)
    assert code == 1
    assert broken["mismatches"] == [
        f"run {plain}: execution_state is FAILED, its events say SUCCESS",
        f"run {plain}: publication_state is PUBLISHED, its events say NOT_REQUIRED",
    ]
    doctor = _doctor_runs_check(database_url, home)
    assert doctor["status"] == "fail"
    assert "execution_state is FAILED, its events say SUCCESS" in str(doctor["detail"])

    code, repaired = _verify(database_url, home, "--repair")
    assert code == 0, repaired
    assert repaired["repaired"] == 1
    assert (held["runs"], repaired["runs"]) == (2, 2)
    view = platform.run(plain)
    assert (view.execution_state, view.publication_state) == (R.SUCCESS, P.NOT_REQUIRED)
    assert view.execution_reason != ""  # the reason of the event, not the corruption's
    with dialects.read_transaction(engine) as connection:
        kinds = connection.execute(sa.select(schema.operations.c.kind)).scalars().all()
    assert kinds == ["repair"]
    assert _doctor_runs_check(database_url, home)["status"] == "ok"


def test_a_deleted_run_event_is_a_missing_link_repair_cannot_hide(
    platform: Platform, engine: Engine, database_url: str, tmp_path: Path
) -> None:
    run_id = _finished_run(platform, PUBLISHED)
    e = schema.events.c
    with engine.begin() as connection:
        # Only the retention purge may delete events: this test borrows its permit to remove
        # the step CHECKING -> PUBLISHING from the middle of the run's publication chain.
        chain = connection.execute(
            sa.select(e.event_id, e.from_state, e.to_state)
            .where(e.subject_id == run_id, e.kind == "publication_changed")
            .order_by(e.position)
        ).all()
        assert [row.to_state for row in chain] == ["CHECKING", "PUBLISHING", "PUBLISHED"]
        with dialects.purge_permitted(
            connection.execution_options(**{dialects.HOME_OPTION: str(tmp_path / "home")}),
            permit_table=schema.purge_permit,
            setting=schema.PURGE_SETTING,
        ):
            connection.execute(schema.events.delete().where(e.event_id == chain[1].event_id))

    home = tmp_path / "cli"
    code, broken = _verify(database_url, home)
    assert code == 1
    assert broken["mismatches"] == []  # the stored state is still where the last event left it
    assert broken["violations"] == [
        f"run {run_id}: publication event {chain[2].event_id} (publication_changed) moves it "
        "from PUBLISHING, but the event before left it at CHECKING: an event is missing"
    ]
    assert _doctor_runs_check(database_url, home)["status"] == "fail"
    code, after = _verify(database_url, home, "--repair")
    assert code == 1, "a lost event is not rebuilt: verify keeps saying so"
    assert after["violations"] == broken["violations"]


def test_a_finished_run_whose_instances_say_otherwise_is_reported(
    platform: Platform, engine: Engine, database_url: str, tmp_path: Path
) -> None:
    run_id = _finished_run(platform, PLAIN)
    with engine.begin() as connection:
        connection.execute(
            sa.text(
                "UPDATE task_instances SET state = 'FAILED' "
                "WHERE run_id = :id AND task_key = 'load'"
            ),
            {"id": run_id},
        )
    home = tmp_path / "cli"
    code, broken = _verify(database_url, home)
    assert code == 1
    disagreement = [v for v in broken["violations"] if "its instances say FAILED" in v]
    assert disagreement and disagreement[0].startswith(f"run {run_id}: its events say SUCCESS")
    doctor = _doctor_runs_check(database_url, home)
    assert doctor["status"] == "fail"
    code, repaired = _verify(database_url, home, "--repair")
    assert code == 0, repaired  # the instance's snapshot is rebuilt, and then they agree
