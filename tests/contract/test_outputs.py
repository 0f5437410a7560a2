"""Only the current attempt's output flows downstream; a fenced attempt's stays on its record
(docs/definitions.md, "Outputs"). On SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy.engine import Engine

from tests.contract.test_apply_ledger import T0, acked, make_run, new_id, opened, report
from veritask.core import decide, new_events, outputs
from veritask.core.events import EventKind
from veritask.core.jsontypes import JSONObject, JSONValue
from veritask.core.judge import Outcome, hash_token
from veritask.core.policy import OnUnknown, RetryPolicy, TaskPolicy
from veritask.core.states import AttemptState, InstanceState
from veritask.ledger import dialects, queries
from veritask.ledger.ledger import Ledger
from veritask.services import reading

POLICY = TaskPolicy(retry=RetryPolicy(max_retries=1, delay=timedelta(0)))


@pytest.fixture
def ledger(engine: Engine) -> Ledger:
    return Ledger(engine)


def completed(output: JSONValue) -> JSONObject:
    return {"exit_code": 0, "error_category": "none", "output": output}


def test_a_fenced_attempts_late_output_stays_on_its_record_and_never_flows(
    ledger: Ledger,
) -> None:
    run_id = make_run(ledger.engine)
    instance_id, _ = ledger.create_instance(
        run_id=run_id, task_key="list_files", policy=POLICY, event_id=new_id()
    )
    ledger.apply(opened(instance_id))
    ledger.apply(acked(instance_id))
    ledger.apply(report(instance_id, EventKind.STARTED, 1, {"worker": "w:1"}))
    for event in (
        new_events.lease_expired(
            event_id=new_id(),
            instance_id=instance_id,
            attempt_no=1,
            event_time=T0 + timedelta(minutes=2),
            last_report_seq=1,
            lease_expires_at=T0 + timedelta(minutes=1),
            last_report_at=T0,
            lease_seconds=60,
        ),
        new_events.fenced(
            event_id=new_id(),
            instance_id=instance_id,
            attempt_no=1,
            event_time=T0 + timedelta(minutes=8),
            reason="no evidence",
            on_unknown=OnUnknown.RETRY,
            gathered={},
        ),
    ):
        assert ledger.apply(event).outcome is Outcome.APPLIED
    loaded = ledger.snapshot(instance_id)
    assert loaded is not None
    retry = decide.open_attempt(
        loaded[0],
        token_hash=hash_token(f"tok-{instance_id}-2"),
        now=loaded[0].retry_at or T0,
        event_id=new_id(),
        nonce="n2",
    )
    assert retry is not None, (loaded[0].state, loaded[0].retry_at, loaded[0].reason)
    assert ledger.apply(retry).outcome is Outcome.APPLIED
    # Attempt 1 was only silent: it ends now, with an output of its own, after the fence.
    late = ledger.apply(report(instance_id, EventKind.COMPLETED, 2, completed(["stale"])))
    assert late.outcome is Outcome.STALE
    assert ledger.current_outputs(run_id, ["list_files"]) == {"list_files": None}

    ledger.apply(report(instance_id, EventKind.STARTED, 1, {"worker": "w:2"}, attempt_no=2))
    done = ledger.apply(
        report(instance_id, EventKind.COMPLETED, 2, completed(["fresh"]), attempt_no=2)
    )
    assert done.state is InstanceState.SUCCESS
    assert ledger.current_outputs(run_id, ["list_files", "absent"]) == {"list_files": ["fresh"]}

    with dialects.read_transaction(ledger.engine) as connection:
        row = queries.get_instance(connection, instance_id)
        assert row is not None
        view = reading.instance_view(row, [])
    assert view.output == ["fresh"]
    assert [(a.attempt_no, a.state, a.output) for a in view.attempts] == [
        (1, AttemptState.ABANDONED, ["stale"]),
        (2, AttemptState.SUCCESS, ["fresh"]),
    ]


def test_an_instance_marked_success_by_an_operator_gives_no_output(ledger: Ledger) -> None:
    run_id = make_run(ledger.engine)
    instance_id, _ = ledger.create_instance(
        run_id=run_id, task_key="t", policy=TaskPolicy(), event_id=new_id()
    )
    ledger.apply(opened(instance_id))
    failed: JSONObject = {**completed({"half": True}), "exit_code": 3}
    failed["error_category"] = "task_error"
    assert ledger.apply(report(instance_id, EventKind.COMPLETED, 1, failed)).state is (
        InstanceState.FAILED
    )
    loaded = ledger.snapshot(instance_id)
    assert loaded is not None
    assert outputs.current_output(loaded[0]) is None
    assert outputs.attempt_output(loaded[0].facts.attempt(1)) == {"half": True}
