"""Run parameters: the short and the long form, their checks at apply and at trigger, and the
placeholders a definition may write (a value stays data wherever it is substituted)."""

from __future__ import annotations

import pytest

from veritask.definitions import parameters
from veritask.definitions.errors import DefinitionError, Problem
from veritask.definitions.parameters import InvalidParameters, Parameter, ParameterType
from veritask.definitions.parse import (
    content_hash,
    definition_from_json,
    definition_to_json,
    parse_definition,
)

#: A definition with short-form parameters, and the content hash it had before parameters had
#: types: stored versions keep their hash (an equal apply finds the same version).
SHORT_FORM = """\
name: short
parameters: {day: "2024-01-01", rows: 10, cfg: {a: 1}, tags: [x]}
tasks:
  work: {run: "echo {{ params.day }}"}
"""
SHORT_FORM_HASH = "sha256:950b08e179dda73034646ee8fe4e9d52790e9f056a987d12b29be39412be0884"

LONG_FORM = """\
name: typed
parameters:
  rows: {type: integer, default: 10}
  mode: {enum: [full, delta], default: delta}
  day: {type: date, default: "2024-01-31"}
  table: {type: string, raw: true, description: pasted into the command}
  ratio: {type: number, default: 0.5}
  dry: {type: boolean, default: false}
  since: {type: datetime}
tasks:
  work: {run: "echo {{ params.rows }} {{ params.table }}"}
"""


def problems_of(text: str) -> list[Problem]:
    with pytest.raises(DefinitionError) as refused:
        parse_definition(text)
    return refused.value.problems


def test_the_short_form_is_a_parameter_of_any_value_stored_and_hashed_as_before() -> None:
    d = parse_definition(SHORT_FORM)
    assert d.parameters == {
        "day": Parameter(default="2024-01-01"),
        "rows": Parameter(default=10),
        "cfg": Parameter(default={"a": 1}),
        "tags": Parameter(default=["x"]),
    }
    assert definition_to_json(d)["parameters"] == {
        "day": "2024-01-01",
        "rows": 10,
        "cfg": {"a": 1},
        "tags": ["x"],
    }
    assert content_hash(d) == SHORT_FORM_HASH


def test_the_long_form_declares_type_default_choices_and_raw() -> None:
    d = parse_definition(LONG_FORM)
    p = d.parameters
    assert p["rows"] == Parameter(default=10, type=ParameterType.INTEGER)
    assert p["mode"] == Parameter(default="delta", choices=("full", "delta"))
    assert p["day"].type is ParameterType.DATE
    assert p["table"] == Parameter(
        None, False, ParameterType.STRING, raw=True, description="pasted into the command"
    )
    assert not p["since"].has_default
    stored = definition_to_json(d)
    assert stored["parameters"]["rows"] == {"type": "integer", "default": 10}  # type: ignore[index,call-overload]
    assert definition_from_json(stored) == d
    assert content_hash(definition_from_json(stored)) == content_hash(d)
    assert content_hash(d) != content_hash(parse_definition(LONG_FORM.replace("10}", "11}")))


def test_declarations_are_refused_with_their_field_and_line() -> None:
    found = problems_of(
        """\
name: bad
schedule: {cron: "0 2 * * *"}
parameters:
  rows: {type: interger, default: 10}
  mode: {enum: [], default: x}
  both: {enum: [a], choices: [a]}
  wrong: {type: integer, default: ten}
  outside: {enum: [a, b], default: c}
  needed: {type: string}
  typo: {default: 1, tpye: integer}
  nested: {enum: [[1]]}
tasks:
  work: {run: "true"}
"""
    )
    assert [(p.field, p.line) for p in found] == [
        ("parameters.rows.type", 4),
        ("parameters.mode.enum", 5),
        ("parameters.both.choices", 6),
        ("parameters.wrong.default", 7),
        ("parameters.outside.default", 8),
        ("parameters.needed", 9),
        ("parameters.typo.tpye", 10),
        ("parameters.nested.enum[0]", 11),
    ]
    assert "did you mean 'integer'" in found[0].message
    assert found[3].message == "expected a whole number, got the string 'ten'"
    assert found[4].message == 'expected one of "a", "b", got the string \'c\''
    assert "scheduled" in found[5].message
    assert "did you mean 'type'" in found[6].message


@pytest.mark.parametrize(
    ("command", "name"),
    [
        ("echo '{{ params.table }}'", "params.table"),
        ('echo "{{ params.table }}"', "params.table"),
        ('echo "$(cat {{ ds }})"', "ds"),
        ("echo 'it''s' x\"{{ run_id }}\"", "run_id"),
    ],
)
def test_a_placeholder_inside_shell_quotes_is_refused_at_apply(command: str, name: str) -> None:
    text = (
        "name: quoted\nparameters: {table: users}\ntasks:\n  work:\n    run: "
        + repr(command).replace("\\'", "''")
        + "\n"
    )
    found = problems_of(text)
    assert [(p.field, p.line) for p in found] == [("tasks.work.run", 5)]
    assert found[0].message.startswith("{{ " + name + " }} is written inside quotes")


def test_raw_parameters_and_comments_and_words_outside_quotes_are_accepted() -> None:
    d = parse_definition(
        """\
name: fine
parameters: {table: {raw: true, default: users}, day: "2024-01-01"}
tasks:
  work:
    run: |
      echo --day={{ params.day }} '{{ params.table }}' {{ ds }}  # "{{ ds }}"
      cat <<EOF
      {{ params.day }}
      EOF
"""
    )
    assert d.tasks["work"].run is not None


@pytest.mark.parametrize(
    ("statement", "field_message"),
    [
        ("SELECT * FROM t WHERE day = '{{ ds }}'", "written inside a quoted string or name"),
        ('SELECT * FROM "t_{{ ds }}"', "written inside a quoted string or name"),
        ("SELECT $x${{ ds }}$x$", "written inside a quoted string or name"),
        ("CREATE TABLE t AS SELECT {{ ds }} AS day", "cannot be bound in this statement"),
    ],
)
def test_a_placeholder_in_sql_must_stand_where_a_value_is_bound(
    statement: str, field_message: str
) -> None:
    text = f"name: q\ntasks:\n  load:\n    sql: {statement!r}\n    connection: wh\n"
    found = problems_of(text.replace("\\'", "''"))
    assert [(p.field, p.line) for p in found] == [("tasks.load.sql", 4)]
    assert field_message in found[0].message


def test_sql_placeholders_in_comments_and_raw_ones_in_ddl_are_accepted() -> None:
    d = parse_definition(
        """\
name: q
parameters: {suffix: {type: string, raw: true, default: a}}
tasks:
  load:
    sql: "CREATE TABLE t_{{ params.suffix }} (day date) -- '{{ ds }}'"
    connection: wh
  copy:
    sql: "/* {{ ds }} */ WITH d AS (SELECT {{ ds }}::date) INSERT INTO t SELECT * FROM d"
    connection: wh
"""
    )
    assert set(d.tasks) == {"load", "copy"}


def test_a_sql_task_or_wait_with_a_second_statement_is_refused_at_its_line() -> None:
    found = problems_of(
        """\
name: q
tasks:
  load:
    sql: |
      INSERT INTO t VALUES (1); -- first
      DELETE FROM t
    connection: wh
  ready:
    wait: {sql: "SELECT 1; SELECT 2", connection: wh}
"""
    )
    assert [(p.field, p.line) for p in found] == [
        ("tasks.load.sql", 6),
        ("tasks.ready.wait.sql", 9),
    ]
    assert "more than one statement" in found[0].message


@pytest.mark.parametrize(
    "statement",
    [
        "INSERT INTO t VALUES (1);",
        "INSERT INTO t VALUES (1); -- done",
        "INSERT INTO t VALUES (1) -- no; second",
        "INSERT INTO t VALUES ('a;b') /* ; */ ;;",
        "DO $x$ BEGIN PERFORM 1; PERFORM 2; END $x$",
    ],
)
def test_one_statement_with_semicolons_in_comments_quotes_or_at_its_end_is_accepted(
    statement: str,
) -> None:
    text = f"name: q\ntasks:\n  load:\n    sql: {statement!r}\n    connection: wh\n"
    d = parse_definition(text.replace("\\'", "''"))
    assert d.tasks["load"].sql == statement.replace("\\'", "'")


def test_trigger_values_are_checked_against_their_declarations() -> None:
    declared = parse_definition(LONG_FORM).parameters
    checked = parameters.check_values(
        declared,
        {
            "rows": "12",
            "mode": "full",
            "table": 7,
            "dry": "true",
            "ratio": 2,
            "since": "2024-01-31T02:00:00+00:00",
        },
    )
    assert checked == {
        "rows": 12,
        "mode": "full",
        "table": "7",
        "dry": True,
        "ratio": 2,
        "since": "2024-01-31T02:00:00+00:00",
    }
    with pytest.raises(InvalidParameters) as refused:
        parameters.check_values(
            declared,
            {"rows": "many", "mode": "weekly", "day": "31/01/2024", "nope": 1, "dry": 1},
        )
    assert [(p.field, p.message) for p in refused.value.problems] == [
        ("parameters.rows", "expected a whole number, got the string 'many'"),
        ("parameters.mode", 'expected one of "full", "delta", got the string \'weekly\''),
        ("parameters.day", "expected a date (YYYY-MM-DD), got the string '31/01/2024'"),
        ("parameters.nope", "unknown; known: rows, mode, day, table, ratio, dry, since"),
        ("parameters.dry", "expected true or false, got the number 1"),
        ("parameters.table", "required: the definition gives it no default"),
        ("parameters.since", "required: the definition gives it no default"),
    ]


def test_a_definition_without_parameters_takes_any_as_data() -> None:
    assert parameters.check_values({}, {"x": [1]}) == {"x": [1]}


@pytest.mark.parametrize(
    "value",
    [
        "!!python/object/apply:os.system [echo pwned]",
        "!foo {a: 1}",
        "!!set {a, b}",
        "!!omap [a: 1]",
        "!bar text",
        "!!binary aGVsbG8=",
    ],
)
def test_every_non_standard_tag_is_refused_with_field_and_line(value: str) -> None:
    found = problems_of(f"name: tags\ntasks:\n  work: {{run: 'true'}}\nparameters:\n  p: {value}\n")
    assert [(p.field, p.line) for p in found] == [("parameters.p", 5)]
    assert "is refused: a definition holds plain JSON values" in found[0].message


def test_standard_tags_still_read_as_their_values() -> None:
    d = parse_definition("name: t\ntasks:\n  work: {run: !!str true}\nparameters: {n: !!int '3'}\n")
    assert d.tasks["work"].run == "true"
    assert d.parameters["n"].default == 3


@pytest.mark.parametrize(
    "nested",
    [
        "parameters: " + "[" * 1000 + "]" * 1000,
        "parameters: " + "{a: " * 1000 + "1" + "}" * 1000,
    ],
)
def test_a_definition_nested_too_deeply_is_refused_before_it_is_walked(nested: str) -> None:
    found = problems_of("name: deep\ntasks: {work: {run: 'true'}}\n" + nested + "\n")
    assert [(p.field, p.line) for p in found] == [("", 3)]
    assert "nested too deeply (over 64 levels" in found[0].message


def test_json_nested_too_deeply_is_refused_too() -> None:
    text = '{"name": "deep", "tasks": {"w": {"run": "true"}}, "parameters": ' + '{"a": ' * 1000
    found = problems_of(text + "1" + "}" * 1001)
    assert "nested too deeply" in found[0].message


def test_an_unknown_template_variable_is_refused_at_apply_with_its_field_and_line() -> None:
    found = problems_of(
        """\
name: typos
parameters: {table: users}
tasks:
  work:
    run: |
      echo {{ logical_date }}
      echo {{ logical_dat }}  # {{ a_comment_is_text }}
  load:
    sql: "SELECT {{ params.tabel }}"
    connection: wh
  call:
    call: "json:dumps"
    with: {value: "{{ run }}"}
"""
    )
    assert [(p.field, p.line) for p in found] == [
        ("tasks.work.run", 7),
        ("tasks.load.sql", 9),
        ("tasks.call.with.value", 13),
    ]
    assert found[0].message.startswith("{{ logical_dat }} is not a template variable; known:")
    assert "{{ logical_date }}" in found[0].message
    assert "{{ params.table }}" in found[1].message


def test_any_parameter_is_a_template_variable_when_none_is_declared() -> None:
    d = parse_definition("name: open\ntasks:\n  work: {run: 'echo {{ params.day }}'}\n")
    assert d.tasks["work"].run == "echo {{ params.day }}"
