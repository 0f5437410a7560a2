"""``POST /api/v2/runs/{id}/clear`` and ``/rerun`` over HTTP: status codes, bodies, problems."""

from __future__ import annotations

from tests.integration.conftest import PIPELINE, Api, completed, open_attempt, report, started
from tests.integration.test_overrides import _failed_run
from veritask.services.tokens import TokenRole


def test_clear_failed_answers_202_with_the_cleared_instances(api: Api) -> None:
    run_id, instance_id = _failed_run(api)
    response = api.http.post(
        f"/api/v2/runs/{run_id}/clear", json={"failed": True, "reason": "fixed the disk"}
    )
    assert response.status_code == 202, response.text
    body = response.json()
    assert body["execution_state"] == "RUNNING"
    assert body["instances"] == [
        {"instance_id": instance_id, "task": "greet", "previous_state": "FAILED", "next_attempt": 2}
    ]
    shown = api.http.get(f"/api/v2/instances/{instance_id}").json()
    assert shown["state"] == "CREATED"
    assert shown["attempts"][0]["state"] == "FAILED"
    [cleared] = [e for e in shown["events"] if e["kind"] == "cleared"]
    assert cleared["actor"] == "operator:admin"
    assert cleared["evidence"]["reason"] == "fixed the disk"
    assert cleared["evidence"]["scope"] == "failed"
    # The next attempt opens under number 2, as a rerun, and the run can finish on it.
    token = "token-rerun"
    assert open_attempt(api.platform, instance_id, token) == 2
    report(api, started(instance_id, 2, token), token)
    report(api, completed(instance_id, 2, token, seq=2, exit_code=0), token)
    assert api.http.get(f"/api/v2/instances/{instance_id}").json()["state"] == "SUCCESS"


def test_clear_refusals_are_problems(api: Api) -> None:
    run_id, _ = _failed_run(api)
    path = f"/api/v2/runs/{run_id}/clear"
    missing = api.http.post("/api/v2/runs/nope/clear", json={"failed": True, "reason": "x"})
    assert missing.status_code == 404
    assert missing.headers["content-type"].startswith("application/problem+json")
    unknown = api.http.post(path, json={"tasks": ["nope"], "reason": "x"})
    assert unknown.status_code == 404 and "nope" in unknown.json()["detail"]
    assert api.http.post(path, json={"failed": True}).status_code == 422
    both = api.http.post(path, json={"failed": True, "tasks": ["greet"], "reason": "x"})
    assert both.status_code == 422
    viewer = api.client_with_role(TokenRole.VIEWER)
    assert viewer.post(path, json={"failed": True, "reason": "x"}).status_code == 403


def test_clear_of_an_active_instance_is_409_naming_it(api: Api) -> None:
    api.apply(PIPELINE)
    run_id = api.trigger("pipeline")
    ids = api.instance_ids(run_id)
    token = "token-active"
    attempt_no = open_attempt(api.platform, ids["extract"], token)
    report(api, started(ids["extract"], attempt_no, token), token)
    response = api.http.post(
        f"/api/v2/runs/{run_id}/clear", json={"tasks": ["extract"], "reason": "x"}
    )
    assert response.status_code == 409
    assert response.headers["content-type"].startswith("application/problem+json")
    assert "extract" in response.json()["detail"] and ids["extract"] in response.json()["detail"]
    kinds = [
        e["kind"] for e in api.http.get(f"/api/v2/instances/{ids['extract']}").json()["events"]
    ]
    assert "cleared" not in kinds


def test_rerun_answers_202_with_a_new_linked_run(api: Api) -> None:
    # The old run is still active (no scheduler here): the reruns must be allowed beside it.
    api.apply(PIPELINE + "concurrency: allow\n")
    old = api.trigger("pipeline")
    path = f"/api/v2/runs/{old}/rerun"
    response = api.http.post(path, json={"parameters": {"table": "orders"}, "reason": "orders"})
    assert response.status_code == 202, response.text
    body = response.json()
    assert body["rerun_of"] == old and body["created"] is True
    assert body["parameters"]["table"] == "orders"
    new = api.run(body["run_id"])
    assert new["trigger_kind"] == "rerun" and new["rerun_of"] == old
    assert new["logical_time"] == api.run(old)["logical_time"]
    again = api.http.post(path, json={"parameters": {"table": "orders"}, "reason": "orders"})
    assert (again.json()["run_id"], again.json()["created"]) == (body["run_id"], False)
    keyed = api.http.post(path, json={"key": "mine"}).json()
    assert keyed["idempotency_key"].endswith("mine") and keyed["run_id"] != body["run_id"]
    assert api.http.post("/api/v2/runs/nope/rerun", json={}).status_code == 404
    assert api.http.post(path, json={"version": "old"}).status_code == 422
    unknown = api.http.post(path, json={"parameters": {"nope": 1}})
    assert unknown.status_code == 422
    assert [e["field"] for e in unknown.json()["errors"]] == ["parameters.nope"]
