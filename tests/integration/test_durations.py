"""Durations over HTTP: a run's phases per instance and a definition's p50/p95, computed from
the events' times (docs/state-machine.md, Durations), on SQLite and
PostgreSQL."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.contract.test_apply_ledger import token
from tests.contract.test_audit import _story
from tests.integration.conftest import Api
from veritask.core import judge
from veritask.core.events import Event, EventKind
from veritask.core.jsontypes import JSONObject
from veritask.core.states import TriggerKind
from veritask.scheduling import triggers
from veritask.services import durations, metrics

T0 = datetime(2026, 6, 1, 9, 0, tzinfo=UTC)


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


CLEARED = """
name: cleared
tasks:
  only: {run: "true", retry: {max_retries: 0}}
"""


def _event(
    instance_id: str, attempt_no: int, kind: EventKind, at: datetime, evidence: JSONObject
) -> Event:
    """A report of attempt ``attempt_no`` at ``at`` (a worker's report carries its token)."""
    actor = {
        EventKind.ATTEMPT_OPENED: "scheduler",
        EventKind.SUBMIT_ACKNOWLEDGED: "executor",
    }.get(kind, "worker")
    worker = actor == "worker"
    return Event(
        str(uuid.uuid4()),
        instance_id,
        attempt_no,
        kind,
        actor,
        at,
        evidence,
        seq=int((at - T0).total_seconds()) if worker else None,
        attempt_token=token(instance_id, attempt_no) if worker else None,
    )


def _attempt(
    api: Api, instance_id: str, attempt_no: int, reason: str, start: int, end: int, exit_code: int
) -> None:
    """Attempt ``attempt_no``: opened at T0+start s, acknowledged 1 s later, started 2 s later,
    ended at T0+end s with ``exit_code``."""
    opened_evidence: JSONObject = {
        "token_hash": judge.hash_token(token(instance_id, attempt_no)),
        "reason": reason,
        "retry_index": 0,
        "resubmit_index": 0,
    }
    at = [T0 + timedelta(seconds=s) for s in (start, start + 1, start + 2, end)]
    outcome: JSONObject = {
        "exit_code": exit_code,
        "error_category": "none" if exit_code == 0 else "task_error",
    }
    for event in (
        _event(instance_id, attempt_no, EventKind.ATTEMPT_OPENED, at[0], opened_evidence),
        _event(
            instance_id,
            attempt_no,
            EventKind.SUBMIT_ACKNOWLEDGED,
            at[1],
            {"external_id": f"local:{attempt_no}", "executor": "local"},
        ),
        _event(instance_id, attempt_no, EventKind.STARTED, at[2], {"worker": "w:1"}),
        _event(instance_id, attempt_no, EventKind.COMPLETED, at[3], outcome),
    ):
        api.platform.ledger.clock = _at(event.event_time)
        assert api.platform.ledger.apply(event).outcome is judge.Outcome.APPLIED, event.kind


def test_a_clear_made_later_is_never_retry_wait(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    # Created at T0; attempt 1 opened T0+1 s, queued +2, started +3, failed +10. An operator
    # clears it at T0+100 s; the rerun (attempt 2) opens at +105, queued +106, started +107,
    # succeeds +110. The 90 s between the failure and the clear are nobody's wait.
    monkeypatch.setattr(metrics, "POSTGRES_SETTLE", timedelta())
    ledger = api.platform.ledger
    ledger.clock = lambda: T0
    triggers.apply_definition(ledger, CLEARED)
    run_id = triggers.trigger(ledger, name="cleared", kind=TriggerKind.MANUAL, actor="api").run_id
    instance_id = api.instance_ids(run_id)["only"]
    _attempt(api, instance_id, 1, "first", 1, 10, exit_code=1)
    ledger.clock = lambda: T0 + timedelta(seconds=100)
    cleared = api.http.post(
        f"/api/v2/runs/{run_id}/clear", json={"tasks": ["only"], "reason": "try again"}
    )
    assert cleared.status_code == 202, cleared.text
    _attempt(api, instance_id, 2, "rerun", 105, 110, exit_code=0)

    body = api.http.get(f"/api/v2/runs/{run_id}/durations").json()
    [only] = body["instances"]
    assert only["state"] == "SUCCESS"
    expected = [
        ("dependency_wait", 1, 1.0),
        ("queue", 1, 1.0),
        ("execution", 1, 7.0),
        ("dependency_wait", 2, 5.0),  # from the clear to the rerun's SCHEDULED
        ("queue", 2, 1.0),
        ("execution", 2, 3.0),
    ]
    assert [
        (p["phase"], p["attempt_no"], _seconds(p["start"], p["end"])) for p in only["phases"]
    ] == expected
    assert only["seconds"] == {"dependency_wait": 6.0, "queue": 2.0, "execution": 10.0}
    assert body["seconds"] == only["seconds"]
    [timeline] = durations.run_timeline(api.platform, run_id)
    assert [
        (p.phase.value, p.attempt_no, p.duration.total_seconds() if p.duration else None)
        for p in timeline.phases
    ] == expected
    statistics = api.http.get("/api/v2/definitions/cleared/durations").json()["tasks"]["only"]
    assert "retry_wait" not in statistics
    assert statistics["dependency_wait"] == {"count": 1, "p50": 6.0, "p95": 6.0}

    scraped = api.client(None).get("/metrics").text
    series = {
        (sample.name, sample.labels.get("phase")): sample.value
        for family in text_string_to_metric_families(scraped)
        for sample in family.samples
        if sample.labels.get("definition") == "cleared"
    }
    assert ("veritask_phase_seconds_count", "retry_wait") not in series
    assert series[("veritask_phase_seconds_sum", "dependency_wait")] == 6.0


def _at(moment: datetime) -> Callable[[], datetime]:
    """A clock stopped at ``moment``."""
    return lambda: moment


def _seconds(start: str, end: str | None) -> float | None:
    if end is None:
        return None
    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()
