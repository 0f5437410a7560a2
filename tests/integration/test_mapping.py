"""A YAML mapped task over the API: ``map: {over: ...}`` on a shell task, run by a real
scheduler and local executor against the database the API reads (SQLite, PostgreSQL)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

from tests.integration.conftest import Api
from tests.scheduling.harness import Harness
from veritask.cli import render
from veritask.core.states import RunExecutionState
from veritask.scheduling import clearing

pytestmark = pytest.mark.slow

MAPPED = """\
name: mapped
tasks:
  list_files:
    run: echo '["a b.csv", "$(touch /tmp/pwned)"]' > "$VERITASK_OUTPUT"
  each:
    run: echo "$VERITASK_MAP_INDEX" {{ map.index }} {{ map.item }}
    map: {over: "{{ outputs.list_files }}"}
    after: [list_files]
  after_all:
    run: echo {{ outputs.each }}
    after: [each]
"""


@pytest.fixture
def harness(api: Api, database_url: str, tmp_path: Path) -> Iterator[Harness]:
    made = Harness(database_url, tmp_path / "executor")
    try:
        yield made
    finally:
        made.close()


def test_a_shell_task_maps_over_an_output_and_each_item_stays_data(
    api: Api, harness: Harness
) -> None:
    harness.apply(MAPPED)
    run_id = harness.trigger("mapped")

    assert harness.finish(run_id)[0] is RunExecutionState.SUCCESS
    instances = api.run(run_id)["instances"]
    each = sorted((i for i in instances if i["task"] == "each"), key=lambda i: i["map_index"])
    assert [(i["map_index"], i["state"]) for i in each] == [
        (-1, "SUCCESS"),
        (0, "SUCCESS"),
        (1, "SUCCESS"),
    ]
    assert each[0]["reason"] == (
        "expanded into 2 instances, one per item of the output of list_files"
    )
    # The item is one word from the environment: `$(…)` in it is text, never run.
    logs = [Path(i["attempts"][0]["log_location"]).read_text() for i in each[1:]]
    assert logs == ["0 0 a b.csv\n", "1 1 $(touch /tmp/pwned)\n"]
    console = Console(width=200, record=True)
    console.print(render.instances_table(instances))
    shown = console.export_text()
    assert "each[0]" in shown and "each[1]" in shown
    after_all = next(i for i in instances if i["task"] == "after_all")
    assert after_all["state"] == "SUCCESS"
    assert Path(after_all["attempts"][0]["log_location"]).read_text() == "[null, null]\n"


FLAKY = """\
name: flaky_map
tasks:
  list_files:
    run: echo '[0, 1, 2]' > "$VERITASK_OUTPUT"
  each:
    run: test {{ map.item }} != 1 || test -e "$MARKS/fixed"
    map: {over: "{{ outputs.list_files }}"}
    after: [list_files]
    env: {MARKS: "%s"}
"""


def test_clearing_a_mapped_task_runs_its_instances_again_over_the_same_items(
    api: Api, harness: Harness, tmp_path: Path
) -> None:
    harness.apply(FLAKY % tmp_path)
    run_id = harness.trigger("flaky_map")
    assert harness.finish(run_id)[0] is RunExecutionState.FAILED
    (tmp_path / "fixed").write_text("")

    cleared = clearing.clear(
        harness.ledger, run_id, tasks=["each"], reason="fixed", actor="operator:test"
    )

    assert {i.task for i in cleared.instances} == {"each[0]", "each[1]", "each[2]"}
    assert harness.finish(run_id)[0] is RunExecutionState.SUCCESS
    each = sorted(
        (i for i in api.run(run_id)["instances"] if i["task"] == "each"),
        key=lambda i: i["map_index"],
    )
    assert [(i["map_index"], i["state"], len(i["attempts"])) for i in each] == [
        (-1, "SUCCESS", 0),
        (0, "SUCCESS", 2),
        (1, "SUCCESS", 2),
        (2, "SUCCESS", 2),
    ]
