"""Triggering, listing, reading and cancelling runs and instances; /api/v1's coarse reads."""

from __future__ import annotations

import uuid

from tests.integration.conftest import (
    HELLO,
    PIPELINE,
    Api,
    open_attempt,
    report,
    started,
    worker_event,
)
from veritask.core.jsontypes import JSONObject


def test_trigger_records_the_run_and_returns_202_with_its_location(api: Api) -> None:
    api.apply(HELLO)
    response = api.http.post("/api/v2/definitions/hello/runs", json={})
    assert response.status_code == 202
    body = response.json()
    assert body["created"] is True
    assert body["execution_state"] == "RUNNING"
    assert response.headers["location"] == f"/api/v2/runs/{body['run_id']}"


QUEUED_HELLO = """\
name: queued_hello
concurrency: queue
tasks:
  greet: {run: echo hello}
"""


def test_the_same_idempotency_key_returns_the_same_run(api: Api) -> None:
    api.apply(HELLO)
    first = api.http.post("/api/v2/definitions/hello/runs", json={"idempotency_key": "k-1"})
    again = api.http.post("/api/v2/definitions/hello/runs", json={"idempotency_key": "k-1"})
    assert first.status_code == 202
    assert again.status_code == 200
    assert again.json()["run_id"] == first.json()["run_id"]
    assert again.json()["created"] is False
    # Another key is another run: hello's concurrency (forbid) refuses it while k-1 runs.
    other = api.http.post("/api/v2/definitions/hello/runs", json={"idempotency_key": "k-2"})
    assert other.status_code == 409
    assert first.json()["run_id"] in other.json()["detail"]
    api.apply(QUEUED_HELLO)
    one = api.http.post("/api/v2/definitions/queued_hello/runs", json={"idempotency_key": "k-1"})
    two = api.http.post("/api/v2/definitions/queued_hello/runs", json={"idempotency_key": "k-2"})
    assert one.status_code == two.status_code == 202
    assert one.json()["run_id"] != two.json()["run_id"]


def test_parameters_must_be_ones_the_definition_declares(api: Api) -> None:
    api.apply(PIPELINE)
    ok = api.http.post("/api/v2/definitions/pipeline/runs", json={"parameters": {"table": "t"}})
    assert ok.status_code == 202
    assert api.run(ok.json()["run_id"])["parameters"] == {"table": "t"}
    refused = api.http.post(
        "/api/v2/definitions/pipeline/runs", json={"parameters": {"colour": "red"}}
    )
    assert refused.status_code == 422
    assert refused.json()["errors"][0]["field"] == "parameters.colour"


def test_triggering_an_unknown_definition_is_404(api: Api) -> None:
    assert api.http.post("/api/v2/definitions/nope/runs", json={}).status_code == 404


def test_a_run_shows_both_states_and_its_instances_with_attempts(api: Api) -> None:
    api.apply(PIPELINE)
    run_id = api.trigger("pipeline", trigger_kind="manual")
    run = api.run(run_id)
    assert run["id"] == run_id
    assert run["definition"] == "pipeline"
    assert run["trigger_kind"] == "manual"
    assert run["execution_state"] == "RUNNING"
    assert run["execution_reason"] == "started"
    assert run["publication_state"] == "NOT_REQUIRED"
    instances = run["instances"]
    assert [i["task"] for i in instances] == ["extract", "transform", "load"]  # pipeline order
    assert {i["state"] for i in instances} == {"CREATED"}
    assert all(i["attempts"] == [] for i in instances)


def test_an_instance_shows_its_attempts_progress_and_history(api: Api) -> None:
    api.apply(HELLO)
    instance_id = api.instance_ids(api.trigger("hello"))["greet"]
    token = "token-" + uuid.uuid4().hex
    attempt_no = open_attempt(api.platform, instance_id, token)
    assert report(api, started(instance_id, attempt_no, token), token).status_code == 200
    progress: JSONObject = {"phase": "copy", "done": 3, "total": 9, "message": "rows"}
    event = worker_event(instance_id, attempt_no, token, 2, "progress", dict(progress))
    assert report(api, event, token).status_code == 200
    shown = api.http.get(f"/api/v2/instances/{instance_id}").json()
    assert shown["state"] == "RUNNING"
    assert shown["definition"] == "hello"
    [attempt] = shown["attempts"]
    assert attempt["state"] == "RUNNING"
    assert attempt["external_id"] == f"test:{instance_id}/1"
    assert attempt["progress"] == progress
    assert attempt["started_at"] is not None
    kinds = [e["kind"] for e in shown["events"]]
    assert kinds == [
        "instance_created",
        "attempt_opened",
        "submit_acknowledged",
        "started",
        "progress",
    ]
    for event_row in shown["events"]:
        assert event_row["event_time"] and event_row["observed_at"] and event_row["actor"]
        assert event_row["outcome"] == "applied"


def test_runs_are_listed_newest_first_with_filters_and_cursor_pages(api: Api) -> None:
    api.apply(QUEUED_HELLO)
    api.apply(PIPELINE)
    hellos = [api.trigger("queued_hello") for _ in range(3)]
    pipeline = api.trigger("pipeline")
    page = api.http.get("/api/v2/runs", params={"definition": "queued_hello", "limit": 2}).json()
    assert [r["id"] for r in page["items"]] == hellos[::-1][:2]
    rest = api.http.get(
        "/api/v2/runs",
        params={"definition": "queued_hello", "limit": 2, "cursor": page["next_cursor"]},
    ).json()
    assert [r["id"] for r in rest["items"]] == [hellos[0]]
    assert rest["next_cursor"] is None
    # concurrency: queue did not start the second and third yet.
    running = api.http.get("/api/v2/runs", params={"state": ["RUNNING"]}).json()["items"]
    assert {r["id"] for r in running} == {hellos[0], pipeline}
    both = api.http.get("/api/v2/runs", params={"state": ["QUEUED", "FAILED"]}).json()
    assert {r["id"] for r in both["items"]} == set(hellos[1:])


def test_listing_runs_refuses_a_bad_cursor_state_or_definition(api: Api) -> None:
    assert api.http.get("/api/v2/runs", params={"cursor": "garbage"}).status_code == 422
    assert api.http.get("/api/v2/runs", params={"state": ["NOPE"]}).status_code == 422
    assert api.http.get("/api/v2/runs", params={"definition": "nope"}).status_code == 404


def test_v1_shows_the_coarse_state_always_with_raw_state(api: Api) -> None:
    api.apply(HELLO)
    run_id = api.trigger("hello")
    instance_id = api.instance_ids(run_id)["greet"]
    token = "token-" + uuid.uuid4().hex
    open_attempt(api.platform, instance_id, token)
    run = api.http.get(f"/api/v1/runs/{run_id}").json()
    assert (run["state"], run["raw_state"]) == ("RUNNING", "RUNNING")
    [instance] = run["instances"]
    assert (instance["state"], instance["raw_state"]) == ("WAITING", "QUEUED")
    [attempt] = instance["attempts"]
    assert (attempt["state"], attempt["raw_state"]) == ("WAITING", "QUEUED")
    listed = api.http.get("/api/v1/runs").json()["items"]
    assert listed[0]["raw_state"] == "RUNNING"
    single = api.http.get(f"/api/v1/instances/{instance_id}").json()
    assert single["raw_state"] == "QUEUED"
    history = api.http.get(f"/api/v1/instances/{instance_id}/events").json()["events"]
    assert [(e["state"], e["raw_state"]) for e in history][-1] == ("WAITING", "QUEUED")
    run_history = api.http.get(f"/api/v1/runs/{run_id}/events").json()["events"]
    assert run_history[0]["kind"] == "run_created"
    assert api.http.get("/api/v1/definitions/hello/events").status_code == 200


def test_histories_page_with_after(api: Api) -> None:
    api.apply(PIPELINE)
    run_id = api.trigger("pipeline")
    first = api.http.get(f"/api/v2/runs/{run_id}/events", params={"limit": 2}).json()
    assert len(first["events"]) == 2
    rest = api.http.get(
        f"/api/v2/runs/{run_id}/events", params={"after": first["next_after"]}
    ).json()
    assert rest["next_after"] is None
    kinds = [e["kind"] for e in first["events"] + rest["events"]]
    assert kinds == ["run_created"] + ["instance_created"] * 3
    assert api.http.get("/api/v2/runs/nope/events").status_code == 404
    assert api.http.get("/api/v2/instances/nope/events").status_code == 404


def test_a_runs_summary_is_its_own_fields_without_instances_or_upstreams(api: Api) -> None:
    api.apply(PIPELINE)
    run_id = api.trigger("pipeline")

    whole = api.http.get(f"/api/v2/runs/{run_id}").json()
    summary = api.http.get(f"/api/v2/runs/{run_id}/summary").json()

    assert len(whole.pop("instances")) == 3
    assert whole.pop("upstream_runs") == []
    assert whole.pop("instances_next_cursor") is None  # every instance is there
    assert summary == whole
    missing = api.http.get("/api/v2/runs/nope/summary")
    assert missing.status_code == 404
    assert missing.headers["content-type"].startswith("application/problem+json")


def test_cancelling_a_running_run_records_cancelling_then_409_once_finished(api: Api) -> None:
    api.apply(HELLO)
    run_id = api.trigger("hello")
    instance_id = api.instance_ids(run_id)["greet"]
    token = "token-" + uuid.uuid4().hex
    attempt_no = open_attempt(api.platform, instance_id, token)
    report(api, started(instance_id, attempt_no, token), token)
    response = api.http.post(f"/api/v2/runs/{run_id}/cancel", json={"reason": "wrong day"})
    assert response.status_code == 202
    assert response.json()["state"] == "CANCELLING"
    run = api.run(run_id)
    assert run["execution_state"] == "CANCELLING"
    assert "wrong day" in str(run["execution_reason"])
    assert run["instances"][0]["state"] == "CANCELLING"
    # Again: idempotent.
    assert api.http.post(f"/api/v2/runs/{run_id}/cancel").status_code == 202
    # The worker confirms; the heartbeat it sends before that is told to stop.
    beat = report(
        api,
        started(instance_id, attempt_no, token, seq=2) | {"kind": "heartbeat", "evidence": {}},
        token,
    )
    assert beat.json()["stop"] is True


def test_cancelling_a_finished_run_is_409_with_its_state(api: Api) -> None:
    api.apply(HELLO)
    run_id = api.trigger("hello")
    instance_id = api.instance_ids(run_id)["greet"]
    assert api.http.post(f"/api/v2/instances/{instance_id}/cancel", json={}).status_code == 202
    # Cancelling the run's only instance before it ran: the run can still be cancelled ...
    assert api.http.post(f"/api/v2/runs/{run_id}/cancel", json={}).status_code == 202
    # ... but an instance that already ended cannot.
    again = api.http.post(f"/api/v2/instances/{instance_id}/cancel", json={})
    assert again.status_code == 409
    assert again.json()["current_state"] == "CANCELLED"
    assert again.json()["type"] == "/problems/conflict"


def test_cancel_of_an_unknown_run_or_instance_is_404(api: Api) -> None:
    assert api.http.post("/api/v2/runs/nope/cancel", json={}).status_code == 404
    assert api.http.post("/api/v2/instances/nope/cancel", json={}).status_code == 404


def test_a_cancel_reason_must_not_be_empty(api: Api) -> None:
    api.apply(HELLO)
    run_id = api.trigger("hello")
    assert api.http.post(f"/api/v2/runs/{run_id}/cancel", json={"reason": ""}).status_code == 422
    blank = api.http.post(f"/api/v2/runs/{run_id}/cancel", json={"reason": "   "})
    assert blank.status_code == 422
