"""Outputs over the API and in ``veritask show``: a YAML pipeline whose tasks pass data, run by
a real scheduler and local executor against the database the API reads (SQLite, PostgreSQL)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

from tests.integration.conftest import Api
from tests.scheduling.harness import Harness
from veritask.cli import render
from veritask.core.states import RunExecutionState

pytestmark = pytest.mark.slow

PASSING = """\
name: passing
tasks:
  list_files:
    run: echo '["a.csv", "b c.csv"]' > "$VERITASK_OUTPUT"
  show:
    run: printf '%s|' {{ outputs.list_files }}; echo; cat "$VERITASK_UPSTREAM_OUTPUTS"
    after: [list_files]
"""


@pytest.fixture
def harness(api: Api, database_url: str, tmp_path: Path) -> Iterator[Harness]:
    made = Harness(database_url, tmp_path / "executor")
    try:
        yield made
    finally:
        made.close()


def test_an_output_is_shown_on_the_instance_and_its_attempt_and_read_downstream(
    api: Api, harness: Harness
) -> None:
    harness.apply(PASSING)
    run_id = harness.trigger("passing")

    assert harness.finish(run_id)[0] is RunExecutionState.SUCCESS
    instances = {i["task"]: i for i in api.run(run_id)["instances"]}
    assert instances["list_files"]["output"] == ["a.csv", "b c.csv"]
    assert instances["show"]["output"] is None
    detail = api.http.get(f"/api/v2/instances/{instances['list_files']['id']}").json()
    assert detail["output"] == ["a.csv", "b c.csv"]
    assert detail["attempts"][0]["output"] == ["a.csv", "b c.csv"]
    log = Path(instances["show"]["attempts"][0]["log_location"]).read_text()
    assert log.splitlines()[:2] == [
        '["a.csv", "b c.csv"]|',
        '{"list_files":["a.csv","b c.csv"]}',
    ]

    console = Console(width=200, record=True)
    console.print(render.attempts_table("list_files", detail["attempts"]))
    assert 'Output of attempt 1:\n["a.csv", "b c.csv"]' in console.export_text()
