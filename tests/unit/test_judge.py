"""How ``judge`` classifies each arriving event, and why (docs/outcomes-and-fencing.md).

Every outcome comes with a sentence a person can read. Rejections name the field (or the
state) that made them illegal: that sentence is the contract the API shows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import timedelta

import pytest

from tests.unit.story import T0, Story
from veritask.core import decide, judge, transitions
from veritask.core.events import Event, EventKind, fingerprint
from veritask.core.fold import AttemptView, InstanceSnapshot, derive, empty
from veritask.core.jsontypes import JSONObject
from veritask.core.judge import Outcome, Verdict
from veritask.core.policy import RetryPolicy, TaskPolicy
from veritask.core.states import AttemptState, EngineState, InstanceState

RETRIES = TaskPolicy(retry=RetryPolicy(max_retries=3, delay=timedelta(seconds=10), jitter=0.0))


# -- helpers ----------------------------------------------------------------------------------


def state_of(story: Story) -> InstanceState:
    """The instance's state now (a call, so that type narrowing does not outlive a move)."""
    return story.state


def running(policy: TaskPolicy | None = None) -> Story:
    """An instance whose attempt 1 is opened, acknowledged and started."""
    story = Story(policy)
    story.open()
    story.ack()
    story.start()
    assert state_of(story) is InstanceState.RUNNING
    return story


def lost(policy: TaskPolicy | None = None) -> Story:
    story = Story(policy)
    story.run_until_lost()
    assert state_of(story) is InstanceState.LOST
    return story


def attempt(snapshot: InstanceSnapshot, attempt_no: int) -> AttemptView:
    view = snapshot.attempt(attempt_no)
    assert view is not None, f"attempt {attempt_no} has no view"
    return view


def shown(snapshot: InstanceSnapshot) -> tuple[object, ...]:
    """What a person sees of the instance, without the attempts' own records."""
    current = snapshot.current
    return (
        snapshot.state,
        snapshot.epoch,
        snapshot.retry_at,
        None if current is None else current.state,
    )


def completion(story: Story, attempt_no: int, exit_code: int | None, category: str) -> Event:
    evidence: JSONObject = {"exit_code": exit_code, "error_category": category}
    return story.make(EventKind.COMPLETED, attempt_no, "worker", evidence)


def engine_event(
    story: Story, state: EngineState, source: str, exit_code: int | None = None
) -> Event:
    evidence: JSONObject = {"engine_state": state.value, "source": source, "exit_code": exit_code}
    return story.make(EventKind.ENGINE_OBSERVED, story.epoch, "reconciler", evidence)


def assert_rejected(verdict: Verdict, field: str) -> None:
    assert verdict.outcome is Outcome.REJECTED, verdict.reason
    assert verdict.reason.startswith(f"{field}:") or f"{field}:" in verdict.reason, verdict.reason
    assert not verdict.recorded
    assert verdict.after == verdict.before


# -- applied ----------------------------------------------------------------------------------


def test_an_acknowledgement_is_applied_with_a_sentence_about_the_attempt() -> None:
    story = Story()
    story.open()
    verdict = story.ack()
    assert verdict.outcome is Outcome.APPLIED
    assert verdict.recorded
    assert (verdict.before.state, verdict.after.state) == (
        InstanceState.SCHEDULED,
        InstanceState.QUEUED,
    )
    assert "attempt 1" in verdict.reason
    assert verdict.after.current is not None
    assert verdict.after.current.external_id == "local:1"


def test_a_heartbeat_that_moves_nothing_is_applied_as_a_new_fact() -> None:
    story = running()
    before = attempt(story.snapshot, 1).max_report_seq
    verdict = story.heartbeat()
    assert verdict.outcome is Outcome.APPLIED
    assert verdict.after.state is InstanceState.RUNNING
    assert attempt(verdict.after, 1).max_report_seq == before + 1
    assert "heartbeat" in verdict.reason and "RUNNING" in verdict.reason


# -- duplicate --------------------------------------------------------------------------------


def test_the_same_event_delivered_twice_is_a_duplicate_and_changes_nothing() -> None:
    story = running()
    heartbeat = story.make(EventKind.HEARTBEAT, 1, "worker")
    first = story.record(heartbeat)
    assert first.outcome is Outcome.APPLIED
    # The ledger saw it again later: observed_at differs, the content does not.
    again = dataclasses.replace(heartbeat, observed_at=story.tick(30))
    verdict = story.record(again, known=heartbeat)
    assert verdict.outcome is Outcome.DUPLICATE
    assert not verdict.recorded
    assert verdict.after == verdict.before == first.after
    assert heartbeat.event_id in verdict.reason


def test_the_same_event_id_with_different_content_is_rejected_naming_event_id() -> None:
    story = running()
    heartbeat = story.make(EventKind.HEARTBEAT, 1, "worker")
    story.record(heartbeat)
    reused = dataclasses.replace(
        completion(story, 1, 0, "none"), event_id=heartbeat.event_id, seq=heartbeat.seq
    )
    assert fingerprint(reused) != fingerprint(heartbeat)
    verdict = story.record(reused, known=heartbeat)
    assert_rejected(verdict, "event_id")
    assert heartbeat.event_id in verdict.reason
    assert state_of(story) is InstanceState.RUNNING


# -- stale ------------------------------------------------------------------------------------


def test_a_late_success_of_attempt_1_after_attempt_2_opened_is_stale() -> None:
    story = running(RETRIES)
    late_success = completion(story, 1, 0, "none")  # sent now, delivered much later
    story.record(engine_event(story, EngineState.FAILED, "engine", exit_code=1))
    assert state_of(story) is InstanceState.UP_FOR_RETRY
    story.open()
    story.ack(2)
    before = story.snapshot
    verdict = story.record(late_success)
    assert verdict.outcome is Outcome.STALE, verdict.reason
    assert verdict.recorded
    assert "attempt 1" in verdict.reason and "attempt 2" in verdict.reason
    # The instance follows attempt 2 and does not move.
    assert shown(verdict.after) == shown(before)
    assert verdict.after.state is InstanceState.QUEUED
    # ...but attempt 1's record shows what it really did: the worker's report outranks the
    # engine's description, and the disagreement is visible.
    first = attempt(verdict.after, 1)
    assert first.state is AttemptState.SUCCESS
    assert first.exit_code == 0
    assert first.conflict
    assert attempt(verdict.after, 2) == attempt(before, 2)


def test_a_late_success_of_an_abandoned_attempt_stays_abandoned_with_a_late_note() -> None:
    story = lost(RETRIES)
    late_success = completion(story, 1, 0, "none")
    story.fence("retry")
    assert state_of(story) is InstanceState.UP_FOR_RETRY
    before = story.snapshot
    verdict = story.record(late_success)
    assert verdict.outcome is Outcome.STALE, verdict.reason
    assert "fenced" in verdict.reason
    assert shown(verdict.after) == shown(before)
    first = attempt(verdict.after, 1)
    assert first.state is AttemptState.ABANDONED
    assert len(first.late) == 1
    assert "late" in first.late[0] and late_success.event_id in first.late[0]
    # The next attempt still opens as a retry of an unknown fate.
    opening = judge.next_opening(verdict.after)
    assert opening is not None and opening[0].value == "unknown_retry"


def test_a_late_report_of_an_abandoned_attempt_after_the_next_one_opened_is_stale() -> None:
    story = lost(RETRIES)
    late_heartbeat = story.make(EventKind.HEARTBEAT, 1, "worker")
    late_success = completion(story, 1, 0, "none")
    story.fence("retry")
    story.open()
    story.ack(2)
    story.start(2)
    before = story.snapshot
    for event in (late_heartbeat, late_success):
        verdict = story.record(event)
        assert verdict.outcome is Outcome.STALE, verdict.reason
        assert shown(verdict.after) == shown(before)
    assert attempt(story.snapshot, 1).state is AttemptState.ABANDONED
    assert attempt(story.snapshot, 2) == attempt(before, 2)


# -- conflict ---------------------------------------------------------------------------------


def test_a_worker_success_after_an_engine_failure_is_a_conflict_the_worker_wins() -> None:
    story = running()
    story.record(engine_event(story, EngineState.FAILED, "engine", exit_code=1))
    assert state_of(story) is InstanceState.FAILED
    verdict = story.complete(0)
    assert verdict.outcome is Outcome.CONFLICT
    assert verdict.recorded
    assert verdict.after.state is InstanceState.SUCCESS
    assert "SUCCESS" in verdict.reason and "FAILED" in verdict.reason
    view = attempt(verdict.after, 1)
    assert view.conflict
    assert view.exit_code == 0
    # Both facts are kept.
    facts = verdict.after.facts.attempt(1)
    assert facts is not None and len(facts.completions) == 2


def test_an_engine_failure_after_a_worker_success_is_a_conflict_the_success_stands() -> None:
    story = running()
    story.complete(0)
    verdict = story.record(engine_event(story, EngineState.FAILED, "exit_record", exit_code=1))
    assert verdict.outcome is Outcome.CONFLICT
    assert verdict.after.state is InstanceState.SUCCESS
    assert attempt(verdict.after, 1).conflict


def test_a_second_completion_that_agrees_is_applied_not_a_conflict() -> None:
    story = running()
    story.complete(0)
    verdict = story.record(engine_event(story, EngineState.SUCCEEDED, "exit_record", exit_code=0))
    assert verdict.outcome is Outcome.APPLIED
    assert not attempt(verdict.after, 1).conflict


def _both_orders(story: Story, first: Event, second: Event) -> tuple[Story, Story]:
    """Two copies of the story, each recording the two events in one order."""
    stories = []
    for order in ((first, second), (second, first)):
        copy = Story(story.policy)
        copy.snapshot = story.snapshot
        for event in order:
            copy.record(event)
        stories.append(copy)
    return stories[0], stories[1]


@pytest.mark.parametrize(
    ("stronger", "weaker"),
    [
        ("worker_with_marker", "worker"),
        ("worker", "exit_record"),
        ("exit_record", "engine"),
        ("worker_with_marker", "engine"),
    ],
)
def test_completion_precedence_does_not_depend_on_arrival(stronger: str, weaker: str) -> None:
    story = running()

    def make(rank: str, success: bool) -> Event:
        if rank.startswith("worker"):
            event = completion(story, 1, 0 if success else 1, "none" if success else "task_error")
            if rank == "worker_with_marker":
                evidence = {**event.evidence, "commit_marker": "part=2026-03-01"}
                event = dataclasses.replace(event, evidence=evidence)
            return event
        state = EngineState.SUCCEEDED if success else EngineState.FAILED
        return engine_event(story, state, rank, exit_code=0 if success else 1)

    for strong_says_success in (True, False):
        strong = make(stronger, strong_says_success)
        weak = make(weaker, not strong_says_success)
        want = InstanceState.SUCCESS if strong_says_success else InstanceState.FAILED
        for told in _both_orders(story, strong, weak):
            assert state_of(told) is want, (stronger, weaker, told.snapshot.reason)
            assert attempt(told.snapshot, 1).conflict
            assert told.verdicts[-1].outcome is Outcome.CONFLICT


def test_between_equally_strong_completions_the_lowest_event_id_wins() -> None:
    story = running()
    failed = dataclasses.replace(
        engine_event(story, EngineState.FAILED, "engine", exit_code=1), event_id="ev-a"
    )
    succeeded = dataclasses.replace(
        engine_event(story, EngineState.SUCCEEDED, "engine", exit_code=0), event_id="ev-b"
    )
    for told in _both_orders(story, failed, succeeded):
        assert state_of(told) is InstanceState.FAILED
    swapped_failed = dataclasses.replace(failed, event_id="ev-z")
    for told in _both_orders(story, swapped_failed, succeeded):
        assert state_of(told) is InstanceState.SUCCESS


# -- rejected ---------------------------------------------------------------------------------

Factory = Callable[[Story], Event]


def _worker(kind: EventKind, evidence: JSONObject | None = None) -> Factory:
    return lambda s: s.make(kind, 1, "worker", evidence)


REJECTIONS: list[tuple[str, Factory, str]] = [
    (
        "unknown actor",
        lambda s: s.make(EventKind.HEARTBEAT, 1, "robot"),
        "actor",
    ),
    (
        "a worker may not send lease_expired",
        lambda s: s.make(
            EventKind.LEASE_EXPIRED,
            1,
            "worker",
            {"last_report_seq": 1, "lease_expires_at": T0.isoformat()},
        ),
        "actor",
    ),
    (
        "an executor may not send started",
        lambda s: s.make(EventKind.STARTED, 1, "executor", {"worker": "host-a:1"}),
        "actor",
    ),
    (
        "an operator needs a name",
        lambda s: s.make(
            EventKind.CANCEL_REQUESTED, 1, "operator", {"reason": "r", "nothing_running": False}
        ),
        "actor",
    ),
    (
        "missing evidence key",
        lambda s: s.make(EventKind.SUBMIT_ACKNOWLEDGED, 1, "executor", {"executor": "local"}),
        "evidence.external_id",
    ),
    (
        "a bool where an int is expected",
        lambda s: s.make(
            EventKind.LEASE_EXPIRED,
            1,
            "monitor",
            {"last_report_seq": True, "lease_expires_at": T0.isoformat()},
        ),
        "evidence.last_report_seq",
    ),
    (
        "a string where an int is expected",
        _worker(EventKind.COMPLETED, {"exit_code": "0", "error_category": "none"}),
        "evidence.exit_code",
    ),
    (
        "a naive event_time",
        lambda s: dataclasses.replace(
            s.make(EventKind.HEARTBEAT, 1, "worker"), event_time=T0.replace(tzinfo=None)
        ),
        "event_time",
    ),
    (
        "a worker report without seq",
        lambda s: dataclasses.replace(s.make(EventKind.HEARTBEAT, 1, "worker"), seq=None),
        "seq",
    ),
    (
        "a worker report with seq 0",
        lambda s: dataclasses.replace(s.make(EventKind.HEARTBEAT, 1, "worker"), seq=0),
        "seq",
    ),
    (
        "a worker report without a token",
        lambda s: dataclasses.replace(s.make(EventKind.HEARTBEAT, 1, "worker"), attempt_token=None),
        "attempt_token",
    ),
    (
        "a bad token",
        lambda s: s.make(EventKind.HEARTBEAT, 1, "worker", token="guessed"),
        "attempt_token",
    ),
    (
        "another attempt's token",
        lambda s: s.make(EventKind.HEARTBEAT, 1, "worker", token=s.token(2)),
        "attempt_token",
    ),
    (
        "an attempt never opened",
        lambda s: s.make(EventKind.HEARTBEAT, 2, "worker"),
        "attempt_no",
    ),
    (
        "another instance's event",
        lambda s: dataclasses.replace(s.make(EventKind.HEARTBEAT, 1, "worker"), instance_id="x"),
        "instance_id",
    ),
    (
        "an empty event id",
        lambda s: dataclasses.replace(s.make(EventKind.HEARTBEAT, 1, "worker"), event_id=""),
        "event_id",
    ),
    (
        "an unknown error category",
        _worker(EventKind.COMPLETED, {"exit_code": 1, "error_category": "oops"}),
        "evidence.error_category",
    ),
    (
        "a cancel without a reason",
        lambda s: s.make(
            EventKind.CANCEL_REQUESTED,
            1,
            "operator:alice",
            {"reason": "  ", "nothing_running": False},
        ),
        "evidence.reason",
    ),
]


@pytest.mark.parametrize(
    ("factory", "field"),
    [pytest.param(f, field, id=name) for name, f, field in REJECTIONS],
)
def test_a_malformed_or_unauthorised_event_is_rejected_naming_the_field(
    factory: Factory, field: str
) -> None:
    story = running()
    before = story.snapshot
    verdict = story.record(factory(story))
    assert_rejected(verdict, field)
    assert story.snapshot == before


def test_an_actor_not_allowed_for_the_kind_is_named_with_the_kind() -> None:
    story = running()
    evidence: JSONObject = {"last_report_seq": 1, "lease_expires_at": T0.isoformat()}
    verdict = story.send(EventKind.LEASE_EXPIRED, 1, "worker", evidence)
    assert_rejected(verdict, "actor")
    assert "worker" in verdict.reason and "lease_expired" in verdict.reason
    assert "monitor" in verdict.reason  # who may send it


def test_an_event_for_an_instance_never_created_is_rejected() -> None:
    policy = TaskPolicy()
    snapshot = derive(empty("ghost"), policy)
    opened = Event(
        "ev-1",
        "ghost",
        1,
        EventKind.ATTEMPT_OPENED,
        "scheduler",
        T0,
        {"token_hash": "h", "reason": "first", "retry_index": 0, "resubmit_index": 0},
        observed_at=T0,
    )
    verdict = judge.judge(snapshot, opened, policy)
    assert_rejected(verdict, "instance_id")
    assert "ghost" in verdict.reason


def test_creating_an_instance_twice_is_rejected() -> None:
    story = Story()
    verdict = story.send(EventKind.INSTANCE_CREATED, 0, "scheduler", {"task_key": "extract"})
    assert_rejected(verdict, "instance_id")


# -- rejected: decisions that no snapshot justifies -------------------------------------------


def _lease(story: Story, seen: int) -> Verdict:
    evidence: JSONObject = {"last_report_seq": seen, "lease_expires_at": T0.isoformat()}
    return story.send(EventKind.LEASE_EXPIRED, story.epoch, "monitor", evidence)


def test_a_lease_cannot_expire_on_a_queued_attempt() -> None:
    story = Story()
    story.open()
    story.ack()
    verdict = _lease(story, 0)
    assert verdict.outcome is Outcome.REJECTED
    assert "QUEUED" in verdict.reason
    assert state_of(story) is InstanceState.QUEUED


def test_a_lease_decision_that_did_not_see_the_last_report_is_rejected() -> None:
    story = running()
    story.heartbeat()  # seq 2
    verdict = _lease(story, 1)
    assert verdict.outcome is Outcome.REJECTED
    assert "stale" in verdict.reason
    assert state_of(story) is InstanceState.RUNNING
    assert _lease(story, 2).outcome is Outcome.APPLIED
    assert state_of(story) is InstanceState.LOST


def _opening(story: Story, attempt_no: int, reason: str, retry: int, resubmit: int) -> Verdict:
    evidence: JSONObject = {
        "token_hash": judge.hash_token(story.token(attempt_no)),
        "reason": reason,
        "retry_index": retry,
        "resubmit_index": resubmit,
    }
    return story.send(EventKind.ATTEMPT_OPENED, attempt_no, "scheduler", evidence)


def test_an_attempt_opened_with_the_wrong_number_is_rejected_naming_attempt_no() -> None:
    story = running(RETRIES)
    story.complete(1, "task_error")
    assert state_of(story) is InstanceState.UP_FOR_RETRY
    assert_rejected(_opening(story, 3, "retry", 1, 0), "attempt_no")
    assert_rejected(_opening(story, 1, "retry", 1, 0), "attempt_no")
    assert _opening(story, 2, "retry", 1, 0).outcome is Outcome.APPLIED


def test_a_first_attempt_cannot_open_twice() -> None:
    story = Story()
    story.open()
    verdict = _opening(story, 2, "first", 0, 0)
    assert verdict.outcome is Outcome.REJECTED
    assert story.epoch == 1


def test_a_retry_whose_reason_does_not_follow_the_previous_end_is_rejected() -> None:
    story = Story()
    story.open()
    story.ack()
    story.never_received()
    assert state_of(story) is InstanceState.UP_FOR_RETRY
    # The engine never had attempt 1: the next one is a resubmit, not a retry.
    assert_rejected(_opening(story, 2, "retry", 1, 0), "evidence.reason")
    assert_rejected(_opening(story, 2, "resubmit", 1, 0), "evidence.retry_index/resubmit_index")
    assert _opening(story, 2, "resubmit", 0, 1).outcome is Outcome.APPLIED


def test_a_retry_with_the_wrong_counters_is_rejected() -> None:
    story = running(RETRIES)
    story.complete(1, "task_error")
    assert_rejected(_opening(story, 2, "retry", 0, 0), "evidence.retry_index/resubmit_index")
    assert_rejected(_opening(story, 2, "retry", 2, 0), "evidence.retry_index/resubmit_index")


def test_a_retry_cannot_open_while_the_attempt_runs() -> None:
    story = running(RETRIES)
    verdict = _opening(story, 2, "retry", 1, 0)
    assert verdict.outcome is Outcome.REJECTED
    assert "RUNNING" in verdict.reason


def test_an_override_while_running_is_rejected() -> None:
    story = running()
    verdict = story.override("SUCCESS")
    assert verdict.outcome is Outcome.REJECTED
    assert "RUNNING" in verdict.reason
    assert state_of(story) is InstanceState.RUNNING
    assert story.snapshot.override is None


def test_an_override_of_a_lost_attempt_is_allowed_and_keeps_the_facts() -> None:
    story = lost()
    verdict = story.override("FAILED", "the host burned down")
    assert verdict.outcome is Outcome.APPLIED
    assert state_of(story) is InstanceState.FAILED
    assert attempt(story.snapshot, 1).state is AttemptState.LOST
    assert "operator:alice" in story.snapshot.reason


@pytest.mark.parametrize("attempt_no", [0, 1])
def test_a_trigger_rule_cannot_skip_an_instance_after_an_attempt_opened(attempt_no: int) -> None:
    story = Story()
    story.open()
    evidence: JSONObject = {"rule": "all_success"}
    verdict = story.send(EventKind.SKIPPED, attempt_no, "scheduler", evidence)
    assert verdict.outcome is Outcome.REJECTED
    assert state_of(story) is InstanceState.SCHEDULED


def test_a_cancel_of_a_finished_instance_is_refused_before_the_ledger() -> None:
    story = running()
    story.complete(0)
    event = decide.request_stop(
        story.snapshot, actor="operator:alice", reason="too late", now=story.tick(), event_id="x"
    )
    assert event is None
    # Sent anyway, the ledger refuses it too.
    forced = story.make(
        EventKind.CANCEL_REQUESTED, 1, "operator:alice", {"reason": "r", "nothing_running": False}
    )
    assert story.record(forced).outcome is Outcome.REJECTED
    assert state_of(story) is InstanceState.SUCCESS


@pytest.mark.parametrize(
    ("evidence", "field"),
    [
        ({"to_state": "RUNNING", "reason": "r", "scope": "instance"}, "evidence.to_state"),
        ({"to_state": "SUCCESS", "reason": "r", "scope": "galaxy"}, "evidence.scope"),
        ({"to_state": "SUCCESS", "reason": " ", "scope": "instance"}, "evidence.reason"),
    ],
)
def test_an_override_outside_its_vocabulary_is_rejected(evidence: JSONObject, field: str) -> None:
    story = running()
    story.complete(1, "task_error")
    verdict = story.send(EventKind.OVERRIDE, 1, "operator:alice", evidence)
    assert_rejected(verdict, field)
    assert state_of(story) is InstanceState.FAILED


def test_an_override_by_a_non_operator_is_rejected() -> None:
    story = running()
    story.complete(1, "task_error")
    evidence: JSONObject = {"to_state": "SUCCESS", "reason": "r", "scope": "instance"}
    assert_rejected(story.send(EventKind.OVERRIDE, 1, "scheduler", evidence), "actor")


def test_a_cancel_whose_nothing_running_is_not_a_boolean_never_makes_an_illegal_edge() -> None:
    story = running(RETRIES)
    story.complete(1, "task_error")
    assert state_of(story) is InstanceState.UP_FOR_RETRY
    evidence: JSONObject = {"reason": "wrong input", "nothing_running": 1}
    verdict = story.send(EventKind.CANCEL_REQUESTED, 1, "operator:bob", evidence)
    if verdict.outcome is not Outcome.REJECTED:
        transitions.check_instance_edge(
            verdict.before.state, verdict.after.state, EventKind.CANCEL_REQUESTED
        )


# -- cancel and timeout races -----------------------------------------------------------------


def test_a_success_after_a_cancel_request_wins_and_says_the_cancel_lost_the_race() -> None:
    story = running(RETRIES)
    story.cancel()
    assert state_of(story) is InstanceState.CANCELLING
    verdict = story.complete(0)
    assert verdict.outcome is Outcome.APPLIED
    assert state_of(story) is InstanceState.SUCCESS
    assert "lost the race" in story.snapshot.reason
    assert "lost the race" in attempt(story.snapshot, 1).reason
    # The engine's later word that the process is gone changes nothing.
    story.confirm_stop()
    assert state_of(story) is InstanceState.SUCCESS


def test_a_failure_that_beats_a_cancel_is_not_retried() -> None:
    story = running(RETRIES)
    story.cancel()
    story.complete(1, "task_error")
    assert attempt(story.snapshot, 1).state is AttemptState.FAILED
    assert state_of(story) is InstanceState.FAILED
    assert story.snapshot.retry_at is None
    assert "lost the race" in story.snapshot.reason
    assert judge.next_opening(story.snapshot) is None


def test_a_confirmed_cancel_is_cancelled_and_never_retried() -> None:
    story = running(RETRIES)
    story.cancel()
    story.confirm_stop()
    assert state_of(story) is InstanceState.CANCELLED
    assert story.snapshot.retry_at is None
    assert judge.next_opening(story.snapshot) is None


def test_a_confirmed_timeout_stop_retries_when_the_policy_allows() -> None:
    story = running(RETRIES)
    story.timeout()
    assert state_of(story) is InstanceState.CANCELLING
    verdict = story.confirm_stop()
    view = attempt(story.snapshot, 1)
    assert view.state is AttemptState.TIMEOUT
    assert verdict.after.state is InstanceState.UP_FOR_RETRY
    assert story.snapshot.retry_at is not None
    assert story.snapshot.retry_at > story.clock


def test_a_confirmed_timeout_stop_without_retries_left_is_timeout() -> None:
    story = running()
    story.timeout()
    story.confirm_stop()
    assert state_of(story) is InstanceState.TIMEOUT
    assert story.snapshot.retry_at is None


def test_a_worker_that_reports_it_was_stopped_at_our_timeout_confirms_the_timeout() -> None:
    story = running()
    story.timeout()
    story.complete(None, "cancelled")
    assert state_of(story) is InstanceState.TIMEOUT


def test_a_success_after_a_timeout_request_wins_the_race() -> None:
    story = running(RETRIES)
    story.timeout()
    story.complete(0)
    assert state_of(story) is InstanceState.SUCCESS
    assert "timeout lost the race" in story.snapshot.reason


def test_a_worker_that_enforced_the_timeout_itself_ends_in_timeout_and_retries() -> None:
    story = running(RETRIES)
    story.complete(None, "timeout")
    assert attempt(story.snapshot, 1).state is AttemptState.TIMEOUT
    assert state_of(story) is InstanceState.UP_FOR_RETRY


# -- completions ------------------------------------------------------------------------------

COMMIT = TaskPolicy(requires_commit=True)


def test_exit_0_without_a_commit_marker_fails_when_output_is_required() -> None:
    story = running(COMMIT)
    story.complete(0)
    assert attempt(story.snapshot, 1).state is AttemptState.FAILED
    assert state_of(story) is InstanceState.FAILED
    assert "marker" in story.snapshot.reason


def test_exit_0_after_the_output_was_committed_succeeds() -> None:
    story = running(COMMIT)
    story.send(EventKind.OUTPUT_COMMITTED, 1, "worker", {"marker": "part=2026-03-01"})
    story.complete(0)
    assert state_of(story) is InstanceState.SUCCESS
    assert attempt(story.snapshot, 1).commit_marker == "part=2026-03-01"


def test_exit_0_carrying_its_commit_marker_succeeds() -> None:
    story = running(COMMIT)
    event = completion(story, 1, 0, "none")
    event = dataclasses.replace(event, evidence={**event.evidence, "commit_marker": "m-1"})
    story.record(event)
    assert state_of(story) is InstanceState.SUCCESS


def test_exit_0_without_a_marker_succeeds_when_no_output_is_required() -> None:
    story = running()
    story.complete(0)
    assert state_of(story) is InstanceState.SUCCESS


def test_a_commit_marker_delivered_after_the_completion_is_a_legal_edge() -> None:
    story = running(COMMIT)
    committed = story.make(EventKind.OUTPUT_COMMITTED, 1, "worker", {"marker": "m-1"})
    story.complete(0)
    verdict = story.record(committed)
    assert verdict.recorded
    assert state_of(story) is InstanceState.SUCCESS
    transitions.check_instance_edge(
        verdict.before.state, verdict.after.state, EventKind.OUTPUT_COMMITTED
    )
    before, after = attempt(verdict.before, 1), attempt(verdict.after, 1)
    transitions.check_attempt_edge(before.state, after.state, EventKind.OUTPUT_COMMITTED)


def test_a_task_that_skips_itself_with_exit_99_is_skipped_and_not_retried() -> None:
    story = running(RETRIES)
    story.complete(99, "skipped")
    assert attempt(story.snapshot, 1).state is AttemptState.SKIPPED
    assert state_of(story) is InstanceState.SKIPPED
    assert story.snapshot.retry_at is None


def test_a_failure_with_retries_left_is_up_for_retry_then_failed_when_exhausted() -> None:
    story = running(TaskPolicy(retry=RetryPolicy(max_retries=1, delay=timedelta(seconds=5))))
    story.complete(1, "task_error")
    assert state_of(story) is InstanceState.UP_FOR_RETRY
    story.open()
    story.ack()
    story.start()
    story.complete(1, "task_error")
    assert state_of(story) is InstanceState.FAILED
    assert story.snapshot.retry_at is None
    assert [v.state for v in story.snapshot.attempts] == [AttemptState.FAILED] * 2


def test_a_completion_without_a_start_implies_the_start() -> None:
    story = Story()
    story.open()
    story.ack()
    story.complete(0)
    view = attempt(story.snapshot, 1)
    assert view.state is AttemptState.SUCCESS
    assert view.started_at is not None


# -- never received ---------------------------------------------------------------------------


def test_never_received_resubmits_up_to_max_resubmits_then_start_failed() -> None:
    policy = TaskPolicy(max_resubmits=3)  # max_retries 0: resubmits do not count as retries
    story = Story(policy)
    for n in range(1, 4):
        story.open()
        story.ack()
        verdict = story.never_received()
        assert state_of(story) is InstanceState.UP_FOR_RETRY, n
        # "at once": retry_at is when the decision was recorded.
        assert story.snapshot.retry_at == verdict.event.observed_at
    story.open()
    story.ack()
    story.never_received()
    assert story.epoch == 4
    assert state_of(story) is InstanceState.START_FAILED
    assert story.snapshot.retry_at is None
    views = story.snapshot.attempts
    assert [v.state for v in views] == [AttemptState.NOT_RECEIVED] * 4
    assert [(v.retry_index, v.resubmit_index) for v in views] == [(0, 0), (0, 1), (0, 2), (0, 3)]
    assert [v.open_reason.value if v.open_reason else None for v in views] == [
        "first",
        "resubmit",
        "resubmit",
        "resubmit",
    ]


def test_never_received_with_no_resubmits_allowed_is_start_failed() -> None:
    story = Story(TaskPolicy(max_resubmits=0))
    story.open()
    story.ack()
    story.never_received()
    assert state_of(story) is InstanceState.START_FAILED


# -- unknown fate ------------------------------------------------------------------------------


def test_on_unknown_fail_fences_the_attempt_and_fails_the_instance() -> None:
    story = lost(RETRIES)
    story.fence("fail")
    assert attempt(story.snapshot, 1).state is AttemptState.ABANDONED
    assert state_of(story) is InstanceState.FAILED
    assert judge.next_opening(story.snapshot) is None


def test_a_fence_with_retry_but_no_retries_left_fails_the_instance() -> None:
    story = lost(TaskPolicy(retry=RetryPolicy(max_retries=0)))
    story.fence("retry")
    assert state_of(story) is InstanceState.FAILED
    assert "no retries left" in story.snapshot.reason


def test_a_fence_with_retry_opens_the_next_attempt_counting_one_retry() -> None:
    story = lost(RETRIES)
    story.fence("retry")
    assert state_of(story) is InstanceState.UP_FOR_RETRY
    story.open()
    current = story.snapshot.current
    assert current is not None
    assert current.open_reason is not None and current.open_reason.value == "unknown_retry"
    assert (current.retry_index, current.resubmit_index) == (1, 0)


def test_a_fence_with_on_unknown_wait_is_rejected() -> None:
    story = lost()
    verdict = story.fence("wait")
    assert_rejected(verdict, "evidence.on_unknown")
    assert state_of(story) is InstanceState.LOST


def test_a_fence_of_a_running_attempt_is_rejected() -> None:
    story = running()
    assert story.fence("retry").outcome is Outcome.REJECTED
    assert state_of(story) is InstanceState.RUNNING


# -- lost and revived -------------------------------------------------------------------------


def test_a_lost_attempt_is_revived_by_a_report_with_a_higher_seq() -> None:
    story = lost()
    verdict = story.heartbeat()
    assert verdict.outcome is Outcome.APPLIED
    assert (verdict.before.state, verdict.after.state) == (
        InstanceState.LOST,
        InstanceState.RUNNING,
    )


def test_a_delayed_report_the_lease_decision_already_covered_keeps_it_lost() -> None:
    story = running()  # started: seq 1
    delayed = story.make(EventKind.HEARTBEAT, 1, "worker")  # seq 2, held up in the network
    story.heartbeat()  # seq 3 arrives first
    assert attempt(story.snapshot, 1).max_report_seq == 3
    assert _lease(story, 3).outcome is Outcome.APPLIED
    assert state_of(story) is InstanceState.LOST
    verdict = story.record(delayed)
    assert verdict.recorded
    assert state_of(story) is InstanceState.LOST
    # A distinct report carrying the very seq the decision saw proves nothing new either.
    same_seq = dataclasses.replace(story.make(EventKind.HEARTBEAT, 1, "worker"), seq=3)
    story.record(same_seq)
    assert state_of(story) is InstanceState.LOST
    # The next report does.
    fresh = dataclasses.replace(story.make(EventKind.HEARTBEAT, 1, "worker"), seq=4)
    story.record(fresh)
    assert state_of(story) is InstanceState.RUNNING


def test_heartbeat_loss_alone_never_fails_the_instance() -> None:
    story = lost(RETRIES)
    assert state_of(story) is InstanceState.LOST
    assert attempt(story.snapshot, 1).state is AttemptState.LOST
    assert story.snapshot.retry_at is None
    assert judge.next_opening(story.snapshot) is None
