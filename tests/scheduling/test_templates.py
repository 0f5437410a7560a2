"""A parameter is data: what a trigger gives reaches a ``run:`` command as one word and a
``sql:`` statement as a bound value, never as code. The commands here run in a real
``/bin/sh``, with the spec and the environment the dispatcher builds for the worker."""

from __future__ import annotations

import os
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from veritask.definitions.parse import parse_definition
from veritask.execution import port
from veritask.scheduling import templates
from veritask.scheduling.dispatch import Dispatcher, Opened, RunContext
from veritask.scheduling.tokens import AttemptTokens

PAYLOAD = "users; id > pwned; echo"

DEFINITION = """\
name: quoting
parameters:
  table: {type: string, default: users}
  rows: {type: integer, default: 10}
  suffix: {type: string, raw: true, default: plain}
tasks:
  args: {run: "printf '<%s>\\\\n' {{ params.table }} --day={{ ds }} {{ params.rows }}"}
  raw: {run: "echo {{ params.suffix }}"}
  load:
    sql: "INSERT INTO t_{{ params.suffix }} SELECT {{ params.table }}, {{ params.rows }}, {{ ds }}"
    connection: warehouse
  call: {call: "jobs:main", with: {table: "{{ params.table }}"}}
  count: {call: "jobs:count", with: {rows: "{{ params.rows }}", table: "{{ params.table }}"}}
"""


def spec_of(task: str, parameters: dict[str, object], tmp_path: Path) -> port.AttemptSpec:
    dispatcher = Dispatcher(executors={}, tokens=AttemptTokens(b"s" * 32), outbox=tmp_path)
    run = RunContext(
        "run-1",
        parse_definition(DEFINITION),
        datetime(2024, 1, 31, 2, 0, tzinfo=UTC),
        parameters,  # type: ignore[arg-type]
    )
    return dispatcher.spec(run, Opened(f"{task}-instance", 1, task, "nonce"))


def run_in_shell(spec: port.AttemptSpec, workdir: Path) -> str:
    assert isinstance(spec.task, port.ShellCommand)
    done = subprocess.run(
        ["/bin/sh", "-c", spec.task.command],
        env={"PATH": os.environ["PATH"], **spec.env},
        cwd=workdir,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def test_an_injected_command_reaches_the_shell_as_one_literal_argument(tmp_path: Path) -> None:
    spec = spec_of("args", {"table": PAYLOAD}, tmp_path)
    output = run_in_shell(spec, tmp_path)
    assert output.splitlines() == [f"<{PAYLOAD}>", "<--day=2024-01-31>", "<10>"]
    assert not (tmp_path / "pwned").exists()
    assert PAYLOAD not in spec.task.command  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "value",
    ["$(id)", "`id`", "a'b", 'a"b', "a\nrm -rf x", "*", "", "  two  words  ", "${PATH}"],
)
def test_any_value_is_one_word_exactly_as_given(value: str, tmp_path: Path) -> None:
    (tmp_path / "x").mkdir()
    output = run_in_shell(spec_of("args", {"table": value}, tmp_path), tmp_path)
    assert output.split("\n<--day=")[0] == f"<{value}>"
    assert (tmp_path / "x").exists()


def test_defaults_fill_what_the_trigger_left_out(tmp_path: Path) -> None:
    output = run_in_shell(spec_of("args", {}, tmp_path), tmp_path)
    assert output.splitlines() == ["<users>", "<--day=2024-01-31>", "<10>"]


def test_a_raw_parameter_is_pasted_as_written(tmp_path: Path) -> None:
    output = run_in_shell(spec_of("raw", {"suffix": "a; echo pasted"}, tmp_path), tmp_path)
    assert output.splitlines() == ["a", "pasted"]


def test_a_statement_carries_placeholders_and_its_values_apart(tmp_path: Path) -> None:
    spec = spec_of("load", {"table": "'; DROP TABLE x; --", "suffix": "day"}, tmp_path)
    assert spec.task == port.SqlStatement(
        "INSERT INTO t_day SELECT $1, $2, $3",
        "warehouse",
        ("'; DROP TABLE x; --", 10, "2024-01-31"),
    )


def test_a_callable_gets_the_value_as_text_in_its_arguments(tmp_path: Path) -> None:
    spec = spec_of("call", {"table": PAYLOAD}, tmp_path)
    assert spec.task == port.PythonCallable("jobs:main", {"table": PAYLOAD})


def test_a_callable_gets_a_typed_parameter_as_its_value_and_an_untyped_one_as_text() -> None:
    values = templates.context(
        run_id="r", logical_time=None, params={"rows": 10, "loose": 3}, typed=["rows"]
    )
    rendered = {
        key: templates.render_json(value, values)
        for key, value in {
            "rows": "{{ params.rows }}",
            "loose": "{{ params.loose }}",
            "label": "rows={{ params.rows }}",
        }.items()
    }
    assert rendered == {"rows": 10, "loose": "3", "label": "rows=10"}


def test_the_dispatcher_passes_a_declared_integer_as_an_int(tmp_path: Path) -> None:
    spec = spec_of("count", {"rows": 7}, tmp_path)
    assert spec.task == port.PythonCallable("jobs:count", {"rows": 7, "table": "users"})


def test_rendering_refuses_what_apply_refuses() -> None:
    values = templates.context(run_id="r", logical_time=None, params={"t": "x"})
    with pytest.raises(ValueError, match="inside quotes"):
        templates.render_shell("echo '{{ params.t }}'", values)
    with pytest.raises(ValueError, match="inside quotes"):
        templates.render_sql("SELECT '{{ params.t }}'", values)
    with pytest.raises(ValueError, match="bound only in"):
        templates.render_sql("CREATE TABLE x AS SELECT {{ params.t }}", values)
    # A name the run does not define stays as written, as before.
    assert templates.render_shell("echo {{ other }}", values)[0] == "echo {{ other }}"
