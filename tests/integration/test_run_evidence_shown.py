"""A run's own events show their evidence where people read a run's history: the API's
events listing and ``veritask show`` (docs/scheduling.md, the loop's settle)."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from tests.integration.conftest import Api
from veritask.cli import render
from veritask.execution.local import LocalExecutor
from veritask.scheduling.scheduler import Scheduler
from veritask.scheduling.tokens import AttemptTokens

UPSTREAM = """
name: users_raw
tasks:
  extract: {run: "true"}
publish:
  commit: {run: "true"}
"""

DOWNSTREAM = """
name: user_report
wait_for:
  - {definition: users_raw, published: true}
tasks:
  report: {run: "true"}
"""


def test_a_waiting_run_shows_what_it_waits_for_in_its_history(api: Api, tmp_path: Path) -> None:
    api.apply(UPSTREAM)
    api.apply(DOWNSTREAM)
    run_id = api.trigger("user_report", logical_time="2026-11-01T02:00:00+00:00")
    executor = LocalExecutor(home=tmp_path / "executor", slots=1)
    scheduler = Scheduler(
        api.platform.ledger,
        executors={"local": executor},
        tokens=AttemptTokens(b"evidence-shown-secret-0123456789"),
        outbox=tmp_path / "outbox",
    )
    try:
        for _ in range(5):
            scheduler.tick()
    finally:
        executor.shutdown_supervisor()

    waiting = "waiting for users_raw at 2026-11-01T02:00:00+00:00: no run yet"
    assert api.run(run_id)["execution_reason"] == waiting
    listed = api.http.get(f"/api/v2/runs/{run_id}/events", params={"limit": 1000}).json()
    run_level = [e for e in listed["events"] if e["subject_type"] == "run"]
    assert [e["kind"] for e in run_level] == ["run_created", "dependencies_awaited"]
    assert all(e["evidence"] for e in run_level)
    [awaited] = [e for e in run_level if e["kind"] == "dependencies_awaited"]
    assert awaited["reason"] == waiting
    assert awaited["evidence"]["dependencies"] == [
        {
            "definition": "users_raw",
            "logical_time": "2026-11-01T02:00:00+00:00",
            "run_id": None,
            "run_logical_time": None,
            "publication_state": None,
        }
    ]
    # ``veritask show`` prints the same events in its history table, evidence included.
    printed = io.StringIO()
    Console(file=printed, width=400).print(render.history_table(run_level))
    shown = printed.getvalue()
    assert "dependencies_awaited" in shown and '"definition":"users_raw"' in shown
