"""Retry and task policies (docs/definitions.md): delays, caps, jitter, validation, storage."""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.story import Story
from veritask.core import policy as policy_module
from veritask.core.errors import InvalidPolicy
from veritask.core.events import Event, EventKind
from veritask.core.fold import fold
from veritask.core.jsontypes import JSONObject
from veritask.core.policy import Backoff, OnUnknown, RetryPolicy, TaskPolicy
from veritask.core.states import AttemptState, InstanceState

S = timedelta(seconds=1)


def no_jitter(
    *, delay: timedelta, max_delay: timedelta, backoff: Backoff = Backoff.EXPONENTIAL
) -> RetryPolicy:
    return RetryPolicy(backoff=backoff, delay=delay, max_delay=max_delay, jitter=0.0)


# -- delays -----------------------------------------------------------------------------------


def test_a_fixed_backoff_waits_the_same_delay_before_every_retry() -> None:
    policy = no_jitter(backoff=Backoff.FIXED, delay=45 * S, max_delay=600 * S)
    delays = [policy.delay_before(retry_number=k, seed="i/1") for k in range(1, 8)]
    assert delays == [45 * S] * 7


def test_an_exponential_backoff_doubles_the_delay_before_each_retry() -> None:
    policy = no_jitter(backoff=Backoff.EXPONENTIAL, delay=30 * S, max_delay=3600 * S)
    delays = [policy.delay_before(retry_number=k, seed="i/1") for k in range(1, 6)]
    assert delays == [30 * S, 60 * S, 120 * S, 240 * S, 480 * S]


def test_an_exponential_backoff_is_capped_at_max_delay() -> None:
    policy = no_jitter(backoff=Backoff.EXPONENTIAL, delay=30 * S, max_delay=100 * S)
    delays = [policy.delay_before(retry_number=k, seed="i/1") for k in (1, 2, 3, 4, 50, 10_000)]
    assert delays == [30 * S, 60 * S, 100 * S, 100 * S, 100 * S, 100 * S]


def test_a_huge_retry_number_with_a_short_delay_is_capped() -> None:
    policy = RetryPolicy(delay=S, max_delay=timedelta(hours=1), jitter=0.5)
    delay = policy.delay_before(retry_number=10**9, seed="s")
    assert timedelta(minutes=30) <= delay <= timedelta(minutes=90)


@pytest.mark.parametrize("retry_number", [40, 50, 10**6])
def test_a_long_delay_with_many_retries_is_capped_without_overflow(retry_number: int) -> None:
    policy = RetryPolicy(
        max_retries=100, delay=timedelta(minutes=5), max_delay=timedelta(hours=1), jitter=0.0
    )
    assert policy.delay_before(retry_number=retry_number, seed="s") == timedelta(hours=1)


def test_the_first_retry_is_number_1() -> None:
    with pytest.raises(InvalidPolicy, match="retry_number"):
        RetryPolicy().delay_before(retry_number=0, seed="s")


def _base(policy: RetryPolicy, k: int) -> timedelta:
    """The capped base delay, computed from the design's words, not from the code."""
    one = timedelta(microseconds=1)
    delay, cap = policy.delay // one, policy.max_delay // one
    raw = delay if policy.backoff is Backoff.FIXED else delay * 2 ** (k - 1)
    return min(raw, cap) * one


retry_policies = st.builds(
    lambda backoff, delay, extra, jitter: RetryPolicy(
        backoff=backoff,
        delay=timedelta(milliseconds=delay),
        max_delay=timedelta(milliseconds=delay + extra),
        jitter=jitter,
    ),
    st.sampled_from(list(Backoff)),
    st.integers(min_value=0, max_value=3_600_000),
    st.integers(min_value=0, max_value=3_600_000),
    st.floats(min_value=0.0, max_value=1.0),
)


@given(retry_policies, st.integers(min_value=1, max_value=25), st.text(max_size=20))
def test_jitter_stays_within_its_fraction_of_the_capped_base(
    policy: RetryPolicy, k: int, seed: str
) -> None:
    base = _base(policy, k)
    delay = policy.delay_before(retry_number=k, seed=seed)
    slack = base * policy.jitter + timedelta(microseconds=1)  # one microsecond of rounding
    assert base - slack <= delay <= base + slack
    # The same instance and retry number always give the same wait.
    assert policy.delay_before(retry_number=k, seed=seed) == delay


def test_jitter_differs_between_instances() -> None:
    policy = RetryPolicy(delay=60 * S, max_delay=60 * S, jitter=0.2)
    delays = {policy.delay_before(retry_number=1, seed=f"inst-{n}/1") for n in range(200)}
    assert len(delays) > 150
    # ...and spreads to both sides of the base.
    assert min(delays) < 60 * S < max(delays)
    assert all(48 * S <= d <= 72 * S for d in delays)


def test_jitter_differs_between_retry_numbers_of_one_instance() -> None:
    policy = RetryPolicy(backoff=Backoff.FIXED, delay=60 * S, max_delay=60 * S, jitter=0.2)
    delays = {policy.delay_before(retry_number=k, seed="inst/1") for k in range(1, 50)}
    assert len(delays) > 40


def test_zero_jitter_gives_exactly_the_base() -> None:
    policy = no_jitter(delay=7 * S, max_delay=7 * S)
    assert {policy.delay_before(retry_number=1, seed=f"s{n}") for n in range(50)} == {7 * S}


# -- validation -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_retries": -1}, "retry.max_retries"),
        ({"delay": -S}, "retry.delay"),
        ({"delay": 60 * S, "max_delay": 59 * S}, "retry.max_delay"),
        ({"jitter": 1.01}, "retry.jitter"),
        ({"jitter": -0.1}, "retry.jitter"),
        ({"retry_on": frozenset({AttemptState.FAILED, AttemptState.CANCELLED})}, "retry.retry_on"),
        ({"retry_on": frozenset({AttemptState.SUCCESS})}, "retry.retry_on"),
        ({"retry_on": frozenset({AttemptState.SKIPPED})}, "retry.retry_on"),
    ],
)
def test_a_bad_retry_policy_is_refused_naming_the_field(
    kwargs: dict[str, object], field: str
) -> None:
    with pytest.raises(InvalidPolicy) as raised:
        RetryPolicy(**kwargs)  # type: ignore[arg-type]
    assert str(raised.value).startswith(f"{field}:")


def test_a_refused_retry_on_names_the_state() -> None:
    with pytest.raises(InvalidPolicy, match="CANCELLED"):
        RetryPolicy(retry_on=frozenset({AttemptState.CANCELLED}))


def test_the_default_retry_policy_retries_failed_start_failed_and_timeout_only() -> None:
    assert RetryPolicy().retry_on == {
        AttemptState.FAILED,
        AttemptState.START_FAILED,
        AttemptState.TIMEOUT,
    }


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"lease": timedelta(0)}, "lease"),
        ({"lease": -S}, "lease"),
        ({"evidence_window": timedelta(0)}, "evidence_window"),
        ({"cancel_window": -S}, "cancel_window"),
        ({"timeout": timedelta(0)}, "timeout"),
        ({"max_resubmits": -1}, "max_resubmits"),
    ],
)
def test_a_bad_task_policy_is_refused_naming_the_field(
    kwargs: dict[str, object], field: str
) -> None:
    with pytest.raises(InvalidPolicy) as raised:
        TaskPolicy(**kwargs)  # type: ignore[arg-type]
    assert str(raised.value).startswith(f"{field}:")


def test_an_invalid_policy_is_a_value_error_callers_can_catch() -> None:
    with pytest.raises(ValueError, match=r"retry\.jitter"):
        RetryPolicy(jitter=2.0)


# -- storage ----------------------------------------------------------------------------------

microseconds = st.integers(min_value=1, max_value=30 * 24 * 3600 * 10**6).map(
    lambda n: timedelta(microseconds=n)
)
retryable = sorted(
    set(AttemptState) - {AttemptState.CANCELLED, AttemptState.SUCCESS, AttemptState.SKIPPED}
)


@st.composite
def task_policies(draw: st.DrawFn) -> TaskPolicy:
    delay = draw(st.integers(min_value=0, max_value=10**10))
    extra = draw(st.integers(min_value=0, max_value=10**10))
    retry = RetryPolicy(
        max_retries=draw(st.integers(min_value=0, max_value=100)),
        backoff=draw(st.sampled_from(list(Backoff))),
        delay=timedelta(microseconds=delay),
        max_delay=timedelta(microseconds=delay + extra),
        jitter=draw(st.floats(min_value=0.0, max_value=1.0)),
        retry_on=frozenset(draw(st.sets(st.sampled_from(retryable)))),
    )
    return TaskPolicy(
        retry=retry,
        timeout=draw(st.none() | microseconds),
        lease=draw(microseconds),
        evidence_window=draw(microseconds),
        cancel_window=draw(microseconds),
        on_unknown=draw(st.sampled_from(list(OnUnknown))),
        max_resubmits=draw(st.integers(min_value=0, max_value=10)),
        requires_commit=draw(st.booleans()),
    )


@given(task_policies())
def test_a_task_policy_survives_json(policy: TaskPolicy) -> None:
    stored = json.loads(json.dumps(policy.to_json()))
    assert TaskPolicy.from_json(stored) == policy


@given(task_policies())
def test_a_task_policy_stored_in_full_is_still_read(policy: TaskPolicy) -> None:
    stored = json.loads(json.dumps(policy.full_json()))
    assert TaskPolicy.from_json(stored) == policy


def test_the_stored_defaults_are_the_default_policy() -> None:
    """Absent keys mean STORED_DEFAULTS forever; while they equal today's defaults, the
    default policy is stored as ``{}``. A changed default breaks this test, not the ledger:
    then the default policy is stored with the changed key, and old rows keep their meaning."""
    assert TaskPolicy().full_json() == policy_module.STORED_DEFAULTS
    assert TaskPolicy().to_json() == {}


def test_a_stored_policy_with_a_bad_value_is_refused_on_reading() -> None:
    stored = TaskPolicy().full_json()
    retry = stored["retry"]
    assert isinstance(retry, dict)
    with pytest.raises(InvalidPolicy, match=r"retry\.jitter"):
        TaskPolicy.from_json({**stored, "retry": {**retry, "jitter": 3}})
    with pytest.raises(InvalidPolicy):
        TaskPolicy.from_json({**stored, "lease": "60s"})
    with pytest.raises(InvalidPolicy):
        TaskPolicy.from_json({**stored, "max_resubmits": True})


# -- retry_at in the fold ---------------------------------------------------------------------


def _lagged(event: Event, lag: timedelta) -> Event:
    """The ledger learned of the event ``lag`` after it happened."""
    return dataclasses.replace(event, observed_at=event.event_time + lag)


def test_retry_at_is_the_observed_end_plus_the_deterministic_delay() -> None:
    retry = RetryPolicy(max_retries=3, delay=20 * S, max_delay=600 * S, jitter=0.3)
    policy = TaskPolicy(retry=retry)
    story = Story(policy, instance_id="run-7/load")
    for n in (1, 2, 3):
        story.open()
        story.ack()
        story.start()
        ended = story.complete(1, "task_error").event
        assert story.state is InstanceState.UP_FOR_RETRY
        assert ended.observed_at is not None
        want = ended.observed_at + retry.delay_before(retry_number=n, seed=f"run-7/load/{n}")
        assert story.snapshot.retry_at == want, n
    story.open()
    story.ack()
    story.start()
    story.complete(1, "task_error")
    assert story.state is InstanceState.FAILED
    assert story.snapshot.retry_at is None


def test_retry_at_counts_from_when_the_platform_learned_of_the_end() -> None:
    retry = RetryPolicy(max_retries=1, delay=20 * S, max_delay=20 * S, jitter=0.0)
    policy = TaskPolicy(retry=retry)
    story = Story(policy, instance_id="i")
    story.open()
    story.ack()
    story.start()
    evidence: JSONObject = {"exit_code": 2, "error_category": "task_error"}
    end = story.make(EventKind.COMPLETED, 1, "worker", evidence)
    events = [r.event for r in story.verdicts if r.recorded] + [_lagged(end, 90 * S)]
    snapshot = fold("i", events, policy)
    assert snapshot.state is InstanceState.UP_FOR_RETRY
    assert snapshot.retry_at == end.event_time + 90 * S + 20 * S


def test_a_stored_policy_with_an_unknown_key_is_refused() -> None:
    with pytest.raises(InvalidPolicy, match=r"unknown keys: lease_seconds, retry\.tries"):
        TaskPolicy.from_json({"lease_seconds": 60, "retry": {"tries": 3}})
