"""A run cancelled while finishing ends as its instances say, on SQLite and PostgreSQL: if
every instance had ended SUCCESS before the cancel took effect, the run is SUCCESS with a
reason saying the cancel came too late, not CANCELLED "every instance stopped"
(docs/operations.md, 'Overrides' and cancels)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from tests.acceptance.test_operations import veritask
from tests.integration.conftest import Api, completed, open_attempt, report, started
from tests.pipelines.harness import Platform as Scheduled
from veritask.core.states import RunExecutionState
from veritask.ledger import run_store

TWO = """\
name: two
tasks:
  first: {run: "true"}
  second: {run: "true", after: [first]}
"""


def _make_running(api: Api, run_id: str) -> None:
    with api.platform.engine.begin() as connection:
        version, state = run_store.run_version(connection, run_id)
        if state is not RunExecutionState.RUNNING:
            run_store.set_execution_state(
                connection,
                run_id=run_id,
                expected_version=version,
                state=RunExecutionState.RUNNING,
                reason="started",
                previous=state,
                actor="scheduler",
                event_id=str(uuid.uuid4()),
                now=api.platform.now(),
                evidence={"by": "the test"},
            )


def _succeed(api: Api, ids: dict[str, str], tasks: tuple[str, ...]) -> None:
    for task in tasks:
        token = "token-" + uuid.uuid4().hex
        attempt_no = open_attempt(api.platform, ids[task], token)
        report(api, started(ids[task], attempt_no, token), token)
        report(api, completed(ids[task], attempt_no, token, seq=2), token)


def _finished_but_running(api: Api) -> tuple[str, dict[str, str]]:
    """A RUNNING run whose every instance has just succeeded, before a tick settled it."""
    api.apply(TWO)
    run_id = api.trigger("two")
    ids = api.instance_ids(run_id)
    _make_running(api, run_id)
    _succeed(api, ids, ("first", "second"))
    return run_id, ids


def test_a_cancel_that_came_after_every_instance_succeeded_leaves_the_run_success(
    api: Api, database_url: str, tmp_path: Path
) -> None:
    run_id, _ = _finished_but_running(api)
    cancel = api.http.post(f"/api/v2/runs/{run_id}/cancel", json={"reason": "too slow"})
    assert cancel.status_code == 202, cancel.text
    assert api.run(run_id)["execution_state"] == "CANCELLING"
    scheduled = Scheduled(api.platform.engine, tmp_path / "scheduler")
    try:
        scheduled.until(lambda: api.run(run_id)["execution_state"] != "CANCELLING")
    finally:
        scheduled.close()
    run = api.run(run_id)
    assert {i["task"]: i["state"] for i in run["instances"]} == {
        "first": "SUCCESS",
        "second": "SUCCESS",
    }
    assert run["execution_state"] == "SUCCESS"
    assert "every leaf succeeded" in run["execution_reason"]
    assert "the cancel came too late" in run["execution_reason"]
    assert "every instance stopped" not in run["execution_reason"]
    found = veritask("verify", "--database-url", database_url, "--json", home=tmp_path / "cli")
    assert found.returncode == 0, found.stdout
    assert json.loads(found.stdout)["ok"] is True


TWO_PUBLISHED = TWO.replace("name: two", "name: two_published") + (
    'publish:\n  checks:\n    - {name: rows, run: "true"}\n  commit: {run: "true"}\n'
)


def test_a_run_cancelled_too_late_publishes_nothing(api: Api, tmp_path: Path) -> None:
    api.apply(TWO_PUBLISHED)
    run_id = api.trigger("two_published")
    ids = api.instance_ids(run_id)
    _make_running(api, run_id)
    _succeed(api, ids, ("first", "second"))
    assert api.http.post(f"/api/v2/runs/{run_id}/cancel", json={"reason": "x"}).is_success
    scheduled = Scheduled(api.platform.engine, tmp_path / "scheduler")
    try:
        scheduled.until(lambda: api.run(run_id)["publication_state"] != "PENDING")
    finally:
        scheduled.close()
    run = api.run(run_id)
    assert run["execution_state"] == "SUCCESS"
    states = {i["task"]: i["state"] for i in run["instances"]}
    assert states["publish.check.rows"] == "CANCELLED"
    assert states["publish.commit"] == "CANCELLED"
    assert run["publication_state"] == "CHECK_FAILED"
