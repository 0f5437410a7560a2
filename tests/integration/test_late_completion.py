"""Late completion evidence that changes a finished instance: the change stands, what was
decided on the old state stays, and an alert names each of those decisions."""

from __future__ import annotations

import uuid
from typing import Any

from tests.integration.conftest import (
    PIPELINE,
    Api,
    completed,
    now,
    open_attempt,
    report,
    started,
)
from tests.unit.test_phrases import unread
from veritask.core import decide, new_events
from veritask.core.events import EventKind
from veritask.core.states import EngineState, InstanceState, RunExecutionState
from veritask.ledger import run_store
from veritask.scheduling import intake

NO_RETRY = PIPELINE.replace('"echo transform"', '"echo transform", retry: {max_retries: 0}')


def _failed_by_the_engine(api: Api) -> tuple[str, dict[str, str], str, int]:
    """extract SUCCESS; transform FAILED on the engine's exit record while its worker's own
    completion is still on its way; (run, ids, transform's token, its attempt)."""
    api.apply(NO_RETRY)
    run_id = api.trigger("pipeline")
    ids = api.instance_ids(run_id)
    token = "token-" + uuid.uuid4().hex
    attempt_no = open_attempt(api.platform, ids["extract"], token)
    report(api, started(ids["extract"], attempt_no, token), token)
    report(api, completed(ids["extract"], attempt_no, token, seq=2), token)
    token = "token-" + uuid.uuid4().hex
    attempt_no = open_attempt(api.platform, ids["transform"], token)
    report(api, started(ids["transform"], attempt_no, token), token)
    exit_record = decide.Observation(
        EngineState.FAILED, "exit_record", now(), exit_code=137, error_category="killed"
    )
    failed = api.platform.ledger.apply(
        new_events.engine_observed(
            event_id=str(uuid.uuid4()),
            instance_id=ids["transform"],
            attempt_no=attempt_no,
            event_time=now(),
            observation=exit_record,
        )
    )
    assert failed.state is InstanceState.FAILED
    return run_id, ids, token, attempt_no


def _decide_on_the_failure(api: Api, run_id: str, ids: dict[str, str]) -> None:
    """What the scheduler does next: load is UPSTREAM_FAILED, the run ends FAILED."""
    applied = api.platform.ledger.apply(
        new_events.trigger_rule_decided(
            EventKind.UPSTREAM_FAILED,
            event_id=str(uuid.uuid4()),
            instance_id=ids["load"],
            event_time=now(),
            rule="all_success",
            upstream={"transform": InstanceState.FAILED},
        )
    )
    assert applied.state is InstanceState.UPSTREAM_FAILED
    with api.platform.engine.begin() as connection:
        version, state = run_store.run_version(connection, run_id)
        run_store.set_execution_state(
            connection,
            run_id=run_id,
            expected_version=version,
            state=RunExecutionState.FAILED,
            reason="leaf load failed",
            previous=state,
            actor="scheduler",
            event_id=str(uuid.uuid4()),
            now=now(),
            evidence={"by": "the test"},
        )


def _alerts(api: Api, category: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = api.http.get(
        "/api/v2/alerts", params={"category": category}
    ).json()["items"]
    return found


def test_a_late_success_after_decisions_on_the_failure_alerts_and_undoes_nothing(
    api: Api,
) -> None:
    run_id, ids, token, attempt_no = _failed_by_the_engine(api)
    _decide_on_the_failure(api, run_id, ids)

    late = report(api, completed(ids["transform"], attempt_no, token, seq=2), token)

    assert late.json()["outcome"] == "conflict"
    assert api.http.get(f"/api/v2/instances/{ids['transform']}").json()["state"] == "SUCCESS"
    # What was decided on FAILED stays as it was: undoing it is the operator's call.
    assert api.http.get(f"/api/v2/instances/{ids['load']}").json()["state"] == "UPSTREAM_FAILED"
    assert api.run(run_id)["execution_state"] == "FAILED"
    [alert] = _alerts(api, "reconciliation")
    assert alert["message"] == (
        f"late completion evidence of attempt {attempt_no} changed the instance from FAILED "
        "to SUCCESS; decided on the old state and left as it is: downstream task load is "
        "UPSTREAM_FAILED; the run ended FAILED; an operator may clear them to decide again"
    )
    assert unread(alert["message"]) == []
    assert (alert["instance_id"], alert["attempt_no"]) == (ids["transform"], attempt_no)
    assert alert["evidence"]["downstream"] == {
        ids["load"]: {"task": "load", "state": "UPSTREAM_FAILED"}
    }
    assert (alert["evidence"]["previous_state"], alert["evidence"]["state"]) == (
        "FAILED",
        "SUCCESS",
    )
    # The disagreement itself is alerted too, as for any conflict.
    assert len(_alerts(api, "platform")) == 1


def test_the_alert_names_only_what_was_decided_on_the_old_state(api: Api) -> None:
    run_id, ids, token, attempt_no = _failed_by_the_engine(api)
    applied = api.platform.ledger.apply(
        new_events.trigger_rule_decided(
            EventKind.UPSTREAM_FAILED,
            event_id=str(uuid.uuid4()),
            instance_id=ids["load"],
            event_time=now(),
            rule="all_success",
            upstream={"transform": InstanceState.FAILED},
        )
    )
    assert applied.state is InstanceState.UPSTREAM_FAILED

    report(api, completed(ids["transform"], attempt_no, token, seq=2), token)

    # The run has not ended yet: the scheduler settles it on the new state, not named.
    assert api.run(run_id)["execution_state"] == "RUNNING"
    [alert] = _alerts(api, "reconciliation")
    assert (
        "left as it is: downstream task load is UPSTREAM_FAILED; an operator" in (alert["message"])
    )
    assert alert["evidence"]["execution_state"] == "RUNNING"


def test_the_outbox_path_alerts_the_same_through_the_batch(api: Api) -> None:
    # The scheduler's collector records outbox reports with apply_batch, then heeds each
    # verdict: the same alert as over HTTP.
    run_id, ids, token, attempt_no = _failed_by_the_engine(api)
    _decide_on_the_failure(api, run_id, ids)
    event = intake.to_event(completed(ids["transform"], attempt_no, token, seq=2))

    [applied] = api.platform.ledger.apply_batch([event])
    intake.heed_verdict(api.platform.ledger, event, applied)

    assert applied.previous_state is InstanceState.FAILED
    [alert] = _alerts(api, "reconciliation")
    assert "downstream task load is UPSTREAM_FAILED; the run ended FAILED" in alert["message"]
