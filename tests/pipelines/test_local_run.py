"""``veritask.testing.run``: one run of a Python pipeline in this process, with the real
scheduler and the local executor, on a ledger of its own; what a user's pytest test calls."""

from __future__ import annotations

import importlib
import shutil
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from veritask import testing
from veritask.pipelines import compile as pipelines
from veritask.pipelines.api import Pipeline, PipelineError

pytestmark = pytest.mark.slow

FLOWS = """\
from veritask import Retry, pipeline, shell, task


@task
def count(word: str, times: int) -> int:
    print(f"{word} x{times}", flush=True)
    return times


@pipeline(name="counting", concurrency="allow")
def counting(word: str = "hello") -> None:
    counted = count(word, times=3)
    shell("echo on {{ logical_date }}", name="stamp", after=[counted])


@pipeline(name="failing")
def failing() -> None:
    shell("echo trying; exit 4", name="boom", retry=Retry(max_retries=1, delay="1s"))
"""


def load(folder: Path, source: str, name: str) -> Pipeline:
    """A pipeline of a module written to ``folder``, under a name no other test imports."""
    stem = f"local_run_{folder.name.replace('-', '_')}"
    path = folder / f"{stem}.py"
    path.write_text(source)
    try:
        found = {c.pipeline.name: c.pipeline for c in pipelines.load_file(path)}
    finally:
        sys.path.remove(str(folder))
    return found[name]


def running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie waiting to be reaped is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def test_a_run_returns_each_task_with_its_state_attempts_exit_code_and_log(
    database_url: str, tmp_path: Path
) -> None:
    counting = load(tmp_path, FLOWS, "counting")
    seen: list[str] = []
    result = testing.run(
        counting,
        params={"word": "hi"},
        logical_time=datetime(2024, 3, 5, 2, tzinfo=UTC),
        echo=seen.append,
        database_url=database_url,
    )
    assert (result.state, result.succeeded) == ("SUCCESS", True)
    assert result.instances["count"].log == "hi x3\n"
    assert result.instances["stamp"].log == "on 2024-03-05\n"
    assert {key: (t.state, t.attempts, t.exit_code) for key, t in result.instances.items()} == {
        "count": ("SUCCESS", 1, 0),
        "stamp": ("SUCCESS", 1, 0),
    }
    assert "[count] | hi x3" in seen
    assert result.home is None


def test_a_failing_task_fails_the_run_after_its_retries(tmp_path: Path) -> None:
    failing = load(tmp_path, FLOWS, "failing")
    result = testing.run(failing, keep=True)
    assert (result.state, result.succeeded) == ("FAILED", False)
    boom = result.instances["boom"]
    assert (boom.state, boom.attempts, boom.exit_code) == ("FAILED", 2, 4)
    assert boom.log == "trying\ntrying\n"
    # Kept on request: the ledger of the run, to look into with the other verbs.
    assert result.home is not None
    try:
        assert (result.home / "veritask.db").is_file()
    finally:
        shutil.rmtree(result.home)


def test_a_run_given_up_on_stops_its_tasks_before_its_home_goes(tmp_path: Path) -> None:
    marker = tmp_path / "pid"
    source = (
        FLOWS
        + f"""

@pipeline(name="endless")
def endless() -> None:
    shell("echo $$ > {marker}; exec sleep 60", name="nap")
"""
    )
    endless = load(tmp_path, source, "endless")
    with pytest.raises(testing.RunTimedOut, match="still active after 3s"):
        testing.run(endless, timeout=3)
    pid = int(marker.read_text())
    # Cancelled and confirmed stopped before run() returned: no task is left running.
    assert not running(pid)


def test_a_refused_pipeline_raises_naming_its_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "local_run_refused.py"
    path.write_text(FLOWS.replace("count(word, times=3)", "count(word, times={1, 2})"))
    sys.path.insert(0, str(tmp_path))
    try:
        module = importlib.import_module("local_run_refused")
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("local_run_refused", None)
    with pytest.raises(PipelineError) as refused:
        testing.run(module.counting)
    [problem] = refused.value.problems
    assert (problem.file, problem.line, problem.field) == (str(path), 12, "tasks.count.with.times")


def test_a_pipeline_naming_pools_runs_without_any_pool_set_by_hand(tmp_path: Path) -> None:
    source = """\
from veritask import pipeline, shell


@pipeline(name="pooled", priority=2)
def pooled() -> None:
    first = shell("true", name="first", pool="warehouse", pool_slots=2)
    shell("true", name="second", pool="warehouse", after=[first])
"""
    result = testing.run(load(tmp_path, source, "pooled"))
    assert result.succeeded
    assert {key: i.state for key, i in result.instances.items()} == {
        "first": "SUCCESS",
        "second": "SUCCESS",
    }
