"""``env:`` on a definition and on a task: strings as written, secrets as references."""

from __future__ import annotations

import json

import pytest

from tests.definitions.test_parse import doc, refusal
from veritask.definitions.errors import Problem
from veritask.definitions.model import SecretRef, task_env
from veritask.definitions.parse import (
    content_hash,
    definition_from_json,
    definition_to_json,
    parse_definition,
)

WITH_ENV = doc(
    "name: with_env",
    "env:",
    "  TARGET: warehouse",
    "  PGPASSWORD: {secret: warehouse_password}",
    "tasks:",
    "  load:",
    "    run: load.sh",
    "    env:",
    "      TARGET: staging",
    "      TABLE: '{{ params.table }} $HOME'",
    "  report: {run: report.sh}",
)


def test_the_task_env_wins_over_the_definitions_and_values_stay_as_written() -> None:
    definition = parse_definition(WITH_ENV)

    warehouse = SecretRef("warehouse_password")
    assert definition.env == {"TARGET": "warehouse", "PGPASSWORD": warehouse}
    load, report = definition.tasks["load"], definition.tasks["report"]
    assert task_env(definition, load) == {
        "TARGET": "staging",
        "PGPASSWORD": warehouse,
        "TABLE": "{{ params.table }} $HOME",
    }
    assert task_env(definition, report) == {"TARGET": "warehouse", "PGPASSWORD": warehouse}


def test_the_stored_form_holds_the_secrets_name_and_reads_back_equal() -> None:
    definition = parse_definition(WITH_ENV)

    stored = definition_to_json(definition)

    assert stored["env"] == {"TARGET": "warehouse", "PGPASSWORD": {"secret": "warehouse_password"}}
    again = definition_from_json(json.loads(json.dumps(stored)))
    assert again == definition
    assert content_hash(again) == content_hash(definition)


def test_a_definition_without_env_keeps_its_stored_form_and_hash() -> None:
    plain = parse_definition("name: h\ntasks:\n  a: {run: 'true'}\n")
    empty = parse_definition("name: h\nenv: {}\ntasks:\n  a: {run: 'true', env: {}}\n")

    assert "env" not in definition_to_json(plain)
    assert all("env" not in task for task in definition_to_json(plain)["tasks"])  # type: ignore[union-attr,operator]
    assert content_hash(empty) == content_hash(plain)
    assert content_hash(plain) == (
        "sha256:f592eeaa1d815621a9de268d6de3643888e3851317aaa20348d1d6d6ecb12eb8"
    )
    with_env = parse_definition("name: h\nenv: {A: b}\ntasks:\n  a: {run: 'true'}\n")
    assert content_hash(with_env) != content_hash(plain)


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        (
            ["env:", "  VERITASK_DATABASE_URL: x"],
            Problem(
                "env.VERITASK_DATABASE_URL",
                3,
                "'VERITASK_DATABASE_URL' is reserved: the VERITASK_* variables belong to the "
                "platform",
            ),
        ),
        (
            ["env:", "  veritask_token: x"],
            Problem(
                "env.veritask_token",
                3,
                "'veritask_token' is reserved: the VERITASK_* variables belong to the platform",
            ),
        ),
        (
            ["env:", "  2FA: x"],
            Problem(
                "env.2FA",
                3,
                "'2FA' is not a valid environment variable name: use letters, digits and '_', "
                "not starting with a digit",
            ),
        ),
        (
            ["env:", "  PORT: 5432"],
            Problem(
                "env.PORT",
                3,
                "expected a string or a secret reference (secret: NAME), got the number 5432",
            ),
        ),
        (
            ["env:", "  PW: {secret: 'pass word'}"],
            Problem(
                "env.PW.secret",
                3,
                "'pass word' is not a valid secret name: use letters, digits and '_', not "
                "starting with a digit",
            ),
        ),
        (
            ["env:", "  PW: {secret: pw, default: x}"],
            Problem("env.PW.default", 3, "unknown field 'default'"),
        ),
        (
            ["env:", "  PW: {}"],
            Problem("env.PW.secret", 3, "the field 'secret' is required"),
        ),
        (["env: [A]"], Problem("env", 2, "expected a mapping, got a list")),
    ],
)
def test_a_bad_env_entry_is_refused_with_its_field_and_line(
    lines: list[str], expected: Problem
) -> None:
    assert refusal(doc("name: bad", *lines, "tasks:", "  a: {run: 'true'}")) == [expected]


def test_a_task_env_is_checked_too_and_a_sql_task_has_none() -> None:
    problems = refusal(
        doc(
            "name: bad",
            "tasks:",
            "  a:",
            "    run: 'true'",
            "    env: {VERITASK_SQL_URL_WH: x}",
            "  b:",
            "    sql: select 1",
            "    connection: wh",
            "    env: {A: b}",
        )
    )

    assert [(p.field, p.line) for p in problems] == [
        ("tasks.a.env.VERITASK_SQL_URL_WH", 5),
        ("tasks.b.env", 9),
    ]
    assert problems[1].message == "a sql task has no env: the statement is the whole task"
