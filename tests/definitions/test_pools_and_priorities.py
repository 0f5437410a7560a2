"""A task's pool, its slots and its priority: YAML, JSON and Python spell the same definition."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from veritask.definitions import codec
from veritask.definitions.errors import DefinitionError
from veritask.definitions.parse import definition_from_json, parse_definition
from veritask.pipelines import compile as pipelines

YAML = """\
name: loads
priority: 3
tasks:
  extract: {run: "true", pool: warehouse, pool_slots: 2}
  audit: {run: "true", after: [extract], priority: 0}
  load: {run: "true", after: [extract]}
"""


def test_a_task_names_its_pool_and_slots_and_inherits_the_definitions_priority() -> None:
    d = parse_definition(YAML)
    fields = {k: (t.pool, t.pool_slots, t.priority) for k, t in d.tasks.items()}
    assert fields == {
        "extract": ("warehouse", 2, 3),
        "audit": (None, 1, 0),
        "load": (None, 1, 3),
    }
    assert d.priority == 3


def test_the_fields_survive_storage_and_change_the_hash() -> None:
    d = parse_definition(YAML)
    assert definition_from_json(codec.definition_to_json(d)) == d
    without = YAML.replace(", pool: warehouse, pool_slots: 2", "")
    assert codec.content_hash(parse_definition(without)) != codec.content_hash(d)


def test_a_definition_that_names_none_keeps_its_hash() -> None:
    text = 'name: plain\ntasks:\n  a: {run: "true"}\n'
    stored = codec.definition_to_json(parse_definition(text))
    assert "priority" not in stored
    tasks = stored["tasks"]
    assert isinstance(tasks, list) and isinstance(tasks[0], dict)
    assert not tasks[0].keys() & {"pool", "pool_slots", "priority"}


@pytest.mark.parametrize(
    ("task", "field", "message"),
    [
        ('{run: "true", pool: "Big Pool"}', "tasks.a.pool", "is not a valid name"),
        ('{run: "true", pool_slots: 0}', "tasks.a.pool_slots", "must be 1 or more"),
        ('{run: "true", priority: high}', "tasks.a.priority", "whole number"),
    ],
)
def test_a_bad_pool_or_priority_is_refused_naming_the_field_and_line(
    task: str, field: str, message: str
) -> None:
    with pytest.raises(DefinitionError) as caught:
        parse_definition(f"name: bad\ntasks:\n  a: {task}\n")
    [problem] = caught.value.problems
    assert problem.field == field
    assert problem.line == 3
    assert message in problem.message


def test_the_python_spelling_is_the_same_definition(tmp_path: Path) -> None:
    path = tmp_path / "loads.py"
    path.write_text(
        textwrap.dedent(
            """\
            from veritask import pipeline, shell

            @pipeline(name="loads", priority=3)
            def loads() -> None:
                extract = shell("true", name="extract", pool="warehouse", pool_slots=2)
                shell("true", name="audit", after=[extract], priority=0)
                shell("true", name="load", after=[extract])
            """
        )
    )
    try:
        [compiled] = pipelines.load_file(path)
    finally:
        sys.modules.pop("loads", None)
        if str(tmp_path) in sys.path:
            sys.path.remove(str(tmp_path))
    written = parse_definition(YAML)
    assert compiled.definition == written
    assert compiled.content_hash == codec.content_hash(written)
