"""A trigger reads its definition once, through the parsed-definition cache, and checks its
parameters once (``scheduling/triggers.py``): the service in front adds no read of its own."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa

from veritask.core.states import DefinitionLifecycle
from veritask.ledger import schema
from veritask.scheduling import triggers
from veritask.services import runs
from veritask.services.errors import Conflict, InvalidInput
from veritask.services.platform import Platform

PIPELINE = """\
name: pipeline
parameters: {table: users}
tasks:
  extract: {run: "echo extract"}
"""


@pytest.fixture
def platform(database_url: str, tmp_path: Path) -> Iterator[Platform]:
    opened = Platform.open(database_url, tmp_path / "home")
    yield opened
    opened.close()


class Statements:
    """The statements sent to the database while it is listening."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self.sent: list[str] = []

    def __enter__(self) -> Statements:
        sa.event.listen(self.engine, "before_cursor_execute", self._record)
        return self

    def __exit__(self, *exc_info: object) -> None:
        sa.event.remove(self.engine, "before_cursor_execute", self._record)

    def _record(self, conn: object, cursor: object, statement: str, *args: object) -> None:
        self.sent.append(statement)

    def reading(self, table: str) -> list[str]:
        """The SELECTs that read ``table``."""
        pattern = re.compile(rf"\bFROM {table}\b|\bJOIN {table}\b")
        return [
            s for s in self.sent if s.lstrip().upper().startswith("SELECT") and pattern.search(s)
        ]


def test_a_trigger_reads_its_definition_once_and_its_version_from_the_cache(
    platform: Platform,
) -> None:
    triggers.apply_definition(platform.ledger, PIPELINE)  # parsed as it was stored

    with Statements(platform.engine) as statements:
        runs.trigger_run(platform, "pipeline", actor="operator:test", parameters={"table": "x"})

    assert len(statements.reading("definitions")) == 1, statements.sent
    assert statements.reading("definition_versions") == [], statements.sent


def test_parameters_are_refused_naming_the_field(platform: Platform) -> None:
    triggers.apply_definition(platform.ledger, PIPELINE)

    with pytest.raises(InvalidInput) as refused:
        runs.trigger_run(platform, "pipeline", actor="operator:test", parameters={"tabel": "x"})

    assert [problem.field for problem in refused.value.problems] == ["parameters.tabel"]


def test_a_definition_without_a_version_is_a_conflict_naming_its_lifecycle(
    platform: Platform,
) -> None:
    now = datetime.now(UTC)
    with platform.engine.begin() as connection:
        connection.execute(
            schema.definitions.insert().values(
                id=str(uuid.uuid4()),
                name="unfinished",
                current_version=None,
                lifecycle=DefinitionLifecycle.ACTIVE.value,
                created_at=now,
                updated_at=now,
            )
        )

    with pytest.raises(Conflict, match="definition unfinished has no version") as refused:
        runs.trigger_run(platform, "unfinished", actor="operator:test")

    assert refused.value.current_state == DefinitionLifecycle.ACTIVE.value
