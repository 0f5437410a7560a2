"""A run's instances are listed in pipeline order — each after the tasks it waits for, ready
tasks in the definition's order, the publication steps last in their own order — never by
name: in the API (v2 and v1), ``veritask show --json``, the run page, its timeline and the
durations API, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import open_attempt
from tests.ui.conftest import Ui, served_ui
from veritask.cli import main as cli_main
from veritask.core.run_state import RunGraph, TaskNode
from veritask.services import runs
from veritask.services.tokens import TokenRole

#: Alphabetical order (a_load, c_side_end, m_report, ...) is not the pipeline's; y_side is
#: ready beside z_extract and comes second as the definition lists it before a_load.
ORDERED = """\
name: ordered
tasks:
  z_extract: {run: "true"}
  y_side: {run: "true"}
  a_load: {run: "true", after: [z_extract]}
  m_report: {run: "true", after: [a_load]}
  c_side_end: {run: "true", after: [y_side]}
publish:
  checks:
    - {name: zz_rows, run: "true"}
    - {name: a_schema, run: "true"}
  commit: {run: "true"}
"""
ORDER = [
    "z_extract",
    "y_side",
    "a_load",
    "m_report",
    "c_side_end",
    "publish.check.zz_rows",
    "publish.check.a_schema",
    "publish.commit",
]


@pytest.fixture
def served(database_url: str, tmp_path: Path) -> Iterator[Ui]:
    with served_ui(database_url, tmp_path / "home", ORDERED) as found:
        yield found


def test_pipeline_order_puts_each_task_after_its_upstreams_and_ties_as_defined() -> None:
    from veritask.core.run_state import pipeline_order

    graph = RunGraph(
        (
            TaskNode("z_extract"),
            TaskNode("y_side"),
            TaskNode("a_load", after=("z_extract",)),
            TaskNode("m_report", after=("a_load", "y_side")),
            TaskNode("c_side_end", after=("y_side",)),
        )
    )
    assert pipeline_order(graph) == ("z_extract", "y_side", "a_load", "m_report", "c_side_end")


def test_the_api_the_cli_the_run_page_and_the_timeline_list_instances_in_pipeline_order(
    served: Ui, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = runs.trigger_run(served.platform, "ordered", actor="operator:test").run_id
    listed = runs.get_run(served.platform, run_id).instances
    assert [i.task for i in listed] == ORDER
    # An attempt for each (newest first) ends its wait: each has a phase to time and to draw.
    for instance in reversed(listed):
        open_attempt(served.platform, instance.id, f"token-{instance.task}")
    api = served.client()
    api.headers["Authorization"] = f"Bearer {served.tokens[TokenRole.VIEWER]}"
    v2 = api.get(f"/api/v2/runs/{run_id}")
    assert v2.status_code == 200, v2.text
    assert [i["task"] for i in v2.json()["instances"]] == ORDER
    v1 = api.get(f"/api/v1/runs/{run_id}")
    assert v1.status_code == 200, v1.text
    assert [i["task"] for i in v1.json()["instances"]] == ORDER
    spent = api.get(f"/api/v2/runs/{run_id}/durations")
    assert spent.status_code == 200, spent.text
    assert [i["task_key"] for i in spent.json()["instances"]] == ORDER
    spent_per_task = api.get("/api/v2/definitions/ordered/durations")
    assert spent_per_task.status_code == 200, spent_per_task.text
    assert list(spent_per_task.json()["tasks"]) == ["*", *ORDER]

    monkeypatch.setenv("VERITASK_URL", served.url)
    monkeypatch.setenv("VERITASK_TOKEN", served.tokens[TokenRole.VIEWER])
    capsys.readouterr()
    assert cli_main.main(["show", run_id, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [i["task"] for i in shown["instances"]] == ORDER

    page = served.signed_in(TokenRole.VIEWER).http.get(f"/ui/runs/{run_id}")
    assert page.status_code == 200
    assert re.findall(r'<tr data-instance="([^"]+)"[ >]', page.text) == ORDER
    # The timeline draws one row per instance, top to bottom in the same order.
    labels = re.findall(r'<text class="row-label" [^>]*>([^<]+)</text>', page.text)
    assert labels == ORDER


def test_mapped_instances_of_a_task_stay_together_by_index() -> None:
    from veritask.services.ordering import in_pipeline_order

    listed = [("b", 1), ("a", 0), ("b", 0), ("z", -1), ("a", 1), ("b", 2)]
    ordered = in_pipeline_order(listed, ("b", "a"), task=lambda i: i[0], index=lambda i: i[1])
    # A task the order does not know (none should be) comes after, by name.
    assert ordered == [("b", 0), ("b", 1), ("b", 2), ("a", 0), ("a", 1), ("z", -1)]
