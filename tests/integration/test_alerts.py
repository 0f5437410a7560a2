"""Alerts over HTTP: routed by the definition's owner, deduplicated, acknowledged and resolved
by operators (who and when recorded), refused to viewers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.integration.conftest import Api
from tests.pipelines.harness import Platform as Scheduled
from tests.unit.test_phrases import unread
from veritask.core.states import RunExecutionState
from veritask.ledger import alerts
from veritask.ledger.vocabulary import AlertCategory
from veritask.services.tokens import TokenRole

OWNED = """\
name: owned
owner: data-platform
tasks:
  greet: {run: echo hello}
"""


def _raise(api: Api, run_id: str, key: str = "lost:1") -> bool:
    return alerts.raise_alert(
        api.platform.ledger,
        category=AlertCategory.RECONCILIATION,
        dedup_key=key,
        message="attempt 1 is LOST",
        evidence={"state": "LOST"},
        run_id=run_id,
    )


def test_an_alert_about_a_run_is_routed_to_its_definitions_owner(api: Api) -> None:
    api.apply(OWNED)
    run_id = api.trigger("owned")
    assert _raise(api, run_id)

    listed = api.http.get("/api/v2/alerts").json()["items"]

    assert len(listed) == 1
    assert listed[0]["owner"] == "data-platform"
    assert listed[0]["definition"] == "owned"
    assert listed[0]["category"] == "reconciliation"
    assert listed[0]["status"] == "open"
    by_owner = api.http.get("/api/v2/alerts", params={"owner": "someone-else"}).json()
    assert by_owner["items"] == []
    by_category = api.http.get("/api/v2/alerts", params={"category": "engine"}).json()
    assert by_category["items"] == []


def test_acknowledge_and_resolve_record_who_and_when_and_viewers_are_refused(api: Api) -> None:
    api.apply(OWNED)
    run_id = api.trigger("owned")
    _raise(api, run_id)
    alert_id = api.http.get("/api/v2/alerts").json()["items"][0]["id"]
    viewer = api.client_with_role(TokenRole.VIEWER)
    operator = api.client_with_role(TokenRole.OPERATOR)

    refused = viewer.post(f"/api/v2/alerts/{alert_id}/acknowledge")
    assert refused.status_code == 403
    assert refused.headers["content-type"].startswith("application/problem+json")

    acknowledged = operator.post(f"/api/v2/alerts/{alert_id}/acknowledge")
    assert acknowledged.status_code == 200, acknowledged.text
    body = acknowledged.json()
    assert body["status"] == "acknowledged"
    assert body["acknowledged_by"] == f"operator:{TokenRole.OPERATOR}-user"
    assert body["acknowledged_at"] is not None
    # Acknowledged is still unresolved: the same condition is not raised twice.
    assert not _raise(api, run_id)

    resolved = operator.post(f"/api/v2/alerts/{alert_id}/resolve")
    assert resolved.status_code == 200, resolved.text
    assert resolved.json()["resolved_by"] == f"operator:{TokenRole.OPERATOR}-user"
    again = operator.post(f"/api/v2/alerts/{alert_id}/resolve")
    assert again.status_code == 409
    assert again.json()["current_state"] == "resolved"
    # Resolved frees the condition: it may be raised again, as a new alert.
    assert _raise(api, run_id)
    statuses = api.http.get("/api/v2/alerts", params={"status": ["open", "resolved"]}).json()
    assert [item["status"] for item in statuses["items"]] == ["open", "resolved"]


def test_an_unknown_alert_is_not_found(api: Api) -> None:
    response = api.http.post("/api/v2/alerts/999/acknowledge")
    assert response.status_code == 404
    assert response.json()["type"] == "/problems/not-found"


FAILING = """\
name: failing
owner: data-platform
tasks:
  extract: {run: "true"}
  load: {run: "exit 3", after: [extract], retry: {max_retries: 1, delay: 0s}}
"""


def _run_to_its_end(api: Api, source: str, name: str, home: Path) -> dict[str, Any]:
    """Apply ``source``, trigger it and let the real scheduler and local engine end the run."""
    api.apply(source)
    run_id = api.trigger(name)
    scheduled = Scheduled(api.platform.engine, home)
    try:
        view = scheduled.settle(run_id)
    finally:
        scheduled.close()
    assert view.execution_state is RunExecutionState.FAILED, view
    return api.run(run_id)


def test_a_failed_run_alerts_its_definitions_owner(api: Api, tmp_path: Path) -> None:
    run = _run_to_its_end(api, FAILING, "failing", tmp_path / "scheduler")
    [load] = [i for i in run["instances"] if i["task"] == "load"]
    assert load["state"] == "FAILED"
    assert len(load["attempts"]) == 2, "the alert comes after the last retry"

    found = api.http.get("/api/v2/alerts", params={"category": "run_failed"}).json()["items"]

    [alert] = found
    assert (alert["run_id"], alert["owner"], alert["definition"]) == (
        run["id"],
        "data-platform",
        "failing",
    )
    assert alert["message"] == "the run failed: leaf load failed"
    assert unread(alert["message"]) == []
    mine = api.http.get("/api/v2/alerts", params={"owner": "data-platform"}).json()["items"]
    assert [a["id"] for a in mine] == [alert["id"]]


def test_a_definition_may_turn_its_failure_alert_off(api: Api, tmp_path: Path) -> None:
    quiet = FAILING.replace("name: failing", "name: quiet\nalert_on_failure: false")
    _run_to_its_end(api, quiet, "quiet", tmp_path / "scheduler")

    found = api.http.get("/api/v2/alerts", params={"category": "run_failed"}).json()["items"]

    assert found == []
    shown = api.http.get("/api/v2/definitions/quiet").json()
    assert "alert_on_failure: false" in shown["source"]
