"""The migrations build exactly the schema that ``ledger.schema`` describes, and undo it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from veritask.cli import db
from veritask.ledger import dialects, migrate, schema

APPEND_ONLY_TABLES = {"events", "rejected_events", "chain_checkpoints"}


def _table_names(url: str) -> set[str]:
    engine = dialects.create_engine(url)
    try:
        with engine.connect() as connection:
            return set(sa.inspect(connection).get_table_names()) - {"alembic_version"}
    finally:
        engine.dispose()


def test_upgrade_from_empty_reaches_head(empty_database_url: str) -> None:
    assert migrate.current(empty_database_url) is None

    migrate.upgrade(empty_database_url)

    assert migrate.current(empty_database_url) == migrate.head()
    assert _table_names(empty_database_url) == set(schema.metadata.tables)


def test_downgrade_to_base_and_upgrade_again(empty_database_url: str) -> None:
    migrate.upgrade(empty_database_url)

    migrate.downgrade(empty_database_url, "base")
    assert migrate.current(empty_database_url) is None
    assert _table_names(empty_database_url) == set()

    migrate.upgrade(empty_database_url)
    assert migrate.current(empty_database_url) == migrate.head()


def test_migrated_schema_equals_the_metadata(engine: sa.Engine) -> None:
    with engine.connect() as connection:
        context = MigrationContext.configure(
            connection, opts={"compare_type": True, "compare_server_default": True}
        )
        assert compare_metadata(context, schema.metadata) == []


def _literals(predicate: str) -> set[str]:
    return set(re.findall(r"'([^']*)'", predicate))


def test_partial_indexes_match_the_metadata(engine: sa.Engine) -> None:
    # compare_metadata ignores index predicates; compare the ones each dialect keeps.
    dialect = engine.dialect.name
    with engine.connect() as connection:
        inspector = sa.inspect(connection)
        for table in schema.metadata.sorted_tables:
            reflected = {index["name"]: index for index in inspector.get_indexes(table.name)}
            for index in table.indexes:
                expected = index.dialect_options[dialect]["where"]
                options = reflected[index.name].get("dialect_options", {})
                actual = options.get(f"{dialect}_where")
                if expected is None:
                    assert actual is None, index.name
                    continue
                assert actual is not None, f"{index.name} is not partial"
                assert _literals(str(expected)) == _literals(str(actual)), index.name


def test_append_only_triggers_are_installed(engine: sa.Engine) -> None:
    if engine.dialect.name == "postgresql":
        query = "SELECT event_object_table FROM information_schema.triggers"
    else:
        query = "SELECT tbl_name FROM sqlite_master WHERE type = 'trigger'"
    with engine.connect() as connection:
        tables = set(connection.exec_driver_sql(query).scalars())
    assert tables == APPEND_ONLY_TABLES


def test_cli_module_upgrades_a_new_database(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"

    completed = subprocess.run(
        [sys.executable, "-m", "veritask.cli.db", "upgrade", "--url", url],
        capture_output=True,
        text=True,
        check=False,
    )

    assert completed.returncode == 0, completed.stderr
    assert f"to {migrate.head()}" in completed.stdout
    assert migrate.current(url) == migrate.head()


def test_upgrade_command_reports_an_unreachable_database(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert db.upgrade_command("postgresql://nobody:secret@127.0.0.1:1/none") == 1

    error = capsys.readouterr().err
    assert "postgresql+psycopg://nobody:***@127.0.0.1:1/none" in error
    assert "secret" not in error


def test_0008_keeps_the_definitions_and_frees_a_deleted_name(empty_database_url: str) -> None:
    migrate.upgrade(empty_database_url, "0007")
    engine = dialects.create_engine(empty_database_url)
    now = "2026-01-01 00:00:00"
    try:
        with engine.begin() as connection:
            connection.exec_driver_sql(
                "INSERT INTO definitions (id, name, current_version, lifecycle, created_at, "
                f"updated_at) VALUES ('old', 'reused', 1, 'deleted', '{now}', '{now}')"
            )
            connection.exec_driver_sql(
                "INSERT INTO definition_versions (definition_id, version, content_hash, spec, "
                f"source, created_at) VALUES ('old', 1, 'h', '{{}}', 'name: reused', '{now}')"
            )

        migrate.upgrade(empty_database_url)

        with engine.begin() as connection:
            connection.exec_driver_sql(
                "INSERT INTO definitions (id, name, lifecycle, created_at, updated_at) "
                f"VALUES ('new', 'reused', 'active', '{now}', '{now}')"
            )
            connection.exec_driver_sql(
                "UPDATE definitions SET lifecycle = 'purging' WHERE id = 'old'"
            )
            rows = connection.exec_driver_sql(
                "SELECT id, lifecycle FROM definitions ORDER BY id"
            ).all()
            versions = connection.exec_driver_sql(
                "SELECT definition_id, version FROM definition_versions"
            ).all()
    finally:
        engine.dispose()
    assert [tuple(row) for row in rows] == [("new", "active"), ("old", "purging")]
    assert [tuple(row) for row in versions] == [("old", 1)]


_EVENT_COLUMNS = (
    "event_id, subject_type, subject_id, run_id, instance_id, kind, actor, event_time, "
    "observed_at, evidence, outcome, fingerprint"
)


def _insert_event(connection: sa.Connection, event_id: str, subject: str, run_id: str) -> None:
    now = "2026-01-01 00:00:00"
    connection.exec_driver_sql(
        f"INSERT INTO events ({_EVENT_COLUMNS}) VALUES ('{event_id}', '{subject}', 'r1', "
        f"{run_id}, NULL, 'run_created', 'scheduler', '{now}', '{now}', '{{}}', 'applied', 'f')"
    )


def test_0011_keeps_a_definitions_history_and_a_runs(empty_database_url: str) -> None:
    migrate.upgrade(empty_database_url, "0010")
    engine = dialects.create_engine(empty_database_url)
    try:
        with engine.begin() as connection:
            _insert_event(connection, "e1", "run", "'r1'")
        migrate.upgrade(empty_database_url)
        with engine.begin() as connection:
            names = {i["name"] for i in sa.inspect(connection).get_indexes("events")}
            count = connection.exec_driver_sql(
                "SELECT count(*) FROM events WHERE run_id = 'r1'"
            ).scalar_one()
        assert "ix_events_definition_subject_id_position" in names
        assert "ix_events_subject_type_subject_id_position" not in names
        assert count == 1
        migrate.downgrade(empty_database_url, "0010")
        with engine.begin() as connection:
            names = {i["name"] for i in sa.inspect(connection).get_indexes("events")}
        assert "ix_events_subject_type_subject_id_position" in names
    finally:
        engine.dispose()


def test_0011_refuses_a_run_event_that_does_not_name_its_run(empty_database_url: str) -> None:
    migrate.upgrade(empty_database_url, "0010")
    engine = dialects.create_engine(empty_database_url)
    try:
        with engine.begin() as connection:
            _insert_event(connection, "e1", "run", "NULL")
    finally:
        engine.dispose()
    with pytest.raises(Exception, match="do not name their subject"):
        migrate.upgrade(empty_database_url)
    assert migrate.current(empty_database_url) == "0010"
