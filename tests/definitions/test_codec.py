"""What the ledger stores: the JSON form of a definition, and its content hash."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.definitions.test_parse import DESIGN_EXAMPLE
from veritask.core.jsontypes import JSONValue
from veritask.definitions.parse import (
    content_hash,
    definition_from_json,
    definition_to_json,
    parse_definition,
)

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.yaml"))


def reorder(value: JSONValue) -> JSONValue:
    """Reverse every object's keys, as a JSON store that does not keep key order might."""
    if isinstance(value, dict):
        return {key: reorder(value[key]) for key in reversed(list(value))}
    if isinstance(value, list):
        return [reorder(item) for item in value]
    return value


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_a_definition_survives_the_round_trip_through_json(path: Path) -> None:
    original = parse_definition(path.read_text())
    stored = json.loads(json.dumps(definition_to_json(original)))
    assert definition_from_json(stored) == original
    assert definition_from_json(reorder(stored)) == original  # type: ignore[arg-type]


def test_the_design_example_survives_the_round_trip() -> None:
    original = parse_definition(DESIGN_EXAMPLE)
    restored = definition_from_json(definition_to_json(original))
    assert restored == original
    assert list(restored.tasks) == ["extract", "transform", "load"]
    assert content_hash(restored) == content_hash(original)


def test_the_stored_form_is_itself_a_definition_document() -> None:
    stored = definition_to_json(parse_definition(DESIGN_EXAMPLE))
    assert parse_definition(json.dumps(stored, indent=2)) == parse_definition(DESIGN_EXAMPLE)
    assert parse_definition(yaml.safe_dump(stored)) == parse_definition(DESIGN_EXAMPLE)


def test_tasks_are_stored_as_a_list_to_keep_their_order() -> None:
    stored = definition_to_json(parse_definition(DESIGN_EXAMPLE))
    tasks = stored["tasks"]
    assert isinstance(tasks, list)
    assert [t["key"] for t in tasks if isinstance(t, dict)] == ["extract", "transform", "load"]


def hashed(text: str) -> str:
    return content_hash(parse_definition(text))


def test_equal_content_has_an_equal_hash_whatever_the_formatting() -> None:
    block = (
        "name: h\ntasks:\n  a:\n    run: 'true'\n    timeout: 1h\n  b:\n    run: x\n"
        "    after: [a]\n"
    )
    flow = "name: h\ntasks: {a: {timeout: 3600, run: 'true'}, b: {after: [a], run: x}}\n"
    as_json = json.dumps(
        {
            "tasks": {"b": {"run": "x", "after": ["a"]}, "a": {"run": "true", "timeout": "60m"}},
            "name": "h",
        },
        indent=4,
    )
    with_defaults = (
        "name: h\ndefaults: {}\ntasks:\n  a: {run: 'true', timeout: 1h}\n  b: {run: x, after: a}\n"
    )
    assert hashed(block) == hashed(flow) == hashed(as_json) == hashed(with_defaults)


def test_the_hash_changes_with_the_content() -> None:
    base = "name: h\ntasks:\n  a: {run: 'true'}\n"
    assert hashed(base) != hashed("name: h\ntasks:\n  a: {run: 'false'}\n")
    assert hashed(base) != hashed("name: h2\ntasks:\n  a: {run: 'true'}\n")
    assert hashed(base) != hashed("name: h\ntasks:\n  a: {run: 'true', timeout: 5m}\n")
    assert hashed(base).startswith("sha256:")
    assert len(hashed(base)) == len("sha256:") + 64


def test_the_hash_is_stable_across_releases() -> None:
    # A changed hash makes every stored definition look new: change this only on purpose.
    # (Changed once before the first release, when policies gained cancel_window.)
    d = parse_definition("name: h\ntasks:\n  a: {run: 'true'}\n")
    assert content_hash(d) == (
        "sha256:f592eeaa1d815621a9de268d6de3643888e3851317aaa20348d1d6d6ecb12eb8"
    )
