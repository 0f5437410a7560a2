"""Late completion evidence that changes a finished instance: the change stands, what was
decided on the old state stays, and an alert names each of those decisions."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from tests.integration.conftest import (
    PIPELINE,
    Api,
    completed,
    end_run,
    now,
    open_attempt,
    report,
    started,
)
from tests.pipelines.harness import Platform as Scheduled
from tests.unit.test_phrases import unread
from veritask.core import decide, new_events
from veritask.core.events import EventKind
from veritask.core.states import EngineState, InstanceState, RunExecutionState
from veritask.ledger import active_runs, dialects, run_store
from veritask.scheduling import intake
from veritask.scheduling.advance import TickReport
from veritask.services import doctor, operations

NO_RETRY = PIPELINE.replace('"echo transform"', '"echo transform", retry: {max_retries: 0}')


def _failed_by_the_engine(
    api: Api, definition: str = NO_RETRY, name: str = "pipeline"
) -> tuple[str, dict[str, str], str, int]:
    """extract SUCCESS; transform FAILED on the engine's exit record while its worker's own
    completion is still on its way; (run, ids, transform's token, its attempt)."""
    api.apply(definition)
    run_id = api.trigger(name)
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
    end_run(api.platform, run_id, RunExecutionState.FAILED, "leaf load failed", at=now())


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


TWO_TASKS = """\
name: pair
tasks:
  extract: {run: "echo extract"}
  transform: {run: "echo transform", after: [extract], retry: {max_retries: 0}}
"""


def _pair_ended_on_the_engines_failure(api: Api) -> tuple[str, dict[str, str], str, int]:
    """extract SUCCESS; transform FAILED on the engine's exit record, and the run ended
    FAILED on it while the worker's own exit 0 is still on its way."""
    run_id, ids, token, attempt_no = _failed_by_the_engine(api, TWO_TASKS, "pair")
    end_run(api.platform, run_id, RunExecutionState.FAILED, "leaf transform failed", at=now())
    return run_id, ids, token, attempt_no


def test_a_run_ended_on_an_overruled_failure_follows_its_instances(api: Api) -> None:
    # A conflict, then the worker's real exit 0: the instance is SUCCESS, and so is the run,
    # by a recorded run event naming the late evidence; verify and doctor agree.
    run_id, ids, token, attempt_no = _pair_ended_on_the_engines_failure(api)

    late = completed(ids["transform"], attempt_no, token, seq=2)
    answer = report(api, late, token)

    assert answer.json()["outcome"] == "conflict"
    assert api.http.get(f"/api/v2/instances/{ids['transform']}").json()["state"] == "SUCCESS"
    run = api.run(run_id)
    assert run["execution_state"] == "SUCCESS"
    assert f"late completion evidence (event {late['event_id']})" in run["execution_reason"]
    assert unread(run["execution_reason"]) == []
    history = api.http.get(f"/api/v2/runs/{run_id}/events").json()["events"]
    [moved] = [
        e for e in history if e["kind"] == "run_state_changed" and e["to_state"] == "SUCCESS"
    ]
    assert moved["from_state"] == "FAILED"
    assert moved["evidence"]["late_evidence"] == {
        "event_id": late["event_id"],
        "kind": "completed",
        "instance_id": ids["transform"],
        "task": "transform",
        "attempt_no": attempt_no,
        "previous_state": "FAILED",
        "state": "SUCCESS",
    }
    [alert] = _alerts(api, "reconciliation")
    assert alert["message"] == (
        f"late completion evidence of attempt {attempt_no} changed the instance from FAILED "
        "to SUCCESS; the run followed its instances from FAILED to SUCCESS"
    )
    assert unread(alert["message"]) == []
    verified = operations.verify(api.platform, repair=False, actor="operator:test")
    assert verified.ok, (verified.mismatches, verified.violations)
    assert doctor.runs(api.platform).status is doctor.Status.OK


def test_repair_moves_a_finished_run_its_instances_overruled(api: Api) -> None:
    # The late exit 0 recorded without its run moved (as a ledger written before the rule
    # was): verify names the disagreement, --repair records the run's move, then all agree.
    run_id, ids, token, attempt_no = _pair_ended_on_the_engines_failure(api)
    late = intake.to_event(completed(ids["transform"], attempt_no, token, seq=2))
    assert api.platform.ledger.apply(late).state is InstanceState.SUCCESS
    assert api.run(run_id)["execution_state"] == "FAILED"

    found = operations.verify(api.platform, repair=False, actor="operator:test")
    assert found.violations == [
        f"run {run_id}: its events say FAILED, its instances say SUCCESS "
        "(every leaf succeeded or was skipped)"
    ]
    assert doctor.runs(api.platform).status is doctor.Status.FAIL

    repaired = operations.verify(api.platform, repair=True, actor="operator:test")

    assert repaired.ok, (repaired.mismatches, repaired.violations)
    assert repaired.repaired == 1
    run = api.run(run_id)
    assert run["execution_state"] == "SUCCESS"
    assert "recorded by a repair: the run had ended FAILED" in run["execution_reason"]
    history = api.http.get(f"/api/v2/runs/{run_id}/events").json()["events"]
    [moved] = [e for e in history if e["kind"] == "run_state_changed" and e["actor"] != "scheduler"]
    assert (moved["actor"], moved["from_state"], moved["to_state"]) == (
        "operator:test",
        "FAILED",
        "SUCCESS",
    )
    assert moved["evidence"]["instances"] == {"extract": "SUCCESS", "transform": "SUCCESS"}
    assert doctor.runs(api.platform).status is doctor.Status.OK


def test_a_scheduler_ending_a_run_on_states_read_before_a_late_change_does_not_end_it(
    api: Api, tmp_path: Path
) -> None:
    # The scheduler read transform FAILED; the worker's exit 0 made it SUCCESS before the
    # scheduler recorded the run's end: it must not end the run on what it read, and the
    # next look ends it on what the instances are.
    api.apply(TWO_TASKS)
    run_id = api.trigger("pair")
    ids = api.instance_ids(run_id)
    token = "token-" + uuid.uuid4().hex
    attempt_no = open_attempt(api.platform, ids["extract"], token)
    report(api, started(ids["extract"], attempt_no, token), token)
    report(api, completed(ids["extract"], attempt_no, token, seq=2), token)
    token = "token-" + uuid.uuid4().hex
    attempt_no = open_attempt(api.platform, ids["transform"], token)
    report(api, started(ids["transform"], attempt_no, token), token)
    scheduled = Scheduled(api.platform.engine, tmp_path / "scheduler")
    try:
        advancer = scheduled.scheduler.advancer
        with dialects.read_transaction(api.platform.engine) as connection:
            [run] = [r for r in active_runs.active_runs(connection) if r.id == run_id]
            briefs = run_store.instances_brief(connection, run_id)
        definition = advancer.definitions.get(run.definition_id, run.definition_version)
        read = {b.task_key: InstanceState.SUCCESS for b in briefs}
        read["transform"] = InstanceState.FAILED  # as read before the late exit 0
        report(api, completed(ids["transform"], attempt_no, token, seq=2), token)
        assert api.http.get(f"/api/v2/instances/{ids['transform']}").json()["state"] == "SUCCESS"

        ended = advancer._settle_run(
            run,
            definition,
            advancer.definitions.graph(definition),
            briefs,
            read,
            now(),
            TickReport(),
        )

        assert ended is RunExecutionState.RUNNING
        assert api.run(run_id)["execution_state"] == "RUNNING"
        scheduled.until(lambda: api.run(run_id)["execution_state"] != "RUNNING")
        assert api.run(run_id)["execution_state"] == "SUCCESS"
    finally:
        scheduled.close()
