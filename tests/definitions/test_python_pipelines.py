"""Pipelines written in Python compile to the definition the same YAML gives: the same checks,
the same content hash; and what cannot be compiled is refused with its Python file and line."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from veritask.definitions import parse
from veritask.pipelines import PipelineError
from veritask.pipelines import compile as pipelines
from veritask.pipelines.api import Options, Task

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"

Write = Callable[[str, str], Path]


@pytest.fixture
def write(tmp_path: Path) -> Iterator[Write]:
    """Write a pipeline module into a fresh folder; its modules are forgotten afterwards."""
    written: list[str] = []

    def put(name: str, text: str) -> Path:
        path = tmp_path / f"{name}.py"
        path.write_text(textwrap.dedent(text))
        written.append(name)
        return path

    yield put
    for name in written:
        sys.modules.pop(name, None)
    if str(tmp_path) in sys.path:
        sys.path.remove(str(tmp_path))


@pytest.fixture
def examples_on_path() -> Iterator[None]:
    sys.path.insert(0, str(EXAMPLES))
    try:
        yield
    finally:
        sys.path.remove(str(EXAMPLES))
        for name in [
            m
            for m in sys.modules
            if m in ("hello", "daily_report", "jobs") or m.startswith("jobs.")
        ]:
            del sys.modules[name]


def refusal_of(path: Path) -> PipelineError:
    with pytest.raises(PipelineError) as caught:
        pipelines.load_file(path)
    return caught.value


def line_of(path: Path, text: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if text in line)


# -- one definition, two spellings -----------------------------------------------------------


@pytest.mark.usefixtures("examples_on_path")
@pytest.mark.parametrize(
    ("python", "yaml"), [("hello.py", "hello.yaml"), ("daily_report.py", "publish.yaml")]
)
def test_a_python_twin_has_the_content_hash_of_its_yaml(python: str, yaml: str) -> None:
    [compiled] = pipelines.load_file(EXAMPLES / python)
    written = parse.parse_definition((EXAMPLES / yaml).read_text())
    assert compiled.definition == written
    assert compiled.content_hash == parse.content_hash(written)
    # The text the server is sent parses (the same checks) to the same definition.
    assert parse.content_hash(parse.parse_definition(compiled.source())) == compiled.content_hash


@pytest.mark.usefixtures("examples_on_path")
def test_a_task_compiles_to_a_call_of_its_module_with_constants_and_parameters() -> None:
    [compiled] = pipelines.load_module("jobs.daily_files")
    yaml_twin = """\
name: daily_files
owner: data
schedule: {cron: "0 2 * * *", timezone: Asia/Shanghai}
parameters: {prefix: {type: string, default: /data/raw}}
tasks:
  list_files:
    call: jobs.daily_files:list_files
    with: {day: "{{ ds }}", prefix: "{{ params.prefix }}"}
    retry: {max_retries: 3, delay: 30s}
    timeout: 10m
  load:
    call: jobs.daily_files:load
    with: {day: "{{ ds }}", parts: 3}
    after: [list_files]
"""
    assert compiled.content_hash == parse.content_hash(parse.parse_definition(yaml_twin))
    # The module's import path is in the spec (each call names it), so it is in the hash.
    assert compiled.spec["tasks"]["load"]["call"] == "jobs.daily_files:load"  # type: ignore[index,call-overload]


def test_every_field_of_a_definition_is_expressible(write: Write) -> None:
    path = write(
        "everything",
        """\
        from veritask import (
            Catchup, Check, Cron, Defaults, Param, Publish, Retry, Secret, Step, WaitFor,
            on_published, pipeline, shell, sql, task,
        )

        @task(requires_commit=True)
        def commit() -> None: ...

        @task(trigger_rule="all_done", env={"TOKEN": Secret("api_token")})
        def report(rows: int, mode: str) -> None: ...

        @pipeline(
            name="everything",
            description="all of it",
            schedule=Cron("@daily", catchup=Catchup(enabled=True)),
            concurrency="allow",
            defaults=Defaults(retry=Retry(max_retries=1, backoff="fixed"), lease="30s"),
            publish=Publish(checks=[Check(name="rows", call=report)], commit=Step(call=commit)),
            wait_for=[WaitFor("upstream", timeout="6h", lag="1d")],
            trigger=on_published("upstream", "other", when="any"),
            expected_finish="4h",
            queue="batch",
            env={"REGION": "eu"},
            alert_on_failure=False,
        )
        def everything(
            rows: int = Param(10, type="integer"),
            mode: str = Param("delta", enum=["full", "delta"]),
        ) -> None:
            up = shell("echo {{ params.rows }}", name="make", role="setup")
            q = sql("SELECT {{ ds }}", name="count", connection="warehouse", after=[up])
            report.options(name="summary", timeout="5m", on_unknown="fail").after(q)(rows, mode)
            shell("true", name="drop", role="teardown", decides_run=True, after=[up, "summary"])
        """,
    )
    [compiled] = pipelines.load_file(path)
    d = compiled.definition
    assert d.schedule is not None and d.schedule.catchup.enabled
    assert d.tasks["count"].sql == "SELECT {{ ds }}"
    assert d.tasks["summary"].after == ("count",)
    assert d.tasks["summary"].with_ == {"rows": "{{ params.rows }}", "mode": "{{ params.mode }}"}
    assert d.tasks["summary"].trigger_rule.value == "all_done"
    assert d.tasks["drop"].decides_run
    assert d.publish is not None and d.publish.commit.call == "everything:commit"
    assert d.wait_for[0].definition == "upstream"
    assert d.trigger is not None
    assert (d.trigger.upstreams, d.trigger.when.value) == (("upstream", "other"), "any")
    assert sorted(d.parameters) == ["mode", "rows"]
    assert not d.alert_on_failure


# -- refusals: the Python file and line, and nothing compiled --------------------------------


def test_a_task_called_outside_a_pipeline_is_refused_at_its_line(write: Write) -> None:
    path = write(
        "outside",
        """\
        from veritask import task

        @task
        def load(path: str) -> int:
            return 1

        load("x")
        """,
    )
    [problem] = refusal_of(path).problems
    assert (problem.file, problem.line) == (str(path), 7)
    assert "called outside a pipeline" in problem.message


def test_a_pipeline_calling_a_function_that_is_not_a_task_is_refused(write: Write) -> None:
    path = write(
        "helper",
        """\
        from veritask import pipeline, shell

        def helper() -> str:
            return "echo hi"

        @pipeline()
        def helped() -> None:
            shell(helper(), name="greet")
        """,
    )
    [problem] = refusal_of(path).problems
    assert (problem.file, problem.line) == (str(path), 8)
    assert "'helper', which is not a task" in problem.message


def test_a_comprehension_in_the_body_wires_tasks_and_may_not_call_helpers(write: Write) -> None:
    path = write(
        "looped",
        """\
        from veritask import pipeline, task

        @task
        def load(part: int) -> None: ...

        def helper(n: int) -> int:
            return n

        @pipeline()
        def looped() -> None:
            [load(n) for n in range(3)]
        """,
    )
    [compiled] = pipelines.load_file(path)
    assert list(compiled.definition.tasks) == ["load", "load_2", "load_3"]
    path.write_text(path.read_text().replace("load(n) for", "load(helper(n)) for"))
    sys.modules.pop("looped")
    [problem] = refusal_of(path).problems
    assert (problem.line, "'helper', which is not a task" in problem.message) == (11, True)


def test_a_cycle_is_refused_by_the_same_checks_at_the_python_line(write: Write) -> None:
    path = write(
        "cycle",
        """\
        from veritask import pipeline, shell

        @pipeline()
        def looping() -> None:
            shell("true", name="a", after=["b"])
            shell("true", name="b", after=["a"])
        """,
    )
    [problem] = refusal_of(path).problems
    assert problem.field == "tasks.a.after[0]"
    assert (problem.file, problem.line) == (str(path), 5)
    assert "the tasks form a cycle: a -> b -> a" in problem.message


def test_a_lambda_or_a_nested_function_cannot_be_a_task(write: Write) -> None:
    lam = write(
        "lam",
        """\
        from veritask import task

        double = task(lambda x: x * 2)
        """,
    )
    assert "a lambda cannot be a task" in str(refusal_of(lam))
    nested = write(
        "nested",
        """\
        from veritask import task

        def make():
            @task
            def inner() -> None: ...
            return inner

        inner = make()
        """,
    )
    [problem] = refusal_of(nested).problems
    assert (problem.file, problem.line) == (str(nested), 4)  # the @task line
    assert "defined inside a function" in problem.message


def test_an_argument_that_is_not_json_or_an_upstream_result_is_refused(write: Write) -> None:
    path = write(
        "badarg",
        """\
        from datetime import date
        from veritask import pipeline, task

        @task
        def load(day: object) -> None: ...

        @pipeline()
        def loading() -> None:
            load(date(2024, 1, 1))
        """,
    )
    [problem] = refusal_of(path).problems
    assert (problem.file, problem.line, problem.field) == (str(path), 9, "tasks.load.with.day")
    assert "neither a JSON value nor an upstream task's result" in problem.message


def test_an_upstream_result_passed_to_a_task_is_its_output_and_an_edge(write: Write) -> None:
    path = write(
        "passing",
        """\
        from veritask import pipeline, shell, task

        @task
        def list_files() -> list[str]:
            return []

        @task
        def load(paths: list[str], first: dict[str, object]) -> None: ...

        @pipeline()
        def passing() -> None:
            files = list_files()
            load(files, {"paths": [files], "n": 1})
            shell(f"wc -l {files}", name="count")
        """,
    )
    [compiled] = pipelines.load_file(path)
    tasks = compiled.spec["tasks"]
    assert isinstance(tasks, dict)
    assert tasks["load"] == {
        "call": "passing:load",
        "with": {
            "paths": "{{ outputs.list_files }}",
            "first": {"paths": ["{{ outputs.list_files }}"], "n": 1},
        },
        "after": ["list_files"],
    }
    assert tasks["count"] == {"run": "wc -l {{ outputs.list_files }}", "after": ["list_files"]}
    assert compiled.definition.tasks["load"].reads_outputs == ("list_files",)


def test_a_yaml_task_reading_the_output_of_a_task_it_does_not_run_after_is_refused() -> None:
    text = """\
name: reads
tasks:
  list_files: {call: jobs.files:list_files}
  other: {run: "true"}
  load:
    call: jobs.files:load
    with: {paths: "{{ outputs.list_files }}"}
    after: [other]
  show:
    run: echo {{ outputs.other }} {{ outputs.nowhere }}
    after: [other]
"""
    with pytest.raises(parse.DefinitionError) as caught:
        parse.parse_definition(text)
    found = [(p.field, p.line, p.message) for p in caught.value.problems]
    assert [(field, line) for field, line, _ in found] == [
        ("tasks.load.with.paths", 7),
        ("tasks.show.run", 10),
    ]
    assert "{{ outputs.list_files }} reads the output of task 'list_files'" in found[0][2]
    assert "add that task to its after" in found[0][2]
    assert "'nowhere'" in found[1][2]


def test_an_output_read_by_a_publish_step_or_a_statement_is_refused() -> None:
    text = """\
name: reads
tasks:
  a: {run: "true"}
  q: {sql: "SELECT {{ outputs.a }}", connection: wh, after: [a]}
publish:
  commit: {run: "echo {{ outputs.a }}"}
"""
    with pytest.raises(parse.DefinitionError) as caught:
        parse.parse_definition(text)
    assert [p.field for p in caught.value.problems] == ["tasks.q.sql", "publish.commit.run"]
    assert all(
        "only a task's run command or its with values" in p.message for p in caught.value.problems
    )


def test_map_over_a_result_compiles_to_a_mapped_task_with_the_hash_of_its_yaml(
    write: Write,
) -> None:
    path = write(
        "mapping",
        """\
        from veritask import pipeline, task

        @task
        def list_files() -> list[str]:
            return []

        @task
        def load(path: str, factor: int) -> int:
            return 1

        @task
        def report(counts: list[int]) -> None: ...

        @pipeline()
        def mapped() -> None:
            counts = load.options(max_map=10).map(list_files(), factor=2)
            report(counts)
        """,
    )
    [compiled] = pipelines.load_file(path)
    tasks = compiled.spec["tasks"]
    assert isinstance(tasks, dict)
    assert tasks["load"] == {
        "call": "mapping:load",
        "with": {"path": "{{ map.item }}", "factor": 2},
        "map": {"over": "{{ outputs.list_files }}", "max_map": 10},
        "after": ["list_files"],
    }
    yaml_twin = """\
name: mapped
tasks:
  list_files: {call: "mapping:list_files"}
  load:
    call: mapping:load
    with: {path: "{{ map.item }}", factor: 2}
    map: {over: "{{ outputs.list_files }}", max_map: 10}
    after: [list_files]
  report:
    call: mapping:report
    with: {counts: "{{ outputs.load }}"}
    after: [load]
"""
    assert parse.content_hash(parse.parse_definition(yaml_twin)) == compiled.content_hash
    load = compiled.definition.tasks["load"]
    assert (load.map_over, load.max_map) == ("list_files", 10)


def test_map_over_something_that_is_not_an_upstream_output_is_refused(write: Write) -> None:
    path = write(
        "mapping_constant",
        """\
        from veritask import pipeline, task

        @task
        def load(path: str) -> None: ...

        @pipeline()
        def mapped() -> None:
            load.map(["a", "b"])
        """,
    )
    [problem] = refusal_of(path).problems
    assert (problem.file, problem.line) == (str(path), 8)
    assert ".map over ['a', 'b'], which is not an upstream task's output" in problem.message
    assert "map over the result of a task called earlier" in problem.message


def test_outside_a_pipeline_map_calls_the_function_once_per_item() -> None:
    def double(value: int, plus: int) -> int:
        return value * 2 + plus

    assert Task(double, Options()).map([1, 2, 3], plus=1) == [3, 5, 7]


def test_yaml_map_refusals_name_the_field_and_line() -> None:
    text = """\
name: mapped
tasks:
  list_files: {run: "true"}
  other: {run: "true"}
  load:
    run: echo {{ map.item }}
    map: {over: "{{ outputs.list_files }}"}
    after: [other]
  bad_over:
    run: "true"
    map: {over: "list_files", max_map: 0}
    after: [list_files]
  unmapped:
    run: echo {{ map.index }}
"""
    with pytest.raises(parse.DefinitionError) as caught:
        parse.parse_definition(text)
    found = [(p.field, p.line) for p in caught.value.problems]
    assert found == [
        ("tasks.load.map.over", 7),
        ("tasks.bad_over.map.max_map", 11),
        ("tasks.bad_over.map.over", 11),
        ("tasks.unmapped.run", 14),
    ], caught.value.problems
    messages = [p.message for p in caught.value.problems]
    assert (
        "reads the output of task 'list_files', which this task does not run after" in (messages[0])
    )
    assert "'list_files' is not an upstream task's output" in messages[2]
    assert "{{ map.index }} is the item of a mapped task, and this task has no map" in (messages[3])


def test_a_refusal_of_the_definition_checks_names_the_python_line(write: Write) -> None:
    path = write(
        "badcron",
        """\
        from veritask import Cron, pipeline, shell

        @pipeline(schedule=Cron("0 25 * * *"))
        def nightly() -> None:
            shell("true", name="Work")
        """,
    )
    problems = {p.field: p for p in refusal_of(path).problems}
    assert problems["schedule.cron"].line == line_of(path, "@pipeline")
    assert "hour" in problems["schedule.cron"].message
    assert problems["tasks.Work"].line == 5
    assert f"{path}:5: tasks.Work:" in str(refusal_of(path))


def test_every_refusal_of_a_pipeline_comes_at_once(write: Write) -> None:
    path = write(
        "manybad",
        """\
        from datetime import date
        from veritask import Cron, pipeline, task

        @task
        def load(day: object) -> None: ...

        @pipeline(schedule=Cron("0 25 * * *"))
        def nightly(region) -> None:
            load(date(2024, 1, 1))
        """,
    )
    problems = {p.field: p for p in refusal_of(path).problems}
    # The body's refusals (an argument, an untyped parameter) and the definition checks' own.
    assert set(problems) == {"tasks.load.with.day", "parameters.region", "schedule.cron"}
    assert problems["tasks.load.with.day"].line == 9
    assert "hour" in problems["schedule.cron"].message


def test_the_spelled_out_choices_are_the_definitions_own() -> None:
    from typing import get_args

    from veritask.core.policy import OnUnknown
    from veritask.core.run_state import TaskRole
    from veritask.core.trigger_rules import TriggerRule
    from veritask.definitions.model import ConcurrencyPolicy, PublishedWhen
    from veritask.definitions.parameters import ParameterType
    from veritask.pipelines import api

    for literal, enum in (
        (api.TriggerRuleName, TriggerRule),
        (api.Role, TaskRole),
        (api.OnUnknown, OnUnknown),
        (api.Concurrency, ConcurrencyPolicy),
        (api.ParamType, ParameterType),
        (api.PublishedWhen, PublishedWhen),
    ):
        assert set(get_args(literal)) == {member.value for member in enum}, enum


# -- the package stays light and typed --------------------------------------------------------


def test_importing_veritask_loads_neither_the_pipelines_nor_yaml() -> None:
    code = (
        "import sys, veritask; "
        "assert 'veritask.pipelines' not in sys.modules and 'yaml' not in sys.modules; "
        "from veritask import task, pipeline, Param; "
        "assert 'yaml' not in sys.modules; print(task.__module__)"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "veritask.pipelines.api"


@pytest.mark.slow
def test_a_pipeline_module_passes_mypy_strict_and_a_wrong_argument_does_not(
    tmp_path: Path,
) -> None:
    wrong = tmp_path / "wrong.py"
    wrong.write_text(
        (EXAMPLES / "jobs" / "daily_files.py").read_text().replace("parts=3)", 'parts="three")')
    )
    env = {**os.environ, "MYPYPATH": str(ROOT / "src")}

    def mypy(*files: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "mypy", "--strict", "--no-incremental", *map(str, files)],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=False,
        )

    good = mypy(
        EXAMPLES / "jobs" / "daily_files.py",
        EXAMPLES / "jobs" / "mapped_files.py",
        EXAMPLES / "daily_report.py",
        EXAMPLES / "hello.py",
    )
    assert good.returncode == 0, good.stdout
    bad = mypy(wrong)
    assert bad.returncode == 1
    assert 'Argument "parts" to "__call__" of "Task" has incompatible type "str"' in bad.stdout


# -- the command line --------------------------------------------------------------------------


def test_apply_refuses_a_module_before_it_looks_for_an_api(
    write: Write,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from veritask.cli.main import main

    # No API anywhere: a refusal that reached for one would say so instead.
    monkeypatch.delenv("VERITASK_URL", raising=False)
    monkeypatch.setenv("VERITASK_HOME", str(tmp_path / "home"))
    path = write(
        "refused_here",
        """\
        from veritask import pipeline, shell

        @pipeline()
        def refused_here() -> None:
            shell("true", name="Bad Name")
        """,
    )
    assert main(["apply", "-f", str(path)]) == 2
    assert f"{path}:5: tasks.Bad Name:" in capsys.readouterr().err
    assert main(["apply"]) == 2
    assert "give -f FILE or -m MODULE" in capsys.readouterr().err


def test_a_definition_stored_as_json_is_printed_as_yaml() -> None:
    from veritask.cli.pipelines import yaml_text

    source = '{"name": "hello", "tasks": {"greet": {"run": "echo hi"}}}'
    assert yaml_text(source) == "name: hello\ntasks:\n  greet:\n    run: echo hi\n"
    written = "# kept as applied\nname: hello\n"
    assert yaml_text(written) == written


def test_an_executor_no_engine_has_is_refused_at_its_python_line(write: Write) -> None:
    path = write(
        "pods",
        """\
        from veritask import pipeline, shell

        @pipeline(name="pods")
        def pods() -> None:
            shell("true", name="x", executor="kubernetes")
        """,
    )
    assert f"{path}:5: tasks.x.executor: unknown executor 'kubernetes'" in str(refusal_of(path))


def test_an_annotated_default_declares_its_type(write: Write) -> None:
    path = write(
        "annotated",
        """\
        from veritask import pipeline, shell

        @pipeline(name="annotated")
        def annotated(rows: int = 3, ratio: float = 0.5, loose=2) -> None:
            shell(f"echo {rows} {ratio} {loose}", name="say")
        """,
    )
    [compiled] = pipelines.load_file(path)
    assert compiled.spec["parameters"] == {
        "rows": {"type": "integer", "default": 3},
        "ratio": {"type": "number", "default": 0.5},
        "loose": 2,
    }
    refused = write(
        "mistyped",
        """\
        from veritask import pipeline, shell

        @pipeline(name="mistyped")
        def mistyped(rows: int = "many") -> None:
            shell(f"echo {rows}", name="say")
        """,
    )
    assert f"{refused}:3: parameters.rows.default: expected a whole number" in str(
        refusal_of(refused)
    )


def test_an_output_is_a_template_variable_whatever_parameters_are_declared() -> None:
    text = """\
name: reads
parameters: {day: "2024-01-01"}
tasks:
  list_files: {run: "true"}
  load:
    run: echo {{ params.day }} {{ outputs.list_files }}
    after: [list_files]
"""
    load = parse.parse_definition(text).tasks["load"]
    assert load.reads_outputs == ("list_files",)
