"""A name belongs to one definition at a time, until it is deleted (migration 0008)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy.engine import Engine

from tests.contract import builders
from veritask.ledger import definitions, errors, queries, schema

LATER = datetime(2024, 5, 2, tzinfo=UTC)


def _move(engine: Engine, definition_id: str, current: str, target: str) -> None:
    with engine.begin() as connection:
        assert definitions.move_lifecycle(
            connection, definition_id, current=current, target=target, now=LATER
        )


def test_purging_is_a_lifecycle_the_database_admits(engine: Engine) -> None:
    with engine.begin() as connection:
        definition_id, _ = builders.a_definition(connection)
    _move(engine, definition_id, "active", "deleted")
    _move(engine, definition_id, "deleted", "purging")
    with engine.connect() as connection:
        row = queries.get_definition_by_id(connection, definition_id)
    assert row is not None and row.lifecycle == "purging"


def test_a_deleted_name_is_saved_again_as_a_new_definition(engine: Engine) -> None:
    with engine.begin() as connection:
        old_id, _ = builders.a_definition(connection, "reused")
    _move(engine, old_id, "active", "deleted")

    with engine.begin() as connection:
        new_id, version = builders.a_definition(connection, "reused")

    assert new_id != old_id and version == 1
    with engine.connect() as connection:
        current = queries.get_definition(connection, name="reused")
        heading = definitions.definition_heading(connection, "reused")
        listed = [(row.id, row.lifecycle) for row in queries.list_definitions(connection)]
    assert current is not None and current.id == new_id
    assert heading is not None and heading.id == new_id
    assert listed == [(new_id, "active"), (old_id, "deleted")]


def test_two_definitions_never_hold_one_name(engine: Engine) -> None:
    with engine.begin() as connection:
        holder_id, _ = builders.a_definition(connection, "held")
    now = datetime.now(UTC)
    for lifecycle in ("active", "disabled", "deleting"):
        with engine.begin() as connection:
            connection.execute(
                schema.definitions.update()
                .where(schema.definitions.c.id == holder_id)
                .values(lifecycle=lifecycle)
            )
        with pytest.raises(errors.DuplicateKey), engine.begin() as connection:
            connection.execute(
                schema.definitions.insert().values(
                    id=f"second-{lifecycle}",
                    name="held",
                    lifecycle="active",
                    created_at=now,
                    updated_at=now,
                )
            )
