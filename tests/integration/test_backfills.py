"""Backfills over HTTP on SQLite and PostgreSQL: plan, create, ask again, list, cancel."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from tests.integration.conftest import HELLO, Api
from veritask.core.states import RunExecutionState
from veritask.ledger import dialects, queries, run_store
from veritask.services.tokens import TokenRole

DAILY = """\
name: daily
concurrency: allow
schedule: {cron: "0 0 * * *", timezone: UTC}
parameters: {table: users}
tasks:
  load: {run: "echo {{ params.table }}"}
"""

JANUARY = {"from": "2026-01-01T00:00:00Z", "to": "2026-01-08T00:00:00Z"}


def _backfill(api: Api, name: str = "daily", **body: Any) -> Any:
    return api.http.post(f"/api/v2/definitions/{name}/backfills", json={**JANUARY, **body})


def _runs(api: Api) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = api.http.get(
        "/api/v2/runs", params={"definition": "daily", "limit": 200}
    ).json()["items"]
    return found


def _finish(api: Api, run_id: str, state: RunExecutionState) -> None:
    """Move a run to a final state the way the scheduler records it."""
    with api.platform.engine.begin() as connection:
        version, previous = run_store.run_version(connection, run_id)
        run_store.set_execution_state(
            connection,
            run_id=run_id,
            expected_version=version,
            state=state,
            reason="finished by the test",
            previous=previous,
            actor="scheduler",
            event_id=uuid.uuid4().hex,
            now=datetime.now(UTC),
            evidence={"by": "the test"},
        )


def test_a_backfill_makes_one_run_per_fire_time_of_the_half_open_range(api: Api) -> None:
    api.apply(DAILY)
    response = _backfill(api, max_active_runs=10, reason="january reload")
    assert response.status_code == 201, response.text
    backfill = response.json()["backfill"]
    assert response.headers["location"] == f"/api/v2/backfills/{backfill['id']}"
    times = [i["logical_time"] for i in backfill["intervals"]]
    # [from, to): the 1st is in, the 8th is not.
    assert times == [f"2026-01-0{day}T00:00:00Z" for day in range(1, 8)]
    first = backfill["intervals"][0]
    assert (first["data_interval_start"], first["data_interval_end"]) == (
        "2025-12-31T00:00:00Z",
        "2026-01-01T00:00:00Z",
    )
    assert {i["action"] for i in backfill["intervals"]} == {"create"}
    assert backfill["progress"]["created"] == 7 and backfill["progress"]["pending"] == 0
    assert backfill["from"] == JANUARY["from"] and backfill["state"] == "active"
    runs = _runs(api)
    assert len(runs) == 7
    assert {r["trigger_kind"] for r in runs} == {"backfill"}
    run = api.run(backfill["intervals"][0]["run_id"])
    assert run["logical_time"] == "2026-01-01T00:00:00Z"
    with dialects.read_transaction(api.platform.engine) as connection:
        stored = queries.get_run(connection, run["id"])
    assert stored is not None
    assert stored.data_interval_start == datetime(2025, 12, 31, tzinfo=UTC)
    assert stored.data_interval_end == datetime(2026, 1, 1, tzinfo=UTC)
    history = api.http.get("/api/v2/definitions/daily/events").json()["events"]
    [recorded] = [e for e in history if e["kind"] == "backfill_requested"]
    assert recorded["actor"].startswith("operator:") or recorded["actor"]
    assert recorded["evidence"]["backfill_id"] == backfill["id"]
    assert "january reload" in recorded["reason"]


def test_a_second_identical_backfill_creates_nothing_new(api: Api) -> None:
    api.apply(DAILY)
    first = _backfill(api, max_active_runs=10).json()["backfill"]
    again = _backfill(api, max_active_runs=10)
    assert again.status_code == 200
    assert again.json()["backfill"]["id"] == first["id"]
    assert len(_runs(api)) == 7
    # Once the first is closed, a new backfill of the range finds every interval has a run.
    cancel = api.http.post(f"/api/v2/backfills/{first['id']}/cancel", json={"reason": "stop"})
    assert cancel.status_code == 200
    later = _backfill(api).json()["backfill"]
    assert later["id"] != first["id"]
    assert {i["action"] for i in later["intervals"]} == {"skip"}
    assert later["progress"]["skipped"] == 7 and later["state"] == "done"
    assert len(_runs(api)) == 7


def test_a_dry_run_shows_every_interval_and_changes_nothing(api: Api) -> None:
    api.apply(DAILY)
    made = _backfill(api, to="2026-01-03T00:00:00Z").json()["backfill"]
    existing = made["intervals"][0]["run_id"]
    response = _backfill(api, dry_run=True, existing="all")
    assert response.status_code == 200
    preview = response.json()["backfill"]
    assert preview["id"] is None and preview["state"] == "dry_run"
    actions = [(i["action"], i["existing_run_id"]) for i in preview["intervals"]]
    # The first run is active (it was never run): an active run is left as it is.
    assert actions[0] == ("skip", existing)
    assert [a for a, _ in actions[2:]] == ["create"] * 5
    assert len(_runs(api)) == 1  # max_active_runs 1: only the first was made
    listed = api.http.get("/api/v2/backfills", params={"definition": "daily"}).json()["items"]
    assert [b["id"] for b in listed] == [made["id"]]


def test_max_active_runs_holds_back_the_rest(api: Api) -> None:
    api.apply(DAILY)
    backfill = _backfill(api, max_active_runs=2).json()["backfill"]
    assert backfill["progress"]["created"] == 2 and backfill["progress"]["pending"] == 5
    assert len(_runs(api)) == 2
    shown = api.http.get(f"/api/v2/backfills/{backfill['id']}").json()
    assert [i["run_id"] is not None for i in shown["intervals"]] == [True] * 2 + [False] * 5


def test_cancel_stops_the_runs_and_a_second_cancel_is_409(api: Api) -> None:
    api.apply(DAILY)
    backfill = _backfill(api, max_active_runs=3).json()["backfill"]
    cancelled = api.http.post(
        f"/api/v2/backfills/{backfill['id']}/cancel", json={"reason": "wrong range"}
    )
    assert cancelled.status_code == 200, cancelled.text
    body = cancelled.json()
    assert body["state"] == "cancelled" and body["finished_at"]
    states = {api.run(i["run_id"])["execution_state"] for i in body["intervals"] if i["run_id"]}
    assert states <= {"CANCELLING", "CANCELLED"}
    again = api.http.post(f"/api/v2/backfills/{backfill['id']}/cancel", json={"reason": "x"})
    assert again.status_code == 409
    assert "cancelled" in again.json()["detail"]
    missing = api.http.get("/api/v2/backfills/nope")
    assert missing.status_code == 404


def test_a_definition_without_a_schedule_is_refused_naming_it(api: Api) -> None:
    api.apply(HELLO)
    response = _backfill(api, "hello")
    assert response.status_code == 422
    assert response.headers["content-type"].startswith("application/problem+json")
    assert "hello" in response.json()["detail"] and "schedule" in response.json()["detail"]


def test_bad_ranges_and_choices_are_refused_naming_the_field(api: Api) -> None:
    api.apply(DAILY)
    backwards = _backfill(api, **{"from": "2026-02-01T00:00:00Z"})
    assert backwards.status_code == 422 and backwards.json()["errors"][0]["field"] == "to"
    naive = _backfill(api, **{"from": "2026-01-01T00:00:00"})
    assert naive.status_code == 422
    choice = _backfill(api, existing="some")
    assert choice.status_code == 422
    unknown = _backfill(api, parameters={"nope": 1})
    assert unknown.status_code == 422
    assert _backfill(api, max_active_runs=0).status_code == 422
    assert _backfill(api, "nope").status_code == 404


def test_existing_failed_clears_the_failed_run_and_all_reruns(api: Api) -> None:
    api.apply(DAILY)
    made = _backfill(api, to="2026-01-02T00:00:00Z").json()["backfill"]
    old = made["intervals"][0]["run_id"]
    _finish(api, old, RunExecutionState.FAILED)
    preview = _backfill(api, to="2026-01-02T00:00:00Z", existing="failed", dry_run=True)
    [planned] = preview.json()["backfill"]["intervals"]
    assert (planned["action"], planned["existing_run_id"]) == ("clear", old)
    failed = _backfill(api, to="2026-01-02T00:00:00Z", existing="failed", reason="fixed")
    assert failed.status_code == 201, failed.text
    [cleared] = failed.json()["backfill"]["intervals"]
    # The failed run itself stands for the interval (a clear runs it again): no new run.
    assert (cleared["action"], cleared["run_id"]) == ("clear", old)
    assert failed.json()["backfill"]["progress"]["pending"] == 0
    assert [run["id"] for run in _runs(api)] == [old]
    rerun = _backfill(api, to="2026-01-02T00:00:00Z", existing="all")
    assert rerun.status_code == 201, rerun.text
    [interval] = rerun.json()["backfill"]["intervals"]
    assert interval["action"] == "rerun" and interval["existing_run_id"] == old
    new = api.run(interval["run_id"])
    assert new["trigger_kind"] == "rerun" and new["rerun_of"] == old
    assert new["logical_time"] == "2026-01-01T00:00:00Z"
    assert api.run(old)["execution_state"] == "FAILED"  # untouched


def test_a_viewer_cannot_backfill(api: Api) -> None:
    api.apply(DAILY)
    viewer = api.client_with_role(TokenRole.VIEWER)
    response = viewer.post("/api/v2/definitions/daily/backfills", json=JANUARY)
    assert response.status_code == 403
    assert viewer.get("/api/v2/backfills").status_code == 200
