"""A run of thousands of tasks over the API: ``GET /runs/{id}`` answers a bounded first page of
its instances with a cursor to the rest, a cancel answers at once and leaves the stops to the
scheduler, and ``veritask show`` still shows the whole run, following the pages."""

from __future__ import annotations

import json
import time

import pytest

from tests.contract import builders
from tests.integration.conftest import Api
from veritask.cli import main as cli_main
from veritask.core.policy import TaskPolicy
from veritask.core.states import InstanceState
from veritask.ledger import runs as ledger_runs
from veritask.ledger import schema
from veritask.services import run_instances

POLICY = TaskPolicy().to_json()
#: What the tests allow an answer on a shared CI machine (it takes a small part of that).
QUICK_SECONDS = 1.0


def _large_run(api: Api, count: int, name: str = "large") -> str:
    """A RUNNING run of ``count`` CREATED instances, written in one statement."""
    with api.platform.engine.begin() as connection:
        definition = builders.a_definition(connection, name)
        run_id = builders.a_run(connection, definition, key=f"{name}:1")
        connection.execute(
            schema.task_instances.insert(),
            [
                ledger_runs.instance_row(
                    ledger_runs.new_id(),
                    run_id,
                    f"t{n:05d}",
                    ledger_runs.UNMAPPED,
                    InstanceState.CREATED,
                    POLICY,
                    builders.T0,
                )
                for n in range(count)
            ],
        )
    return run_id


def test_a_large_runs_get_is_a_bounded_page_whose_cursor_leads_to_every_instance(
    api: Api,
) -> None:
    run_id = _large_run(api, 5000)
    started = time.monotonic()
    head = api.http.get(f"/api/v2/runs/{run_id}")
    took = time.monotonic() - started
    assert head.status_code == 200, head.text
    assert took < QUICK_SECONDS, took
    body = head.json()
    assert len(body["instances"]) == run_instances.PAGE
    first = body["instances"][0]
    assert (first["task"], first["state"], first["attempts"]) == ("t00000", "CREATED", [])
    tasks = [i["task"] for i in body["instances"]]
    cursor = body["instances_next_cursor"]
    pages = 1
    while cursor is not None:
        page = api.http.get(f"/api/v2/runs/{run_id}/instances", params={"cursor": cursor})
        assert page.status_code == 200, page.text
        tasks += [i["task"] for i in page.json()["items"]]
        cursor = page.json()["next_cursor"]
        pages += 1
    assert tasks == [f"t{n:05d}" for n in range(5000)]  # each once, in order
    assert pages == 5000 // run_instances.PAGE


def test_a_small_runs_get_has_every_instance_and_no_cursor(api: Api) -> None:
    run_id = _large_run(api, 3, name="small")
    body = api.http.get(f"/api/v2/runs/{run_id}").json()
    assert [i["task"] for i in body["instances"]] == ["t00000", "t00001", "t00002"]
    assert body["instances_next_cursor"] is None


@pytest.mark.parametrize(
    ("params", "field"), [({"cursor": "nope"}, "cursor"), ({"limit": 0}, "limit")]
)
def test_a_bad_cursor_or_limit_is_a_422_naming_it(
    api: Api, params: dict[str, str | int], field: str
) -> None:
    run_id = _large_run(api, 3, name="small")
    answer = api.http.get(f"/api/v2/runs/{run_id}/instances", params=params)
    assert answer.status_code == 422
    assert field in answer.text
    assert api.http.get("/api/v2/runs/nope/instances").status_code == 404


def test_a_large_runs_cancel_answers_at_once_and_leaves_the_stops_to_the_scheduler(
    api: Api,
) -> None:
    run_id = _large_run(api, 5000)
    started = time.monotonic()
    answer = api.http.post(f"/api/v2/runs/{run_id}/cancel", json={"reason": "too big"})
    took = time.monotonic() - started
    assert answer.status_code == 202, answer.text
    assert took < QUICK_SECONDS, took
    summary = api.http.get(f"/api/v2/runs/{run_id}/summary").json()
    assert summary["execution_state"] == "CANCELLING"
    again = api.http.post(f"/api/v2/runs/{run_id}/cancel", json={"reason": "too big"})
    assert again.status_code == 202  # the same request, still answered at once


def test_show_prints_a_whole_large_run_following_its_pages(
    api: Api, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    count = run_instances.PAGE * 2 + 7
    run_id = _large_run(api, count)
    monkeypatch.setenv("VERITASK_URL", api.url)
    monkeypatch.setenv("VERITASK_TOKEN", api.admin_token)
    capsys.readouterr()
    assert cli_main.main(["show", run_id, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [i["task"] for i in shown["instances"]] == [f"t{n:05d}" for n in range(count)]
    assert shown["instances_next_cursor"] is None
