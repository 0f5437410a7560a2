"""Data passed between tasks, end to end: the real scheduler and the local executor run a
pipeline whose tasks read their upstreams' outputs (docs/definitions.md, "Outputs")."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.pipelines.test_local_run import load
from veritask import testing

pytestmark = pytest.mark.slow

FLOWS = """\
from veritask import Retry, pipeline, shell, task


@task
def list_files(day: str) -> list[str]:
    return [f"/data/{day}/a.csv", f"/data/{day}/b c.csv"]


@task
def count(paths: list[str], first: dict[str, object]) -> int:
    print(f"got {paths!r} and {first!r}", flush=True)
    return len(paths)


@task
def huge() -> str:
    return "x" * 200


@pipeline(name="passing")
def passing() -> None:
    files = list_files("{{ ds }}")
    n = count(files, {"files": files, "n": 1})
    shell(
        f'echo n={n}; printf "%s\\\\n" {files}; cat "$VERITASK_UPSTREAM_OUTPUTS"',
        name="show",
    )


@task
def with_nul() -> dict[str, object]:
    return {"rows": ["ok", "a\\x00b"]}


@pipeline(name="nul")
def nul() -> None:
    shell("echo never", name="after_nul", after=[with_nul.options(retry=Retry(max_retries=0))()])


@pipeline(name="too_big")
def too_big() -> None:
    shell("echo never", name="after_huge", after=[huge.options(retry=Retry(max_retries=0))()])
"""


def test_a_tasks_output_reaches_the_arguments_and_commands_of_its_downstream_tasks(
    database_url: str, tmp_path: Path
) -> None:
    passing = load(tmp_path, FLOWS, "passing")
    result = testing.run(
        passing, logical_time=datetime(2024, 3, 5, 2, tzinfo=UTC), database_url=database_url
    )
    assert result.succeeded, result.reason
    files = ["/data/2024-03-05/a.csv", "/data/2024-03-05/b c.csv"]
    assert result.instances["list_files"].output == files
    # A lone placeholder is the value itself (a list stays a list), also inside a structure.
    assert result.instances["count"].log == f"got {files!r} and {{'files': {files!r}, 'n': 1}}\n"
    assert result.instances["count"].output == 2
    # In a command, an output is one word read from VERITASK_OUTPUT_<TASK>, never code; the
    # file names every upstream's output.
    lines = result.instances["show"].log.splitlines()
    assert lines[:2] == ["n=2", json.dumps(files)]
    assert json.loads(lines[2]) == {"count": 2, "list_files": files}
    assert result.instances["show"].output is None


def test_an_output_over_the_limit_fails_its_attempt_and_nothing_flows(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VERITASK_MAX_OUTPUT_BYTES", "100")
    too_big = load(tmp_path, FLOWS, "too_big")
    result = testing.run(too_big, database_url=database_url)
    assert (result.state, result.succeeded) == ("FAILED", False)
    huge = result.instances["huge"]
    assert (huge.state, huge.exit_code, huge.output) == ("FAILED", 0, None)
    assert "the task's output is 202 bytes, more than the 100 bytes" in huge.log
    assert "write the data to storage and return its path" in huge.log
    assert result.instances["after_huge"].state == "UPSTREAM_FAILED"


def test_an_output_holding_a_nul_fails_its_attempt_with_the_place_named(
    database_url: str, tmp_path: Path
) -> None:
    # PostgreSQL stores no NUL in JSON: refused where the output is read, on both databases.
    result = testing.run(load(tmp_path, FLOWS, "nul"), database_url=database_url)
    assert (result.state, result.succeeded) == ("FAILED", False)
    refused = result.instances["with_nul"]
    assert (refused.state, refused.exit_code, refused.output) == ("FAILED", 0, None)
    assert "holds a NUL character (U+0000) at output.rows[1]" in refused.log
    assert result.instances["after_nul"].state == "UPSTREAM_FAILED"
