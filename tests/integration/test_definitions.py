"""Applying, reading, enabling and deleting definitions over HTTP."""

from __future__ import annotations

import httpx
import pytest

from tests.integration.conftest import HELLO, PIPELINE, Api
from veritask.services import definitions

SCHEDULED = """\
name: nightly
schedule:
  cron: "0 2 * * *"
  timezone: Asia/Shanghai
tasks:
  work: {run: "true"}
"""


def test_apply_creates_a_version_and_the_same_content_returns_it(api: Api) -> None:
    first = api.http.post("/api/v2/definitions", json={"source": HELLO})
    assert first.status_code == 201
    assert first.json() == {
        "name": "hello",
        "version": 1,
        "created": True,
        "lifecycle": "active",
        "warnings": [],
    }
    again = api.http.post("/api/v2/definitions", json={"source": HELLO})
    assert again.status_code == 200
    assert again.json()["created"] is False
    changed = api.http.post(
        "/api/v2/definitions", json={"source": HELLO.replace("echo hello", "echo hi")}
    )
    assert changed.status_code == 201
    assert changed.json()["version"] == 2


def test_apply_takes_yaml_as_the_body(api: Api) -> None:
    response = api.http.post(
        "/api/v2/definitions", content=HELLO, headers={"content-type": "application/yaml"}
    )
    assert response.status_code == 201
    assert response.json()["name"] == "hello"


def test_apply_takes_a_json_definition_in_source(api: Api) -> None:
    source = '{"name": "from_json", "tasks": {"a": {"run": "true"}}}'
    response = api.http.post("/api/v2/definitions", json={"source": source})
    assert response.status_code == 201


def test_invalid_yaml_is_422_with_the_line(api: Api) -> None:
    response = api.http.post("/api/v2/definitions", json={"source": "name: x\ntasks: [\n"})
    assert response.status_code == 422
    body = response.json()
    assert body["type"] == "/problems/invalid-input"
    [error] = body["errors"]
    assert error["line"] == 3
    assert "invalid YAML" in error["message"]


def test_an_unknown_field_is_named_with_its_line(api: Api) -> None:
    source = "name: x\nowner: me\nbogus: 1\ntasks:\n  a: {run: 'true'}\n"
    response = api.http.post("/api/v2/definitions", json={"source": source})
    assert response.status_code == 422
    assert response.json()["errors"] == [
        {"field": "bogus", "line": 3, "message": "unknown field 'bogus'"}
    ]


def test_a_bad_cron_and_a_bad_time_zone_are_both_named(api: Api) -> None:
    source = (
        "name: x\nschedule:\n  cron: '61 * * * *'\n  timezone: Mars/Olympus\n"
        "tasks:\n  a: {run: 'true'}\n"
    )
    response = api.http.post("/api/v2/definitions", json={"source": source})
    assert response.status_code == 422
    fields = {e["field"]: e["line"] for e in response.json()["errors"]}
    assert fields == {"schedule.cron": 3, "schedule.timezone": 4}


def test_a_cycle_is_refused_naming_it(api: Api) -> None:
    source = "name: x\ntasks:\n  a: {run: 'true', after: [b]}\n  b: {run: 'true', after: [a]}\n"
    response = api.http.post("/api/v2/definitions", json={"source": source})
    assert response.status_code == 422
    [error] = response.json()["errors"]
    assert "cycle" in error["message"]
    assert error["line"] == 3


def test_an_executor_no_engine_has_is_refused_with_field_and_line(api: Api) -> None:
    source = "name: x\ntasks:\n  a:\n    run: 'true'\n    executor: kubernetes\n"
    response = api.http.post("/api/v2/definitions", json={"source": source})
    assert response.status_code == 422
    [error] = response.json()["errors"]
    assert (error["field"], error["line"]) == ("tasks.a.executor", 5)
    assert error["message"].startswith("unknown executor 'kubernetes'")
    assert "local, wait, sql, celery" in error["message"]
    assert api.http.get("/api/v2/definitions/x").status_code == 404


def test_an_executor_this_platform_does_not_configure_is_refused(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("VERITASK_CELERY_BROKER", raising=False)
    source = "name: x\ntasks:\n  a: {run: 'true', executor: celery}\n  b: {run: 'true'}\n"
    response = api.http.post("/api/v2/definitions", json={"source": source})
    assert response.status_code == 422
    assert response.json()["errors"] == [
        {
            "field": "tasks.a.executor",
            "line": 3,
            "message": "the executor 'celery' is not configured here: "
            "set VERITASK_CELERY_BROKER where the scheduler runs",
        }
    ]
    monkeypatch.setenv("VERITASK_CELERY_BROKER", "amqp://127.0.0.1:5672//")
    applied = api.http.post("/api/v2/definitions", json={"source": source})
    assert applied.status_code in (200, 201), applied.text


def test_a_body_without_source_is_422(api: Api) -> None:
    response = api.http.post("/api/v2/definitions", json={"text": HELLO})
    assert response.status_code == 422
    response = api.http.post(
        "/api/v2/definitions", content=HELLO, headers={"content-type": "image/png"}
    )
    assert response.status_code == 422


def test_definitions_list_their_schedule_in_words_and_next_fire_time(api: Api) -> None:
    api.apply(SCHEDULED)
    api.apply(PIPELINE)
    listed = api.http.get("/api/v2/definitions").json()["items"]
    by_name = {d["name"]: d for d in listed}
    nightly = by_name["nightly"]
    assert nightly["schedule"] == "every day at 02:00 (Asia/Shanghai)"
    assert nightly["cron"] == "0 2 * * *"
    assert nightly["next_fire_time"] is not None
    assert nightly["next_fire_time"].endswith(("T18:00:00Z", "T18:00:00+00:00"))
    assert by_name["pipeline"]["schedule"] is None
    assert by_name["pipeline"]["tasks"] == ["extract", "transform", "load"]
    assert by_name["pipeline"]["parameters"] == {"table": "users"}


def test_a_definition_shows_its_versions_and_source(api: Api) -> None:
    api.apply(HELLO)
    api.apply(HELLO.replace("echo hello", "echo again"))
    shown = api.http.get("/api/v2/definitions/hello").json()
    assert shown["current_version"] == 2
    assert [v["version"] for v in shown["versions"]] == [1, 2]
    assert "echo again" in shown["source"]
    assert api.http.get("/api/v2/definitions/nope").status_code == 404


def test_disable_stops_the_schedule_and_enable_restarts_it(api: Api) -> None:
    api.apply(SCHEDULED)
    disabled = api.http.post("/api/v2/definitions/nightly/disable")
    assert disabled.status_code == 200
    assert disabled.json()["lifecycle"] == "disabled"
    assert disabled.json()["next_fire_time"] is None
    enabled = api.http.post("/api/v2/definitions/nightly/enable")
    assert enabled.json()["lifecycle"] == "active"
    assert api.http.post("/api/v2/definitions/nightly/runs", json={}).status_code == 202
    kinds = [e["kind"] for e in api.http.get("/api/v2/definitions/nightly/events").json()["events"]]
    assert kinds == ["definition_applied", "definition_disabled", "definition_active"]


def _refused_as_disabled(response: httpx.Response) -> None:
    assert response.status_code == 409, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body = response.json()
    assert body["current_state"] == "disabled"
    assert "nightly is disabled" in body["detail"]


def test_a_disabled_definition_refuses_every_new_run_and_its_active_run_goes_on(api: Api) -> None:
    api.apply(SCHEDULED.replace("tasks:", "concurrency: allow\ntasks:"))
    active = api.trigger("nightly")
    assert api.http.post("/api/v2/definitions/nightly/disable").status_code == 200

    for kind in ("manual", "api"):
        _refused_as_disabled(
            api.http.post("/api/v2/definitions/nightly/runs", json={"trigger_kind": kind})
        )
    _refused_as_disabled(
        api.http.post(
            "/api/v2/definitions/nightly/backfills",
            json={"from": "2026-01-01T00:00:00Z", "to": "2026-01-03T00:00:00Z"},
        )
    )
    rerun = api.http.post(f"/api/v2/runs/{active}/rerun", json={})
    assert rerun.status_code == 409 and "nightly is disabled" in rerun.json()["detail"]
    # Disabling cancels nothing: the run that was active is as it was.
    run = api.run(active)
    assert run["execution_state"] == "RUNNING"
    assert [i["state"] for i in run["instances"]] == ["CREATED"]
    listed = api.http.get("/api/v2/runs", params={"definition": "nightly"}).json()["items"]
    assert [r["id"] for r in listed] == [active]


def test_deleting_a_definition_without_runs_ends_deleted_at_once(api: Api) -> None:
    api.apply(HELLO)
    response = api.http.delete("/api/v2/definitions/hello")
    assert response.status_code == 202
    assert response.json()["lifecycle"] == "deleted"
    # History stays readable; the definition refuses new work, with its state.
    assert api.http.get("/api/v2/definitions/hello").json()["lifecycle"] == "deleted"
    trigger = api.http.post("/api/v2/definitions/hello/runs", json={})
    assert trigger.status_code == 409
    assert trigger.json()["current_state"] == "deleted"
    enable = api.http.post("/api/v2/definitions/hello/enable")
    assert enable.status_code == 409
    assert enable.json()["current_state"] == "deleted"


def test_a_deleted_name_is_applied_again_as_a_new_definition(api: Api) -> None:
    api.apply(HELLO)
    old_run = api.trigger("hello")
    api.http.post(f"/api/v2/runs/{old_run}/cancel", json={"reason": "make room"})
    _settle_cancelled_run(api, old_run)
    assert api.http.delete("/api/v2/definitions/hello").json()["lifecycle"] == "deleted"

    applied = api.http.post("/api/v2/definitions", json={"source": HELLO})

    assert applied.status_code == 201, applied.text
    assert applied.json() == {
        "name": "hello",
        "version": 1,
        "created": True,
        "lifecycle": "active",
        "warnings": [],
    }
    shown = api.http.get("/api/v2/definitions/hello").json()
    assert (shown["lifecycle"], shown["current_version"]) == ("active", 1)
    new_run = api.trigger("hello")
    # The old run is still there, under the old definition; only the new one lists by name.
    old = api.run(old_run)
    assert (old["definition"], old["execution_state"]) == ("hello", "CANCELLED")
    everything = [r["id"] for r in api.http.get("/api/v2/runs").json()["items"]]
    assert set(everything) == {old_run, new_run}
    by_name = api.http.get("/api/v2/runs", params={"definition": "hello"}).json()["items"]
    assert [r["id"] for r in by_name] == [new_run]
    assert api.http.post(f"/api/v2/runs/{old_run}/rerun", json={}).status_code == 409
    events = api.http.get(f"/api/v2/runs/{old_run}/events").json()["events"]
    assert events[0]["kind"] == "run_created"


def test_deleting_cancels_active_runs_and_finishes_once_they_are_terminal(api: Api) -> None:
    api.apply(HELLO)
    run_id = api.trigger("hello")
    response = api.http.delete("/api/v2/definitions/hello")
    assert response.status_code == 202
    deletion = response.json()
    assert deletion["lifecycle"] == "deleting"
    assert deletion["cancelling_runs"] == [run_id]
    assert deletion["purge"] is False
    # With nothing running, the cancel took effect at once: the run waits for the scheduler
    # to see every instance stopped.
    run = api.run(run_id)
    assert run["execution_state"] == "CANCELLING"
    assert run["instances"][0]["state"] == "CANCELLED"
    _settle_cancelled_run(api, run_id)
    assert definitions.advance_deletions(api.platform, executors=None) == 1
    assert api.http.get("/api/v2/definitions/hello").json()["lifecycle"] == "deleted"
    kinds = [e["kind"] for e in api.http.get("/api/v2/definitions/hello/events").json()["events"]]
    assert kinds == ["definition_applied", "definition_deleting", "definition_deleted"]
    # The purge is deferred to the retention window by default: a scheduler's pass now
    # removes nothing.
    assert definitions.advance_deletions(api.platform, executors={}) == 0


def test_purge_asked_for_goes_on_to_purging_once_the_runs_stopped(api: Api) -> None:
    api.apply(HELLO)
    run_id = api.trigger("hello")
    response = api.http.delete("/api/v2/definitions/hello", params={"purge": "true"})
    assert response.status_code == 202
    assert (response.json()["lifecycle"], response.json()["purge"]) == ("deleting", True)
    _settle_cancelled_run(api, run_id)
    # The API serves no executor: it takes the definition to purging, a scheduler ends it.
    assert definitions.advance_deletions(api.platform, executors=None) == 2
    assert api.http.get("/api/v2/definitions/hello").json()["lifecycle"] == "purging"
    assert definitions.advance_deletions(api.platform, executors={}) == 1
    assert api.http.get("/api/v2/definitions/hello").json()["lifecycle"] == "purged"
    kinds = [e["kind"] for e in api.http.get("/api/v2/definitions/hello/events").json()["events"]]
    assert kinds[-2:] == ["definition_purging", "definition_purged"]
    again = api.http.delete("/api/v2/definitions/hello", params={"purge": "true"})
    assert (again.status_code, again.json()["lifecycle"]) == (202, "purged")


def _settle_cancelled_run(api: Api, run_id: str) -> None:
    """What the scheduler's tick does for a CANCELLING run whose instances all stopped."""
    from veritask.core.states import RunExecutionState
    from veritask.ledger import run_store

    with api.platform.engine.begin() as connection:
        version, state = run_store.run_version(connection, run_id)
        assert state is RunExecutionState.CANCELLING
        run_store.set_execution_state(
            connection,
            run_id=run_id,
            expected_version=version,
            state=RunExecutionState.CANCELLED,
            reason="cancelled; every instance stopped",
            previous=state,
            actor="scheduler",
            event_id="settle-" + run_id,
            now=api.platform.now(),
            evidence={"by": "the test"},
        )
