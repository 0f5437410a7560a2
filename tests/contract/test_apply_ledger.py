"""``Ledger.apply`` on SQLite and PostgreSQL: record once, fold, compare-and-set, classify."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from veritask.core import judge
from veritask.core.events import Event, EventKind
from veritask.core.fold import fold
from veritask.core.jsontypes import JSONObject
from veritask.core.judge import Outcome
from veritask.core.policy import RetryPolicy, TaskPolicy
from veritask.core.states import (
    AttemptState,
    InstanceState,
    PublicationState,
    RunExecutionState,
    TriggerKind,
)
from veritask.ledger import definitions, runs, schema
from veritask.ledger.ledger import Ledger, StaleDecision

T0 = datetime(2026, 5, 1, 8, 0, tzinfo=UTC)
POLICY = TaskPolicy(retry=RetryPolicy(max_retries=1, delay=timedelta(seconds=5)))
_ids = itertools.count(1)


def new_id(prefix: str = "ev") -> str:
    return f"{prefix}-{next(_ids):06d}"


def make_run(engine: Engine, key: str = "daily/2026-05-01") -> str:
    with engine.begin() as connection:
        definition_id, version, _ = definitions.save_definition_version(
            connection,
            name="daily",
            spec={"name": "daily", "tasks": {"extract": {"run": "true"}}},
            source="name: daily\n",
            content_hash="h1",
            now=T0,
        )
        run_id, _ = runs.create_run(
            connection,
            idempotency_key=key,
            definition_id=definition_id,
            definition_version=version,
            trigger_kind=TriggerKind.MANUAL,
            execution_state=RunExecutionState.RUNNING,
            publication_state=PublicationState.NOT_REQUIRED,
            created_at=T0,
        )
    return run_id


def make_instance(ledger: Ledger, task_key: str = "extract", policy: TaskPolicy = POLICY) -> str:
    run_id = make_run(ledger.engine)
    instance_id, created = ledger.create_instance(
        run_id=run_id, task_key=task_key, policy=policy, event_id=new_id()
    )
    assert created
    return instance_id


def token(instance_id: str, attempt_no: int) -> str:
    return f"tok-{instance_id}-{attempt_no}"


def opened(instance_id: str, attempt_no: int = 1, reason: str = "first", retry: int = 0) -> Event:
    evidence: JSONObject = {
        "token_hash": judge.hash_token(token(instance_id, attempt_no)),
        "reason": reason,
        "retry_index": retry,
        "resubmit_index": 0,
    }
    return Event(
        new_id(), instance_id, attempt_no, EventKind.ATTEMPT_OPENED, "scheduler", T0, evidence
    )


def report(
    instance_id: str,
    kind: EventKind,
    seq: int,
    evidence: JSONObject | None = None,
    attempt_no: int = 1,
    event_id: str | None = None,
) -> Event:
    return Event(
        event_id or new_id(),
        instance_id,
        attempt_no,
        kind,
        "worker",
        T0 + timedelta(seconds=seq),
        evidence or {},
        seq=seq,
        attempt_token=token(instance_id, attempt_no),
    )


def acked(instance_id: str, attempt_no: int = 1) -> Event:
    evidence: JSONObject = {"external_id": f"local:{attempt_no}", "executor": "local"}
    return Event(
        new_id(), instance_id, attempt_no, EventKind.SUBMIT_ACKNOWLEDGED, "executor", T0, evidence
    )


SUCCESS: JSONObject = {"exit_code": 0, "error_category": "none"}
FAILURE: JSONObject = {"exit_code": 2, "error_category": "task_error"}


@pytest.fixture
def ledger(engine: Engine) -> Ledger:
    return Ledger(engine)


def test_a_story_is_recorded_folded_and_projected(ledger: Ledger) -> None:
    instance_id = make_instance(ledger)
    assert ledger.apply(opened(instance_id)).state is InstanceState.SCHEDULED
    assert ledger.apply(acked(instance_id)).state is InstanceState.QUEUED
    assert ledger.apply(report(instance_id, EventKind.STARTED, 1, {"worker": "w:1"})).state is (
        InstanceState.RUNNING
    )
    progress: JSONObject = {"phase": "copy", "done": 5, "total": 10}
    ledger.apply(report(instance_id, EventKind.PROGRESS, 2, progress))
    done = ledger.apply(report(instance_id, EventKind.COMPLETED, 3, SUCCESS))
    assert done.outcome is Outcome.APPLIED
    assert done.state is InstanceState.SUCCESS
    with ledger.engine.connect() as connection:
        row = connection.execute(
            sa.select(schema.task_instances).where(schema.task_instances.c.id == instance_id)
        ).one()
        attempt = connection.execute(
            sa.select(schema.attempts).where(schema.attempts.c.instance_id == instance_id)
        ).one()
        outcomes = connection.execute(
            sa.select(schema.events.c.kind, schema.events.c.from_state, schema.events.c.to_state)
            .where(schema.events.c.instance_id == instance_id)
            .order_by(schema.events.c.position)
        ).all()
    assert row.state == "SUCCESS"
    assert row.version == 6  # instance_created + five events, one compare-and-set each
    assert attempt.state == "SUCCESS"
    assert attempt.external_id == "local:1"
    assert attempt.worker == "w:1"
    assert attempt.exit_code == 0
    assert attempt.progress_done == 5
    assert attempt.lease_expires_at is None
    assert attempt.started_at == T0 + timedelta(seconds=1)
    assert [(k, f, t) for k, f, t in outcomes][-1] == ("completed", "RUNNING", "SUCCESS")


def attempt_row(ledger: Ledger, instance_id: str) -> sa.Row[tuple[object, ...]]:
    with ledger.engine.connect() as connection:
        return connection.execute(
            sa.select(schema.attempts).where(schema.attempts.c.instance_id == instance_id)
        ).one()


@pytest.mark.parametrize("batched", [False, True], ids=["apply", "apply_batch"])
def test_a_heartbeat_leaves_the_attempt_row_and_progress_writes_it(
    ledger: Ledger, batched: bool
) -> None:
    def record(event: Event) -> None:
        if batched:
            ledger.apply_batch([event])
        else:
            ledger.apply(event)

    instance_id = make_instance(ledger)
    ledger.apply(opened(instance_id))
    ledger.apply(acked(instance_id))
    record(report(instance_id, EventKind.STARTED, 1, {"worker": "w:1"}))
    started = attempt_row(ledger, instance_id)

    record(report(instance_id, EventKind.HEARTBEAT, 2))
    # Only the liveness moved (the last report, so the lease): the row is not written for it.
    assert attempt_row(ledger, instance_id) == started
    snapshot = ledger.snapshot(instance_id)
    assert snapshot is not None
    assert snapshot[0].attempts[-1].last_report_at == T0 + timedelta(seconds=2)

    record(report(instance_id, EventKind.PROGRESS, 3, {"phase": "copy", "done": 1, "total": 2}))
    progressed = attempt_row(ledger, instance_id)
    assert (progressed.progress_phase, progressed.progress_done) == ("copy", 1)
    # Written with the progress, the row's liveness caught up with the last report.
    assert progressed.last_heartbeat_at == T0 + timedelta(seconds=3)


def test_the_snapshot_equals_the_pure_fold_of_the_recorded_events(ledger: Ledger) -> None:
    instance_id = make_instance(ledger)
    ledger.apply(opened(instance_id))
    ledger.apply(report(instance_id, EventKind.COMPLETED, 2, FAILURE))
    ledger.apply(report(instance_id, EventKind.STARTED, 1, {"worker": "w"}))
    stored = ledger.snapshot(instance_id)
    assert stored is not None
    snapshot, _version = stored
    assert snapshot.state is InstanceState.UP_FOR_RETRY
    assert snapshot == fold(instance_id, ledger.recorded_events(instance_id), POLICY)


def test_the_instance_row_keeps_the_snapshots_reason_beside_its_state(ledger: Ledger) -> None:
    instance_id = make_instance(ledger)
    t = schema.task_instances.c
    reasons = []
    for event in (opened(instance_id), report(instance_id, EventKind.COMPLETED, 2, FAILURE)):
        ledger.apply(event)
        with ledger.engine.connect() as connection:
            row = connection.execute(sa.select(t.state, t.reason).where(t.id == instance_id)).one()
        stored = ledger.snapshot(instance_id)
        assert stored is not None
        assert (row.state, row.reason) == (stored[0].state.value, stored[0].reason)
        reasons.append(row.reason)
    assert reasons[0] != reasons[1]


def test_a_duplicate_returns_the_original_outcome_and_changes_nothing(ledger: Ledger) -> None:
    instance_id = make_instance(ledger)
    ledger.apply(opened(instance_id))
    completion = report(instance_id, EventKind.COMPLETED, 1, SUCCESS)
    first = ledger.apply(completion)
    again = ledger.apply(completion)
    assert again.outcome is Outcome.DUPLICATE
    assert again.original_outcome is Outcome.APPLIED
    assert again.version == first.version
    assert again.reason == first.reason
    ids = [e.event_id for e in ledger.recorded_events(instance_id)]
    assert ids.count(completion.event_id) == 1


def test_a_reused_id_with_other_content_is_rejected_and_kept_for_audit(ledger: Ledger) -> None:
    instance_id = make_instance(ledger)
    ledger.apply(opened(instance_id))
    original = report(instance_id, EventKind.HEARTBEAT, 1)
    ledger.apply(original)
    forged = report(instance_id, EventKind.COMPLETED, 2, SUCCESS, event_id=original.event_id)
    result = ledger.apply(forged)
    assert result.outcome is Outcome.REJECTED
    assert "event_id" in result.reason
    with ledger.engine.connect() as connection:
        rejected = connection.execute(sa.select(schema.rejected_events)).all()
    assert [r.event_id for r in rejected] == [original.event_id]
    assert "attempt_token" not in str(rejected[0].payload)


def test_a_bad_token_is_rejected_and_not_folded(ledger: Ledger) -> None:
    instance_id = make_instance(ledger)
    ledger.apply(opened(instance_id))
    forged = Event(
        new_id(),
        instance_id,
        1,
        EventKind.STARTED,
        "worker",
        T0,
        {"worker": "x"},
        1,
        attempt_token="guess",
    )
    result = ledger.apply(forged)
    assert result.outcome is Outcome.REJECTED
    assert result.reason.startswith("attempt_token")
    assert result.state is InstanceState.SCHEDULED


def test_an_old_attempts_late_success_is_stale(ledger: Ledger) -> None:
    instance_id = make_instance(ledger)
    ledger.apply(opened(instance_id))
    ledger.apply(report(instance_id, EventKind.STARTED, 1, {"worker": "w"}))
    ledger.apply(report(instance_id, EventKind.COMPLETED, 2, FAILURE))
    ledger.apply(opened(instance_id, 2, reason="retry", retry=1))
    late = ledger.apply(report(instance_id, EventKind.COMPLETED, 3, SUCCESS))
    assert late.outcome is Outcome.STALE
    assert late.state is InstanceState.SCHEDULED
    with ledger.engine.connect() as connection:
        outcome = connection.execute(
            sa.select(schema.events.c.outcome).where(schema.events.c.event_id == late.event_id)
        ).scalar_one()
    assert outcome == "stale"


def test_a_decision_on_an_old_version_is_refused_and_not_recorded(ledger: Ledger) -> None:
    instance_id = make_instance(ledger)
    ledger.apply(opened(instance_id))
    basis = ledger.snapshot(instance_id)
    assert basis is not None
    snapshot, version = basis
    ledger.apply(acked(instance_id))  # a fact moves the instance first
    cancel = Event(
        new_id(),
        instance_id,
        1,
        EventKind.CANCEL_REQUESTED,
        "operator:ann",
        T0,
        {"reason": "typo in the date", "nothing_running": False},
    )
    with pytest.raises(StaleDecision):
        ledger.apply(cancel, expected_version=version)
    assert cancel.event_id not in {e.event_id for e in ledger.recorded_events(instance_id)}
    assert snapshot.state is InstanceState.SCHEDULED


def test_an_event_for_an_unknown_instance_is_rejected(ledger: Ledger) -> None:
    ghost = report("no-such-instance", EventKind.HEARTBEAT, 1)
    assert ledger.apply(ghost).outcome is Outcome.REJECTED


def test_creating_an_instance_twice_records_one_creation(ledger: Ledger) -> None:
    run_id = make_run(ledger.engine)
    first = ledger.create_instance(run_id=run_id, task_key="t", policy=POLICY, event_id=new_id())
    second = ledger.create_instance(run_id=run_id, task_key="t", policy=POLICY, event_id=new_id())
    assert first[0] == second[0]
    assert (first[1], second[1]) == (True, False)
    kinds = [e.kind for e in ledger.recorded_events(first[0])]
    assert kinds == [EventKind.INSTANCE_CREATED]


def test_the_batch_path_gives_what_one_by_one_gives(engine: Engine) -> None:
    one_by_one, batched = Ledger(engine), Ledger(engine)
    a = make_instance(one_by_one, "a")
    b = make_instance(batched, "b")
    stories = {}
    for instance_id in (a, b):
        stories[instance_id] = [
            opened(instance_id),
            acked(instance_id),
            report(instance_id, EventKind.STARTED, 1, {"worker": "w"}),
            report(instance_id, EventKind.HEARTBEAT, 2),
            report(instance_id, EventKind.COMPLETED, 3, SUCCESS),
        ]
    for event in stories[a]:
        one_by_one.apply(event)
    results = batched.apply_batch([*stories[b], stories[b][-1]])
    assert [r.outcome for r in results][-1] is Outcome.DUPLICATE
    sa_, sb = one_by_one.snapshot(a), batched.snapshot(b)
    assert sa_ is not None
    assert sb is not None
    assert sa_[0].state is sb[0].state is InstanceState.SUCCESS
    assert sb[1] == 2  # created, then one compare-and-set for the whole batch
    current = sb[0].current
    assert current is not None
    assert current.state is AttemptState.SUCCESS
