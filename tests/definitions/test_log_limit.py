"""``log_limit``: how much output an attempt's log keeps, in ``defaults`` or on a task."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from veritask.core import sizes
from veritask.definitions.codec import definition_to_json
from veritask.definitions.errors import DefinitionError, Problem
from veritask.definitions.parse import content_hash, definition_from_json, parse_definition
from veritask.pipelines import compile as pipelines

DEFINITION = """\
name: big_logs
defaults:
  log_limit: 200MiB
tasks:
  chatty: {run: "true"}
  chattier: {run: "true", log_limit: 1GB}
  quiet: {run: "true", log_limit: 4096}
"""


def test_a_task_inherits_the_defaults_limit_unless_it_names_its_own() -> None:
    definition = parse_definition(DEFINITION)

    limits = {key: task.log_limit for key, task in definition.tasks.items()}

    assert limits == {"chatty": 200 * 1024**2, "chattier": 1000**3, "quiet": 4096}
    again = definition_from_json(definition_to_json(definition))
    assert {key: task.log_limit for key, task in again.tasks.items()} == limits


def test_no_limit_named_leaves_the_executor_to_decide_and_keeps_the_hash_input() -> None:
    definition = parse_definition("name: plain\ntasks:\n  a: {run: 'true'}\n")

    assert definition.tasks["a"].log_limit is None
    assert "log_limit" not in str(definition_to_json(definition))


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("lots", "'lots' is not a size"),
        ("12 parsecs", "'12 parsecs' is not a size"),
        ("-5", "-5 is not a size"),
        ("100", "100 is out of range: a log limit is from 1KiB to 64GiB"),
        ("65GiB", "'65GiB' is out of range"),
        ("[1, 2]", "'a list' is not a size"),
    ],
)
def test_a_bad_limit_is_refused_naming_the_field_and_the_line(value: str, message: str) -> None:
    text = (
        "name: x\ndefaults:\n  retry: {max_retries: 1}\n"
        f"  log_limit: {value}\n"
        "tasks:\n  a: {run: 'true'}\n"
    )

    with pytest.raises(DefinitionError) as refused:
        parse_definition(text)

    [problem] = refused.value.problems
    assert (problem.field, problem.line) == ("defaults.log_limit", 4)
    assert message in problem.message


def test_a_tasks_bad_limit_names_the_task() -> None:
    with pytest.raises(DefinitionError) as refused:
        parse_definition("name: x\ntasks:\n  a:\n    run: 'true'\n    log_limit: true\n")

    assert refused.value.problems == [
        Problem(
            "tasks.a.log_limit",
            5,
            "True is not a size: write a number of bytes or a number with a unit, such as "
            "512KiB, 200MiB, 2GiB or 100MB",
        )
    ]


def test_sizes_read_binary_and_decimal_units() -> None:
    assert sizes.parse_size("512KiB") == 512 * 1024
    assert sizes.parse_size("1.5GiB") == 3 * 1024**3 // 2
    assert sizes.parse_size("100MB") == 100_000_000
    assert sizes.parse_size(2048) == 2048
    assert sizes.format_size(200 * 1024**2) == "200MiB"


def test_a_python_pipeline_sets_the_same_limits_with_the_same_hash(tmp_path: Path) -> None:
    path = tmp_path / "limited.py"
    path.write_text(
        "from veritask import Defaults, pipeline, shell\n"
        "\n"
        "@pipeline(name='big_logs', defaults=Defaults(log_limit='200MiB'))\n"
        "def big_logs() -> None:\n"
        "    shell('true', name='chatty')\n"
        "    shell('true', name='chattier', log_limit='1GB')\n"
        "    shell('true', name='quiet', log_limit=4096)\n"
    )
    try:
        [compiled] = pipelines.load_file(path)
    finally:
        sys.modules.pop("limited", None)

    written = parse_definition(DEFINITION)
    assert compiled.definition == written
    assert compiled.content_hash == content_hash(written)
