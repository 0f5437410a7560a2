"""Durations over HTTP: a run's phases per instance and a definition's p50/p95, computed from
the events' times (docs/state-machine.md, Durations), on SQLite and
PostgreSQL."""

from __future__ import annotations

from tests.contract.test_audit import _story
from tests.integration.conftest import Api
from veritask.services import durations


def test_a_runs_durations_come_from_its_events_times(api: Api) -> None:
    # extract: acknowledged at T0, started T0+1s, succeeded T0+2s; load: the same, then failed.
    run_id = _story(api.platform.ledger)

    response = api.http.get(f"/api/v2/runs/{run_id}/durations")

    assert response.status_code == 200, response.text
    body = response.json()
    assert body["definition"] == "audited"
    by_task = {instance["task_key"]: instance for instance in body["instances"]}
    assert by_task["extract"]["state"] == "SUCCESS"
    assert by_task["extract"]["seconds"]["queue"] == 1.0
    assert by_task["extract"]["seconds"]["execution"] == 1.0
    assert by_task["load"]["state"] == "UP_FOR_RETRY"
    assert "retry_wait" not in by_task["load"]["seconds"], "the retry is not opened yet"
    assert body["seconds"]["execution"] == 2.0
    phases = [(p["phase"], p["attempt_no"]) for p in by_task["extract"]["phases"]]
    assert phases == [("dependency_wait", 1), ("queue", 1), ("execution", 1)]


def test_a_definitions_percentiles_cover_its_recent_runs(api: Api) -> None:
    _story(api.platform.ledger)

    response = api.http.get("/api/v2/definitions/audited/durations", params={"runs": 5})

    assert response.status_code == 200, response.text
    body = response.json()
    assert body["runs"] == 1
    assert body["tasks"]["*"]["execution"] == {"count": 2, "p50": 1.0, "p95": 1.0}
    assert body["tasks"]["extract"]["queue"]["count"] == 1
    missing = api.http.get("/api/v2/definitions/nothing/durations")
    assert missing.status_code == 404
    too_many = api.http.get("/api/v2/definitions/audited/durations", params={"runs": 0})
    assert too_many.status_code == 422


def test_run_timeline_gives_the_ui_each_instances_phase_intervals(api: Api) -> None:
    run_id = _story(api.platform.ledger)

    timeline = {item.task_key: item for item in durations.run_timeline(api.platform, run_id)}

    extract = timeline["extract"]
    assert extract.state == "SUCCESS"
    execution = [p for p in extract.phases if p.phase is durations.Phase.EXECUTION]
    assert execution[0].end is not None
    assert (execution[0].end - execution[0].start).total_seconds() == 1.0
