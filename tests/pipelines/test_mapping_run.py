"""Dynamic task mapping end to end: the real scheduler and the local executor expand a mapped
task over its upstream's output at run time (docs/definitions.md, "Mapping")."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.pipelines.test_local_run import load
from veritask import testing

pytestmark = pytest.mark.slow

FLOWS = """\
import os
from pathlib import Path

from veritask import Retry, pipeline, task


@task
def list_files(n: int) -> list[str]:
    return [f"part-{i}.csv" for i in range(int(n))]


@task(retry=Retry(max_retries=1, delay="1s"))
def load(path: str, marks: str) -> int:
    mark = Path(marks) / path
    if path == "part-1.csv" and not mark.exists():
        mark.write_text("failed once")
        raise RuntimeError("part-1 fails on its first attempt")
    print(f"loaded {path} as item {os.environ['VERITASK_MAP_INDEX']}", flush=True)
    return len(path) + int(os.environ["VERITASK_MAP_INDEX"])


@task
def report(counts: list[int]) -> int:
    print(f"counts {counts}", flush=True)
    return sum(counts)


@pipeline(name="mapping")
def mapping(n: int = 3, marks: str = "/tmp") -> None:
    counts = load.options(max_map=4).map(list_files(n), marks=marks)
    report(counts)
"""


def test_a_map_runs_one_instance_per_item_and_passes_the_results_in_order(
    database_url: str, tmp_path: Path
) -> None:
    mapping = load(tmp_path, FLOWS, "mapping")
    marks = tmp_path / "marks"
    marks.mkdir()
    result = testing.run(mapping, params={"n": 3, "marks": str(marks)}, database_url=database_url)
    assert result.succeeded, result.reason
    assert result.instances["load"].state == "SUCCESS"
    assert result.instances["load"].reason == (
        "expanded into 3 instances, one per item of the output of list_files"
    )
    loads = {key: t for key, t in result.instances.items() if key.startswith("load[")}
    assert sorted(loads) == ["load[0]", "load[1]", "load[2]"]
    # Each instance has its own attempts: only item 1 failed once and was retried.
    assert {key: t.attempts for key, t in loads.items()} == {
        "load[0]": 1,
        "load[1]": 2,
        "load[2]": 1,
    }
    assert loads["load[2]"].log == "loaded part-2.csv as item 2\n"
    assert [loads[f"load[{i}]"].output for i in range(3)] == [10, 11, 12]
    assert result.instances["report"].log == "counts [10, 11, 12]\n"
    assert result.instances["report"].output == 33


def test_an_empty_map_skips_the_task_and_its_downstream(database_url: str, tmp_path: Path) -> None:
    mapping = load(tmp_path, FLOWS, "mapping")
    result = testing.run(mapping, params={"n": 0}, database_url=database_url)
    assert (result.state, result.succeeded) == ("SUCCESS", True)
    assert result.instances["load"].state == "SKIPPED"
    assert "the output of list_files is an empty list" in result.instances["load"].reason
    assert result.instances["report"].state == "SKIPPED"
    assert not [key for key in result.instances if key.startswith("load[")]


def test_a_map_over_more_than_max_map_items_fails_with_the_reason(
    database_url: str, tmp_path: Path
) -> None:
    mapping = load(tmp_path, FLOWS, "mapping")
    result = testing.run(mapping, params={"n": 5}, database_url=database_url)
    assert (result.state, result.succeeded) == ("FAILED", False)
    assert result.instances["load"].state == "UPSTREAM_FAILED"
    assert "has 5 items, more than max_map (4) allows" in result.instances["load"].reason
    assert result.instances["report"].state == "UPSTREAM_FAILED"
    assert not [key for key in result.instances if key.startswith("load[")]
