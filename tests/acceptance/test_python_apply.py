"""``veritask apply -f FILE.py`` and ``-m MODULE`` through the real CLI against a real
``veritask up`` on SQLite and PostgreSQL: the pipeline is stored as its YAML twin would be,
``definition NAME --yaml`` prints it, and a run of it succeeds on the local executor."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.acceptance.conftest import Veritask, shut_down, start_up

pytestmark = pytest.mark.slow

MODULE = """\
from veritask import Retry, pipeline, shell, task


@task(retry=Retry(max_retries=1, delay="1s"), timeout="1m")
def count(word: str, times: int) -> dict[str, int]:
    print(f"{word} x{times}", flush=True)
    return {"count": times}


@task
def check(word: str) -> None:
    assert word == "hello", word


@pipeline(owner="qa", concurrency="allow")
def python_flow(word: str = "hello") -> None:
    counted = count(word, times=3)
    check.after(counted)(word)
    shell("echo done", name="finish", after=[counted])
"""

TYPED = """\
from veritask import Param, pipeline, task


@task
def need_ints(x: int, y: int) -> None:
    assert type(x) is int and type(y) is int, (x, y)
    print(f"got {x!r} and {y!r}", flush=True)


@pipeline(owner="qa", concurrency="allow")
def typed_flow(x: int, y: int = Param(type="integer", default=4)) -> None:
    need_ints(x, y)
"""

BROKEN = """\
from veritask import pipeline, task


@task
def load(day: object) -> None: ...


@pipeline()
def broken_flow() -> None:
    load({1, 2})
"""


LONELY = """\
from veritask import pipeline, task


@task
def alone() -> None:
    print("found", flush=True)


@pipeline(owner="qa")
def lonely_flow() -> None:
    alone()
"""

REPOSITORY = Path(__file__).resolve().parents[2]


@pytest.fixture
def served(database_url: str, tmp_path: Path) -> Iterator[tuple[Veritask, Path]]:
    pipes = tmp_path / "pipes"
    (pipes / "flows").mkdir(parents=True)
    (pipes / "flows" / "__init__.py").write_text("")
    (pipes / "flows" / "daily.py").write_text(MODULE)
    (pipes / "flows" / "typed.py").write_text(TYPED)
    (pipes / "broken.py").write_text(BROKEN)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "lonely.py").write_text(LONELY)
    examples = tmp_path / "no-examples"
    examples.mkdir()
    # The worker imports the tasks' module: the folder above its package is on PYTHONPATH.
    path = os.pathsep.join([str(pipes), os.environ.get("PYTHONPATH", "")])
    started = start_up(
        tmp_path / "home",
        examples,
        tmp_path / "up.log",
        VERITASK_DATABASE_URL=database_url,
        PYTHONPATH=path,
    )
    try:
        yield started, pipes
    finally:
        shut_down(started)


def test_a_python_pipeline_is_applied_and_runs_to_success(
    served: tuple[Veritask, Path],
) -> None:
    """One ``up`` per database for the whole story: starting one is the slow part."""
    veritask, pipes = served
    refused = veritask.cli("apply", "-f", str(pipes / "broken.py"))
    assert refused.returncode == 2
    assert f"{pipes / 'broken.py'}:10: tasks.load.with.day:" in refused.stderr
    assert "neither a JSON value" in refused.stderr
    assert veritask.cli_json("definitions") == []  # nothing stored on a refusal

    applied = veritask.cli("apply", "-f", str(pipes / "flows" / "daily.py"))
    assert applied.returncode == 0, applied.stderr
    assert applied.stdout.strip() == "python_flow: version 1 (created)"
    assert "warning" not in applied.stderr  # the workers find flows.daily
    # A module the workers cannot import is applied, with a warning naming the task and why.
    lonely = veritask.cli("apply", "-f", str(pipes.parent / "elsewhere" / "lonely.py"))
    assert lonely.returncode == 0, lonely.stderr
    assert (
        "warning: lonely_flow: tasks.alone.call: the local workers cannot import 'lonely'"
        in lonely.stderr
    )
    on_path = os.pathsep.join([str(pipes), os.environ.get("PYTHONPATH", "")])
    again = veritask.cli("apply", "-m", "flows.daily", "--json", PYTHONPATH=on_path)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["created"] is False  # the same content, the same version

    shown = veritask.cli("definition", "python_flow", "--yaml")
    assert shown.returncode == 0, shown.stderr
    assert "call: flows.daily:count" in shown.stdout
    assert "after:\n    - count" in shown.stdout

    run = veritask.cli("trigger", "python_flow", "--wait", "--timeout", "25")
    run_id = run.stdout.split()[0]
    assert run.returncode == 0, run.stdout + veritask.cli("logs", run_id).stdout
    detail = veritask.cli_json("show", run_id)
    assert detail["execution_state"] == "SUCCESS"
    states = {i["task"]: i["state"] for i in detail["instances"]}
    assert states == {"count": "SUCCESS", "check": "SUCCESS", "finish": "SUCCESS"}
    logs = veritask.cli("logs", run_id)
    assert "hello x3" in logs.stdout

    # Typed parameters: a bad value is refused at trigger, a good one reaches the task typed.
    assert veritask.cli("apply", "-f", str(pipes / "flows" / "typed.py")).returncode == 0
    bad = veritask.cli("trigger", "typed_flow", "--param", "x=abc")
    assert bad.returncode == 2, bad.stdout + bad.stderr
    assert "parameters.x: expected a whole number, got the string 'abc'" in bad.stderr
    typed = veritask.cli("trigger", "typed_flow", "--param", "x=5", "--wait", "--timeout", "25")
    typed_id = typed.stdout.split()[0]
    assert typed.returncode == 0, typed.stdout + veritask.cli("logs", typed_id).stdout
    assert "got 5 and 4" in veritask.cli("logs", typed_id).stdout


def test_up_with_examples_runs_their_python_tasks(tmp_path: Path) -> None:
    started = start_up(
        tmp_path / "home", REPOSITORY / "examples", tmp_path / "up.log", PYTHONPATH=""
    )
    try:
        # examples/progress.yaml calls jobs.progress:count_rows, in examples/jobs.
        run = started.cli("trigger", "progress", "--wait", "--timeout", "25")
        run_id = run.stdout.split()[0]
        assert run.returncode == 0, run.stdout + started.cli("logs", run_id).stdout
        assert "counted 20/20 rows" in started.cli("logs", run_id).stdout
        assert "warning" not in started.output()
    finally:
        shut_down(started)
