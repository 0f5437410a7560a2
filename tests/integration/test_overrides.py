"""Overrides: operator, reason and scope recorded; no fact erased; 409 while an attempt runs."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.integration.conftest import (
    HELLO,
    PIPELINE,
    Api,
    completed,
    end_run,
    open_attempt,
    report,
    started,
)
from veritask.core import new_events
from veritask.core.events import OverrideScope
from veritask.core.states import InstanceState, PublicationState, RunExecutionState
from veritask.ledger import run_store
from veritask.services import overrides
from veritask.services.platform import Platform
from veritask.services.tokens import TokenRole

NO_RETRY = HELLO.replace("    run: echo hello", "    run: echo hello\n    retry: {max_retries: 0}")


def _failed_run(api: Api) -> tuple[str, str]:
    """A run whose only instance failed, and that the scheduler marked FAILED."""
    api.apply(NO_RETRY)
    run_id = api.trigger("hello")
    instance_id = api.instance_ids(run_id)["greet"]
    token = "token-" + uuid.uuid4().hex
    attempt_no = open_attempt(api.platform, instance_id, token)
    report(api, started(instance_id, attempt_no, token), token)
    report(api, completed(instance_id, attempt_no, token, seq=2, exit_code=3), token)
    end_run(api.platform, run_id, RunExecutionState.FAILED, "a leaf failed")
    return run_id, instance_id


def test_an_override_sets_the_state_keeps_the_facts_and_settles_the_run(api: Api) -> None:
    run_id, instance_id = _failed_run(api)
    assert api.http.get(f"/api/v2/instances/{instance_id}").json()["state"] == "FAILED"
    response = api.http.post(
        f"/api/v2/instances/{instance_id}/override",
        json={"state": "SUCCESS", "reason": "verified by hand", "scope": "instance"},
    )
    assert response.status_code == 200
    assert response.json() == {
        "run_id": run_id,
        "to_state": "SUCCESS",
        "scope": "instance",
        "instances": [instance_id],
        "execution_state": "SUCCESS",
    }
    shown = api.http.get(f"/api/v2/instances/{instance_id}").json()
    assert shown["state"] == "SUCCESS"
    assert shown["overridden"] is True
    assert "overridden to SUCCESS by operator:admin (verified by hand)" in shown["reason"]
    # The attempt's own record is untouched: it failed, and that stays a fact.
    assert shown["attempts"][0]["state"] == "FAILED"
    assert shown["attempts"][0]["exit_code"] == 3
    [override] = [e for e in shown["events"] if e["kind"] == "override"]
    assert override["actor"] == "operator:admin"
    assert override["evidence"]["reason"] == "verified by hand"
    assert override["evidence"]["scope"] == "instance"
    run = api.run(run_id)
    assert run["execution_state"] == "SUCCESS"
    assert "override" in str(run["execution_reason"])


def test_an_override_of_a_running_attempt_is_409_and_records_nothing(api: Api) -> None:
    api.apply(HELLO)
    instance_id = api.instance_ids(api.trigger("hello"))["greet"]
    token = "token-" + uuid.uuid4().hex
    attempt_no = open_attempt(api.platform, instance_id, token)
    report(api, started(instance_id, attempt_no, token), token)
    response = api.http.post(
        f"/api/v2/instances/{instance_id}/override",
        json={"state": "FAILED", "reason": "give up"},
    )
    assert response.status_code == 409
    assert response.json()["current_state"] == "RUNNING"
    assert "stop attempt 1" in response.json()["detail"]
    kinds = [e["kind"] for e in api.http.get(f"/api/v2/instances/{instance_id}").json()["events"]]
    assert "override" not in kinds


def test_downstream_and_run_scopes_reach_the_right_instances(api: Api) -> None:
    api.apply(PIPELINE)
    run_id = api.trigger("pipeline")
    ids = api.instance_ids(run_id)
    response = api.http.post(
        f"/api/v2/instances/{ids['transform']}/override",
        json={"state": "SUCCESS", "reason": "loaded by hand", "scope": "downstream"},
    )
    assert response.status_code == 200
    assert response.json()["instances"] == [ids["transform"], ids["load"]]
    states = {i["task"]: i["state"] for i in api.run(run_id)["instances"]}
    assert states == {"extract": "CREATED", "transform": "SUCCESS", "load": "SUCCESS"}
    everything = api.http.post(
        f"/api/v2/instances/{ids['load']}/override",
        json={"state": "FAILED", "reason": "bad data", "scope": "run"},
    )
    assert everything.status_code == 200
    assert set(everything.json()["instances"]) == set(ids.values())


def test_override_input_is_checked(api: Api) -> None:
    api.apply(HELLO)
    instance_id = api.instance_ids(api.trigger("hello"))["greet"]
    path = f"/api/v2/instances/{instance_id}/override"
    assert api.http.post(path, json={"state": "RUNNING", "reason": "x"}).status_code == 422
    assert api.http.post(path, json={"state": "SUCCESS"}).status_code == 422
    assert api.http.post(path, json={"state": "SUCCESS", "reason": " "}).status_code == 422
    wrong_scope = {"state": "SUCCESS", "reason": "x", "scope": "galaxy"}
    assert api.http.post(path, json=wrong_scope).status_code == 422
    unknown = api.http.post(
        "/api/v2/instances/nope/override", json={"state": "SUCCESS", "reason": "x"}
    )
    assert unknown.status_code == 404
    viewer = api.client_with_role(TokenRole.VIEWER)
    assert viewer.post(path, json={"state": "SUCCESS", "reason": "x"}).status_code == 403


TWO_LEAVES = """\
name: two_leaves
tasks:
  a: {run: "exit 3", retry: {max_retries: 0}}
  b: {run: "exit 3", retry: {max_retries: 0}}
"""


def test_an_override_that_keeps_the_run_failed_still_recomputes_its_reason(api: Api) -> None:
    api.apply(TWO_LEAVES)
    run_id = api.trigger("two_leaves")
    ids = api.instance_ids(run_id)
    for instance_id in ids.values():
        token = "token-" + uuid.uuid4().hex
        attempt_no = open_attempt(api.platform, instance_id, token)
        report(api, started(instance_id, attempt_no, token), token)
        report(api, completed(instance_id, attempt_no, token, seq=2, exit_code=3), token)
    end_run(api.platform, run_id, RunExecutionState.FAILED, "leaves a FAILED, b FAILED")
    response = api.http.post(
        f"/api/v2/instances/{ids['a']}/override",
        json={"state": "SUCCESS", "reason": "a verified by hand", "scope": "instance"},
    )
    assert response.status_code == 200
    assert response.json()["execution_state"] == "FAILED"
    run = api.run(run_id)
    assert run["execution_state"] == "FAILED"
    # The run failed before and still does, but no longer because of ``a``.
    assert "a FAILED" not in run["execution_reason"]
    assert "leaf b failed" in run["execution_reason"]
    assert "override by operator:admin" in run["execution_reason"]
    history = api.http.get(f"/api/v2/runs/{run_id}/events").json()
    moved = [e for e in history["events"] if e["kind"] == "run_state_changed"]
    assert moved[-1]["reason"] == run["execution_reason"]


def test_a_conflict_partway_through_a_downstream_override_applies_none_of_it(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    api.apply(PIPELINE)
    run_id = api.trigger("pipeline")
    ids = api.instance_ids(run_id)
    judged = overrides._refuse_if_any_refuses

    def judge_then_move_the_second(platform: Platform, targets: list[Any], origin: str) -> None:
        # Between judging every target and applying them, another operator moves ``load``.
        judged(platform, targets, origin)
        _another_operator_fails(platform, targets[1])

    monkeypatch.setattr(overrides, "_refuse_if_any_refuses", judge_then_move_the_second)
    response = api.http.post(
        f"/api/v2/instances/{ids['transform']}/override",
        json={"state": "SUCCESS", "reason": "loaded by hand", "scope": "downstream"},
    )
    assert response.status_code == 409
    assert "kept changing" in response.json()["detail"]
    transform = api.http.get(f"/api/v2/instances/{ids['transform']}").json()
    assert transform["state"] == "CREATED"
    assert [e for e in transform["events"] if e["kind"] == "override"] == []
    load = api.http.get(f"/api/v2/instances/{ids['load']}").json()
    assert {e["actor"] for e in load["events"] if e["kind"] == "override"} == {"operator:other"}


def test_a_downstream_override_retried_after_a_conflict_applies_every_instance_once(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    api.apply(PIPELINE)
    run_id = api.trigger("pipeline")
    ids = api.instance_ids(run_id)
    judged = overrides._refuse_if_any_refuses
    rounds: list[int] = []

    def move_the_second_once(platform: Platform, targets: list[Any], origin: str) -> None:
        judged(platform, targets, origin)
        rounds.append(len(rounds))
        if len(rounds) == 1:
            _another_operator_fails(platform, targets[1])

    monkeypatch.setattr(overrides, "_refuse_if_any_refuses", move_the_second_once)
    response = api.http.post(
        f"/api/v2/instances/{ids['transform']}/override",
        json={"state": "SUCCESS", "reason": "loaded by hand", "scope": "downstream"},
    )
    assert response.status_code == 200
    assert len(rounds) == 2
    for task in ("transform", "load"):
        shown = api.http.get(f"/api/v2/instances/{ids[task]}").json()
        assert shown["state"] == "SUCCESS"
        mine = [e for e in shown["events"] if e["actor"] == "operator:admin"]
        assert [e["kind"] for e in mine] == ["override"]


PUBLISHING = """\
name: publishing
tasks:
  greet: {run: "true"}
publish:
  commit: {run: "true"}
"""


def test_a_publication_that_starts_while_an_override_is_judged_refuses_it(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    api.apply(PUBLISHING)
    run_id = api.trigger("publishing")
    instance_id = api.instance_ids(run_id)["greet"]
    token = "token-" + uuid.uuid4().hex
    attempt_no = open_attempt(api.platform, instance_id, token)
    report(api, started(instance_id, attempt_no, token), token)
    report(api, completed(instance_id, attempt_no, token, seq=2), token)
    end_run(api.platform, run_id, RunExecutionState.SUCCESS, "every leaf succeeded")
    judged = overrides._refuse_if_any_refuses

    def judge_then_publish(platform: Platform, targets: list[Any], origin: str) -> None:
        # The scheduler opens the commit between the judging and the applying.
        judged(platform, targets, origin)
        with platform.engine.begin() as connection:
            version, _ = run_store.run_version(connection, run_id)
            run_store.set_publication_state(
                connection,
                run_id=run_id,
                expected_version=version,
                state=PublicationState.PUBLISHING,
                reason="commit running",
                previous=PublicationState.PENDING,
                actor="scheduler",
                event_id=str(uuid.uuid4()),
                now=platform.now(),
                evidence={"by": "the test"},
            )

    monkeypatch.setattr(overrides, "_refuse_if_any_refuses", judge_then_publish)
    response = api.http.post(
        f"/api/v2/instances/{instance_id}/override",
        json={"state": "FAILED", "reason": "bad data", "scope": "run"},
    )
    assert response.status_code == 409, response.text
    assert response.json()["current_state"] == "PUBLISHING"
    assert "publication has started" in response.json()["detail"]
    shown = api.http.get(f"/api/v2/instances/{instance_id}").json()
    assert shown["state"] == "SUCCESS"
    assert [e for e in shown["events"] if e["kind"] == "override"] == []
    run = api.run(run_id)
    assert (run["execution_state"], run["publication_state"]) == ("SUCCESS", "PUBLISHING")


def _another_operator_fails(platform: Platform, target: Any) -> None:
    """Another operator's override lands on ``target`` between judging and applying."""
    platform.ledger.apply(
        new_events.override(
            event_id=str(uuid.uuid4()),
            instance_id=target.instance_id,
            attempt_no=target.snapshot.epoch,
            event_time=platform.now(),
            operator="operator:other",
            to_state=InstanceState.FAILED,
            reason="moved meanwhile",
            scope=OverrideScope.INSTANCE,
            origin_instance=target.instance_id,
        )
    )
