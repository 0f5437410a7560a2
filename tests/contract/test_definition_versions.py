"""Stored definition versions are parsed once per process (scheduling/versions.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from veritask.core.jsontypes import JSONObject
from veritask.core.states import TriggerKind
from veritask.definitions.model import Definition
from veritask.definitions.parse import definition_from_json
from veritask.ledger import schema
from veritask.ledger.ledger import Ledger
from veritask.scheduling import triggers, versions

#: Runs may overlap: a test triggers twice while the first run is still active.
TEXT = """\
name: versions-{n}
concurrency: allow
tasks:
  extract: {{run: "true"}}
  load: {{run: "true", after: [extract]}}
"""


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[JSONObject]:
    """Every stored spec that versions.py parses from now on."""
    seen: list[JSONObject] = []
    parse: Callable[[JSONObject], Definition] = definition_from_json

    def counted(spec: JSONObject) -> Definition:
        seen.append(spec)
        return parse(spec)

    monkeypatch.setattr(versions, "definition_from_json", counted)
    return seen


def stored(engine: Engine, definition_id: str, version: int) -> Definition:
    v = schema.definition_versions.c
    with engine.connect() as connection:
        spec = connection.execute(
            sa.select(v.spec).where(v.definition_id == definition_id, v.version == version)
        ).scalar_one()
    return definition_from_json(spec)


def test_a_version_applied_in_this_process_is_triggered_without_parsing_it_again(
    engine: Engine, parses: list[JSONObject]
) -> None:
    ledger = Ledger(engine)
    applied = triggers.apply_definition(ledger, TEXT.format(n=1))
    triggers.trigger(ledger, name=applied.name, kind=TriggerKind.MANUAL, actor="operator:test")

    assert parses == []
    with engine.connect() as connection:
        kept = versions.read(connection, applied.definition_id, applied.version)
    assert kept == stored(engine, applied.definition_id, applied.version)


def test_a_version_this_process_did_not_store_is_parsed_once_from_its_spec(
    engine: Engine, parses: list[JSONObject]
) -> None:
    ledger = Ledger(engine)
    applied = triggers.apply_definition(ledger, TEXT.format(n=2))
    versions._parsed.clear()  # as in another process: only the database has it

    for _ in range(2):
        triggers.trigger(ledger, name=applied.name, kind=TriggerKind.MANUAL, actor="operator:test")

    assert len(parses) == 1
