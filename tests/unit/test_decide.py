"""The platform's own decisions (docs/scheduling.md, 3-5): monitor, reconcile, open, stop.

Each decision is taken on a snapshot, an engine observation and the time, and then recorded
through ``judge`` as the ledger would: a decision that ``judge`` rejects would be a bug here.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

import pytest

from tests.unit.story import Story
from veritask.core import decide
from veritask.core.decide import Observation, Reconciliation
from veritask.core.events import Event, EventKind
from veritask.core.judge import Outcome
from veritask.core.policy import OnUnknown, RetryPolicy, TaskPolicy
from veritask.core.states import PROCESSES_ENDED, AttemptState, EngineState, InstanceState

S = timedelta(seconds=1)
TICK = timedelta(microseconds=1)

POLICY = TaskPolicy(
    retry=RetryPolicy(max_retries=2, delay=30 * S, max_delay=600 * S, jitter=0.0),
    lease=60 * S,
    evidence_window=300 * S,
    cancel_window=120 * S,
)


def state_of(story: Story) -> InstanceState:
    """The instance's state now (a call, so that type narrowing does not outlive a move)."""
    return story.state


def running(policy: TaskPolicy = POLICY) -> Story:
    story = Story(policy)
    story.open()
    story.ack()
    story.start()
    return story


def lost(policy: TaskPolicy = POLICY) -> tuple[Story, datetime]:
    """A LOST instance and the time the platform recorded the lease decision."""
    story = Story(policy)
    verdict = story.run_until_lost()
    assert state_of(story) is InstanceState.LOST
    assert verdict.event.observed_at is not None
    return story, verdict.event.observed_at


def record_at(story: Story, event: Event, now: datetime) -> None:
    """Record a decision taken at ``now`` as the ledger would, and check it was accepted."""
    story.clock = now
    verdict = story.record(event)
    assert verdict.outcome in (Outcome.APPLIED, Outcome.CONFLICT), verdict.reason


def observe(state: EngineState, at: datetime, **kwargs: int | str | None) -> Observation:
    exit_code = kwargs.get("exit_code")
    category = kwargs.get("error_category")
    return Observation(
        state,
        str(kwargs.get("source", "exit_record")),
        at,
        exit_code=exit_code if isinstance(exit_code, int) else None,
        error_category=category if isinstance(category, str) else None,
    )


def reconcile(story: Story, observation: Observation | None, now: datetime) -> Reconciliation:
    return decide.reconcile(
        story.snapshot, story.policy, observation, now=now, next_id=story.next_id
    )


def only(result: Reconciliation, kind: EventKind) -> Event:
    assert [e.kind for e in result.events] == [kind], result
    event = result.events[0]
    assert event.actor == "reconciler"
    return event


NOTHING = Reconciliation()


# -- monitor ----------------------------------------------------------------------------------


def test_a_lease_expires_exactly_one_lease_after_the_last_report_was_observed() -> None:
    story = running()
    heartbeat = story.heartbeat().event
    assert heartbeat.observed_at is not None
    expiry = heartbeat.observed_at + POLICY.lease
    assert decide.monitor(story.snapshot, POLICY, now=expiry - TICK, next_id=story.next_id) == []
    events = decide.monitor(story.snapshot, POLICY, now=expiry, next_id=story.next_id)
    assert [e.kind for e in events] == [EventKind.LEASE_EXPIRED]
    event = events[0]
    assert event.actor == "monitor"
    assert event.attempt_no == 1
    assert event.evidence["last_report_seq"] == 2
    assert event.evidence["lease_expires_at"] == expiry.isoformat()
    record_at(story, event, expiry)
    assert state_of(story) is InstanceState.LOST


def test_the_lease_counts_from_the_platforms_clock_not_the_workers() -> None:
    story = running()
    now = story.tick(5)
    # The worker's clock is 40 s behind: its heartbeat says it happened long ago.
    heartbeat = story.make(EventKind.HEARTBEAT, 1, "worker")
    skewed = dataclasses.replace(heartbeat, event_time=now - 40 * S, observed_at=now)
    story.record(skewed)
    early = now - 40 * S + POLICY.lease
    assert decide.monitor(story.snapshot, POLICY, now=early, next_id=story.next_id) == []
    due = decide.monitor(story.snapshot, POLICY, now=now + POLICY.lease, next_id=story.next_id)
    assert [e.kind for e in due] == [EventKind.LEASE_EXPIRED]


def test_no_lease_expires_for_an_attempt_that_is_not_running() -> None:
    story = Story(POLICY)
    story.open()
    story.ack()
    far = story.clock + timedelta(days=1)
    assert decide.monitor(story.snapshot, POLICY, now=far, next_id=story.next_id) == []


def test_a_timeout_is_requested_exactly_at_started_at_plus_the_timeout() -> None:
    policy = dataclasses.replace(POLICY, timeout=600 * S, lease=timedelta(days=1))
    story = running(policy)
    current = story.snapshot.current
    assert current is not None and current.started_at is not None
    deadline = current.started_at + 600 * S
    story.heartbeat()
    before = decide.monitor(story.snapshot, policy, now=deadline - TICK, next_id=story.next_id)
    assert before == []
    events = decide.monitor(story.snapshot, policy, now=deadline, next_id=story.next_id)
    assert [e.kind for e in events] == [EventKind.TIMEOUT_REQUESTED]
    assert events[0].evidence["timeout_seconds"] == 600
    record_at(story, events[0], deadline)
    assert state_of(story) is InstanceState.CANCELLING
    # Once the stop is asked for, the monitor does not ask again.
    later = deadline + timedelta(hours=1)
    assert decide.monitor(story.snapshot, policy, now=later, next_id=story.next_id) == []


def test_a_timeout_and_an_expired_lease_at_once_yield_only_the_timeout_request() -> None:
    policy = dataclasses.replace(POLICY, timeout=60 * S, lease=60 * S)
    story = running(policy)
    late = story.clock + timedelta(hours=1)
    events = decide.monitor(story.snapshot, policy, now=late, next_id=story.next_id)
    assert [e.kind for e in events] == [EventKind.TIMEOUT_REQUESTED]


def test_a_lost_attempt_still_times_out() -> None:
    policy = dataclasses.replace(POLICY, timeout=600 * S)
    story, _ = lost(policy)
    late = story.clock + timedelta(hours=1)
    events = decide.monitor(story.snapshot, policy, now=late, next_id=story.next_id)
    assert [e.kind for e in events] == [EventKind.TIMEOUT_REQUESTED]
    record_at(story, events[0], late)
    assert state_of(story) is InstanceState.CANCELLING


def test_the_monitor_leaves_an_overridden_instance_alone() -> None:
    policy = dataclasses.replace(POLICY, timeout=600 * S)
    story, _ = lost(policy)
    story.override("FAILED", "the host is gone for good")
    late = story.clock + timedelta(hours=1)
    assert decide.monitor(story.snapshot, policy, now=late, next_id=story.next_id) == []
    # Even when the worker comes back and then goes silent again.
    story.heartbeat()
    assert story.snapshot.current is not None
    assert story.snapshot.current.state is AttemptState.RUNNING
    later = late + timedelta(hours=1)
    assert decide.monitor(story.snapshot, policy, now=later, next_id=story.next_id) == []


# -- reconcile: the engine knows -------------------------------------------------------------


def test_the_engine_confirming_success_of_a_lost_attempt_is_accepted_as_late_success() -> None:
    story, _ = lost()
    now = story.tick(10)
    result = reconcile(story, observe(EngineState.SUCCEEDED, now, exit_code=0), now)
    event = only(result, EventKind.ENGINE_OBSERVED)
    assert event.evidence["engine_state"] == "succeeded"
    assert event.evidence["source"] == "exit_record"
    assert not result.stop_engine
    record_at(story, event, now)
    assert state_of(story) is InstanceState.SUCCESS


@pytest.mark.parametrize(
    ("policy", "want"),
    [
        (POLICY, InstanceState.UP_FOR_RETRY),
        (TaskPolicy(), InstanceState.FAILED),
    ],
    ids=["retries left", "no retries"],
)
def test_the_engine_reporting_failure_of_a_lost_attempt_retries_or_fails(
    policy: TaskPolicy, want: InstanceState
) -> None:
    story, _ = lost(policy)
    now = story.tick(10)
    failed = observe(EngineState.FAILED, now, exit_code=3, error_category="task_error")
    event = only(reconcile(story, failed, now), EventKind.ENGINE_OBSERVED)
    record_at(story, event, now)
    assert state_of(story) is want
    current = story.snapshot.current
    assert current is not None and current.state is AttemptState.FAILED
    assert current.exit_code == 3


def test_the_engine_reporting_failure_of_a_running_attempt_is_recorded_at_once() -> None:
    story = running()
    now = story.tick()
    event = only(reconcile(story, observe(EngineState.FAILED, now), now), EventKind.ENGINE_OBSERVED)
    record_at(story, event, now)
    assert state_of(story) is InstanceState.UP_FOR_RETRY


def test_a_running_engine_for_a_running_attempt_needs_no_decision() -> None:
    story = running()
    now = story.tick()
    assert reconcile(story, observe(EngineState.RUNNING, now, source="engine"), now) == NOTHING


# -- reconcile: the engine does not know -----------------------------------------------------


def test_a_queued_attempt_the_engine_never_had_is_never_received() -> None:
    story = Story(POLICY)
    story.open()
    story.ack()
    now = story.tick()
    result = reconcile(story, observe(EngineState.NOT_FOUND, now, source="engine"), now)
    event = only(result, EventKind.NEVER_RECEIVED)
    assert event.evidence["engine_state"] == "not_found"
    record_at(story, event, now)
    assert state_of(story) is InstanceState.UP_FOR_RETRY
    assert story.snapshot.retry_at == now  # resubmit at once


def test_a_queued_attempt_the_engine_cannot_account_for_is_fenced_after_the_window() -> None:
    # A Celery host that died after its claim and before the worker's `started`: the engine
    # says the attempt was taken and nothing more, and no lease will ever lapse for it.
    story = Story(POLICY)
    story.open()
    story.ack()
    current = story.snapshot.current
    assert current is not None and current.queued_at is not None
    acknowledged = current.queued_at
    early = acknowledged + POLICY.evidence_window - TICK
    assert reconcile(story, observe(EngineState.UNKNOWN, early, source="engine"), early) == NOTHING
    window_end = acknowledged + POLICY.evidence_window
    result = reconcile(story, observe(EngineState.UNKNOWN, window_end, source="engine"), window_end)
    assert result.stop_engine
    record_at(story, only(result, EventKind.FENCED), window_end)
    assert state_of(story) is InstanceState.UP_FOR_RETRY


def test_not_found_for_an_attempt_whose_worker_reported_is_never_never_received() -> None:
    story = running()
    now = story.tick()
    result = reconcile(story, observe(EngineState.NOT_FOUND, now, source="engine"), now)
    assert EventKind.NEVER_RECEIVED not in [e.kind for e in result.events]


def test_a_scheduled_attempt_the_engine_does_not_have_is_submitted_without_an_event() -> None:
    story = Story(POLICY)
    story.open()
    now = story.tick()
    result = reconcile(story, observe(EngineState.NOT_FOUND, now, source="engine"), now)
    assert result == Reconciliation(submit=True)
    assert state_of(story) is InstanceState.SCHEDULED


def test_a_scheduled_attempt_the_engine_holds_is_left_alone() -> None:
    story = Story(POLICY)
    story.open()
    now = story.tick()
    assert reconcile(story, observe(EngineState.PENDING, now, source="engine"), now) == NOTHING


# -- reconcile: stops -------------------------------------------------------------------------


def test_a_cancelling_attempt_the_engine_no_longer_has_is_confirmed_cancelled() -> None:
    story = running()
    story.cancel()
    now = story.tick()
    result = reconcile(story, observe(EngineState.NOT_FOUND, now, source="engine"), now)
    event = only(result, EventKind.CANCEL_CONFIRMED)
    record_at(story, event, now)
    assert state_of(story) is InstanceState.CANCELLED


def test_a_stop_is_confirmed_when_the_engine_saw_the_tasks_processes_end() -> None:
    """A frozen worker cannot record how its task ended: ``unknown``, with the engine's word
    that no process of the task runs, is enough to confirm the stop; ``unknown`` alone is not
    (it is also what an engine says of a host it cannot reach)."""
    story = running()
    story.cancel()
    now = story.tick()
    unknown = observe(EngineState.UNKNOWN, now, source="process_table")
    assert reconcile(story, unknown, now) == Reconciliation(stop_engine=True)
    ended = dataclasses.replace(unknown, details={PROCESSES_ENDED: True, "worker_stopped": True})
    event = only(reconcile(story, ended, now), EventKind.CANCEL_CONFIRMED)
    record_at(story, event, now)
    assert state_of(story) is InstanceState.CANCELLED


def test_a_cancelling_attempt_that_succeeded_first_is_a_success() -> None:
    story = running()
    story.cancel()
    now = story.tick()
    result = reconcile(story, observe(EngineState.SUCCEEDED, now, exit_code=0), now)
    record_at(story, only(result, EventKind.ENGINE_OBSERVED), now)
    assert state_of(story) is InstanceState.SUCCESS
    assert "lost the race" in story.snapshot.reason


def test_a_stop_the_engine_does_not_confirm_is_asked_again_then_unconfirmed_at_the_window() -> None:
    story = running()
    requested = story.cancel().event.observed_at
    assert requested is not None
    window_end = requested + POLICY.cancel_window
    still = observe(EngineState.RUNNING, window_end, source="engine")
    inside = reconcile(story, still, window_end - TICK)
    assert inside == Reconciliation(stop_engine=True)
    result = reconcile(story, still, window_end)
    event = only(result, EventKind.CANCEL_UNCONFIRMED)
    assert result.stop_engine
    assert event.evidence["engine_state"] == "running"
    record_at(story, event, window_end)
    assert state_of(story) is InstanceState.CANCEL_FAILED
    # Still reconciled: the stop is asked for again, and a later confirmation is accepted.
    later = window_end + 60 * S
    assert reconcile(story, still, later) == Reconciliation(stop_engine=True)
    gone = reconcile(story, observe(EngineState.NOT_FOUND, later, source="engine"), later)
    record_at(story, only(gone, EventKind.CANCEL_CONFIRMED), later)
    assert state_of(story) is InstanceState.CANCELLED


def test_an_unreachable_engine_past_the_cancel_window_is_unconfirmed() -> None:
    story = running()
    requested = story.cancel().event.observed_at
    assert requested is not None
    now = requested + POLICY.cancel_window
    event = only(reconcile(story, None, now), EventKind.CANCEL_UNCONFIRMED)
    record_at(story, event, now)
    assert state_of(story) is InstanceState.CANCEL_FAILED


# -- reconcile: unknown fate ------------------------------------------------------------------


@pytest.mark.parametrize("observation_state", [None, EngineState.UNKNOWN, EngineState.NOT_FOUND])
def test_a_lost_attempt_inside_the_evidence_window_gets_no_decision(
    observation_state: EngineState | None,
) -> None:
    story, since = lost()
    now = since + POLICY.evidence_window - TICK
    observation = None if observation_state is None else observe(observation_state, now)
    assert reconcile(story, observation, now) == NOTHING
    assert reconcile(story, observation, since) == NOTHING


@pytest.mark.parametrize("after_the_window", [False, True])
def test_a_lost_attempt_the_engine_reports_running_resumes_monitoring(
    after_the_window: bool,
) -> None:
    story, since = lost()
    now = since + (POLICY.evidence_window if after_the_window else 5 * S)
    result = reconcile(story, observe(EngineState.RUNNING, now, source="process_table"), now)
    vouched = only(result, EventKind.ENGINE_OBSERVED)
    assert not result.stop_engine
    assert result.alert is not None and "process_table" in result.alert
    record_at(story, vouched, now)
    assert state_of(story) is InstanceState.RUNNING
    current = story.snapshot.current
    assert current is not None and current.state is AttemptState.RUNNING
    assert "engine reports the process running (process_table)" in story.snapshot.reason
    # The engine's word is a new lease: it lapses one lease later, not at once.
    assert decide.lease_expiry(current, POLICY) == now + POLICY.lease
    assert decide.monitor(story.snapshot, POLICY, now=now, next_id=story.next_id) == []


def test_a_vouched_attempt_that_goes_silent_again_is_lost_and_its_window_starts_again() -> None:
    story, _ = lost()
    vouched_at = story.tick(5)
    result = reconcile(story, observe(EngineState.RUNNING, vouched_at), vouched_at)
    record_at(story, only(result, EventKind.ENGINE_OBSERVED), vouched_at)
    lapsed = vouched_at + POLICY.lease
    expired = decide.monitor(story.snapshot, POLICY, now=lapsed, next_id=story.next_id)
    assert [e.kind for e in expired] == [EventKind.LEASE_EXPIRED]
    record_at(story, expired[0], lapsed)
    assert state_of(story) is InstanceState.LOST
    # The window runs from the second lapse: the first one's window gives no licence to fence.
    unknown = observe(EngineState.UNKNOWN, lapsed, source="engine")
    inside = lapsed + POLICY.evidence_window - TICK
    assert reconcile(story, unknown, inside) == NOTHING
    fenced = only(reconcile(story, unknown, lapsed + POLICY.evidence_window), EventKind.FENCED)
    record_at(story, fenced, lapsed + POLICY.evidence_window)
    assert state_of(story) is InstanceState.UP_FOR_RETRY


def test_a_vouch_older_than_the_lease_decision_does_not_revive_the_attempt() -> None:
    story, since = lost()
    stale = observe(EngineState.RUNNING, since - 10 * S)
    earlier = decide.reconcile(
        story.snapshot, POLICY, stale, now=since - 10 * S, next_id=story.next_id
    )
    # Recorded late (after the lease decision was), the vouch speaks of a time before it.
    event = only(earlier, EventKind.ENGINE_OBSERVED)
    story.record(dataclasses.replace(event, observed_at=since + S))
    assert state_of(story) is InstanceState.LOST


def test_after_the_window_on_unknown_retry_fences_and_stops_the_old_attempt() -> None:
    story, since = lost()
    now = since + POLICY.evidence_window
    unknown = observe(EngineState.UNKNOWN, now, source="engine")
    result = reconcile(story, unknown, now)
    event = only(result, EventKind.FENCED)
    assert result.stop_engine
    assert event.evidence["on_unknown"] == "retry"
    gathered = event.evidence["gathered"]
    assert isinstance(gathered, dict)
    assert gathered["last_report_seq"] == 1
    engine = gathered["engine"]
    assert isinstance(engine, dict) and engine["engine_state"] == "unknown"
    record_at(story, event, now)
    assert state_of(story) is InstanceState.UP_FOR_RETRY
    assert story.snapshot.current is not None
    assert story.snapshot.current.state is AttemptState.ABANDONED


def test_after_the_window_on_unknown_fail_fences_and_fails() -> None:
    policy = dataclasses.replace(POLICY, on_unknown=OnUnknown.FAIL)
    story, since = lost(policy)
    now = since + policy.evidence_window
    result = reconcile(story, None, now)
    event = only(result, EventKind.FENCED)
    assert event.evidence["on_unknown"] == "fail"
    record_at(story, event, now)
    assert state_of(story) is InstanceState.FAILED


def test_after_the_window_on_unknown_wait_stays_lost_and_raises_an_alert() -> None:
    policy = dataclasses.replace(POLICY, on_unknown=OnUnknown.WAIT)
    story, since = lost(policy)
    now = since + policy.evidence_window + timedelta(hours=2)
    result = reconcile(story, observe(EngineState.UNKNOWN, now), now)
    assert result.events == ()
    assert result.alert is not None and "LOST" in result.alert
    assert not result.submit
    assert state_of(story) is InstanceState.LOST


# -- reconcile: a RUNNING attempt the engine does not know (restart, docs/scheduling.md 5) ---


def absent(policy: TaskPolicy = POLICY) -> tuple[Story, datetime]:
    """A RUNNING instance whose engine answered not_found, and when that was recorded."""
    story = running(policy)
    now = story.tick()
    gone = observe(EngineState.NOT_FOUND, now, source="attempt_dir")
    event = only(reconcile(story, gone, now), EventKind.ENGINE_OBSERVED)
    assert event.evidence["engine_state"] == "not_found"
    record_at(story, event, now)
    assert state_of(story) is InstanceState.RUNNING
    return story, now


def test_a_running_attempt_the_engine_does_not_know_waits_out_the_window_unchanged() -> None:
    story, since = absent()
    now = since + POLICY.evidence_window - TICK
    assert reconcile(story, observe(EngineState.NOT_FOUND, now, source="attempt_dir"), now) == (
        NOTHING
    )


@pytest.mark.parametrize(
    ("on_unknown", "decided"),
    [(OnUnknown.RETRY, InstanceState.UP_FOR_RETRY), (OnUnknown.FAIL, InstanceState.FAILED)],
)
def test_a_running_attempt_the_engine_does_not_know_is_fenced_by_policy_after_the_window(
    on_unknown: OnUnknown, decided: InstanceState
) -> None:
    policy = dataclasses.replace(POLICY, on_unknown=on_unknown)
    story, since = absent(policy)
    now = since + policy.evidence_window
    result = reconcile(story, observe(EngineState.NOT_FOUND, now, source="attempt_dir"), now)
    event = only(result, EventKind.FENCED)
    gathered = event.evidence["gathered"]
    assert isinstance(gathered, dict) and gathered["unknown_since"] == since.isoformat()
    record_at(story, event, now)
    assert state_of(story) is decided
    assert story.snapshot.current is not None
    assert story.snapshot.current.state is AttemptState.ABANDONED


def test_a_running_attempt_the_engine_does_not_know_with_on_unknown_wait_only_alerts() -> None:
    policy = dataclasses.replace(POLICY, on_unknown=OnUnknown.WAIT)
    story, since = absent(policy)
    now = since + policy.evidence_window
    result = reconcile(story, observe(EngineState.NOT_FOUND, now, source="attempt_dir"), now)
    assert result.events == ()
    assert result.alert is not None and "RUNNING in the ledger" in result.alert


def test_a_report_after_the_engines_not_found_starts_the_window_again() -> None:
    story, since = absent()
    story.tick()
    story.heartbeat()
    now = since + POLICY.evidence_window
    again = reconcile(story, observe(EngineState.NOT_FOUND, now, source="attempt_dir"), now)
    record_at(story, only(again, EventKind.ENGINE_OBSERVED), now)
    later = now + POLICY.evidence_window - TICK
    assert reconcile(story, observe(EngineState.NOT_FOUND, later), later) == NOTHING


def test_a_lease_that_lapses_after_the_engines_not_found_keeps_the_window_it_started() -> None:
    story, since = absent()
    story.tick(POLICY.lease.total_seconds())
    current = story.snapshot.current
    assert current is not None
    lapse = decide.monitor(story.snapshot, POLICY, now=story.clock, next_id=story.next_id)
    record_at(story, only_kind(lapse, EventKind.LEASE_EXPIRED), story.clock)
    assert state_of(story) is InstanceState.LOST
    now = since + POLICY.evidence_window
    result = reconcile(story, observe(EngineState.NOT_FOUND, now, source="attempt_dir"), now)
    only(result, EventKind.FENCED)


def only_kind(events: list[Event], kind: EventKind) -> Event:
    assert [e.kind for e in events] == [kind], events
    return events[0]


def test_a_running_attempt_is_fenced_only_on_the_engines_not_found() -> None:
    story = running()
    story.tick()
    verdict = story.fence()
    assert verdict.outcome is Outcome.REJECTED
    assert "only while the engine answers it does not know it" in (verdict.reason or "")
    assert state_of(story) is InstanceState.RUNNING


def test_the_evidence_window_can_start_when_the_caller_says() -> None:
    story, since = lost()
    unknown_since = since + timedelta(minutes=10)
    now = since + POLICY.evidence_window  # closed by the lease decision, open by the caller
    result = decide.reconcile(
        story.snapshot,
        POLICY,
        None,
        now=now,
        next_id=story.next_id,
        unknown_since=unknown_since,
    )
    assert result == NOTHING


def test_the_reconciler_leaves_an_overridden_instance_alone() -> None:
    story, since = lost()
    story.override("SUCCESS", "output verified by hand")
    now = since + timedelta(days=1)
    assert reconcile(story, observe(EngineState.FAILED, now, exit_code=1), now) == NOTHING


# -- opening attempts -------------------------------------------------------------------------


def test_the_first_attempt_opens_from_created() -> None:
    story = Story(POLICY)
    event = decide.open_attempt(story.snapshot, token_hash="h", now=story.clock, event_id="o1")
    assert event is not None
    assert (event.kind, event.attempt_no, event.actor) == (
        EventKind.ATTEMPT_OPENED,
        1,
        "scheduler",
    )
    assert event.evidence["reason"] == "first"


def test_a_retry_opens_at_retry_at_and_not_before() -> None:
    story = running()
    story.complete(1, "task_error")
    retry_at = story.snapshot.retry_at
    assert retry_at is not None
    early = decide.open_attempt(story.snapshot, token_hash="h", now=retry_at - TICK, event_id="x")
    assert early is None
    for now in (retry_at, retry_at + timedelta(hours=3)):
        event = decide.open_attempt(story.snapshot, token_hash="h", now=now, event_id="x")
        assert event is not None
        assert event.attempt_no == 2
        assert event.event_time == now
        assert (event.evidence["reason"], event.evidence["retry_index"]) == ("retry", 1)
    opened = decide.open_attempt(story.snapshot, token_hash="h", now=retry_at, event_id="o2")
    assert opened is not None
    record_at(story, opened, retry_at)
    assert state_of(story) is InstanceState.SCHEDULED


@pytest.mark.parametrize("state", ["RUNNING", "SUCCESS", "LOST", "CANCELLING"])
def test_no_attempt_opens_while_one_is_active_or_the_instance_is_finished(state: str) -> None:
    story = running()
    if state == "SUCCESS":
        story.complete(0)
    elif state == "LOST":
        story = lost()[0]
    elif state == "CANCELLING":
        story.cancel()
    assert story.state.value == state
    far = story.clock + timedelta(days=30)
    assert decide.open_attempt(story.snapshot, token_hash="h", now=far, event_id="x") is None


# -- stops asked by people --------------------------------------------------------------------


def test_a_cancel_while_waiting_to_retry_takes_effect_at_once() -> None:
    story = running()
    story.complete(1, "task_error")
    assert state_of(story) is InstanceState.UP_FOR_RETRY
    event = decide.request_stop(
        story.snapshot, actor="api", reason="not needed", now=story.tick(), event_id="c1"
    )
    assert event is not None and event.evidence["nothing_running"] is True
    story.record(event)
    assert state_of(story) is InstanceState.CANCELLED
    assert (
        decide.open_attempt(
            story.snapshot, token_hash="h", now=story.clock + timedelta(days=1), event_id="x"
        )
        is None
    )


def test_a_cancel_while_running_asks_the_engine_to_stop() -> None:
    story = running()
    event = decide.request_stop(
        story.snapshot, actor="operator:bob", reason="wrong date", now=story.tick(), event_id="c"
    )
    assert event is not None and event.evidence["nothing_running"] is False
    story.record(event)
    assert state_of(story) is InstanceState.CANCELLING


def test_a_second_cancel_of_a_cancelling_instance_is_refused() -> None:
    story = running()
    story.cancel()
    again = decide.request_stop(
        story.snapshot, actor="operator:bob", reason="again", now=story.tick(), event_id="c"
    )
    assert again is None
