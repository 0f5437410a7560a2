"""``--policy`` text for a what-if replay, and the pure replay on a history the story builder
records: a bad key or value is refused naming it; an unchanged policy changes nothing."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from tests.acceptance.test_operations import veritask
from veritask.core import what_if
from veritask.core.events import Event
from veritask.core.policy import OnUnknown, RetryPolicy, TaskPolicy
from veritask.demo.story import Story
from veritask.services import what_if as service
from veritask.services.errors import InvalidInput


def test_a_policy_text_is_read_key_by_key() -> None:
    change = service.parse_policy("lease=30s, retries=5,evidence_window=2m,on_unknown=fail")
    assert change == what_if.PolicyChange(
        lease=timedelta(seconds=30),
        retries=5,
        evidence_window=timedelta(minutes=2),
        on_unknown=OnUnknown.FAIL,
    )
    changed = change.applied_to(TaskPolicy(retry=RetryPolicy(max_retries=1), max_resubmits=2))
    assert (changed.lease, changed.retry.max_retries, changed.max_resubmits) == (
        timedelta(seconds=30),
        5,
        2,
    )


@pytest.mark.parametrize(
    ("text", "field", "says"),
    [
        ("leese=30s", "policy", "'leese' (did you mean 'lease'?)"),
        ("lease=30x", "policy.lease", "'30x'"),
        ("lease=0s", "policy", "lease: must be positive"),
        ("retries=-1", "policy.retries", "expected a whole number"),
        ("retries=two", "policy.retries", "expected a whole number"),
        ("on_unknown=maybe", "policy.on_unknown", "retry, fail, wait"),
        ("lease=30s,lease=1m", "policy.lease", "given twice"),
        ("lease", "policy", "'lease' is not key=value"),
        ("", "policy", "nothing to change"),
    ],
)
def test_a_bad_policy_names_the_key_and_what_is_wrong(text: str, field: str, says: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        service.parse_policy(text)
    (problem,) = caught.value.problems
    assert problem.field == field
    assert says in problem.message


def test_the_cli_refuses_a_bad_policy_with_exit_2_before_opening_anything(tmp_path: Path) -> None:
    found = veritask("replay", "--policy", "evidence_window=soon", "--since", "1d", home=tmp_path)
    assert found.returncode == 2
    assert "--policy: evidence_window:" in found.stderr and "'soon'" in found.stderr
    both = veritask("replay", "export.jsonl", "--policy", "lease=1m", home=tmp_path)
    assert both.returncode == 2


def _recorded(story: Story) -> list[Event]:
    return [v.event for v in story.verdicts if v.recorded]


def test_an_unchanged_policy_replays_to_no_difference() -> None:
    story = Story(TaskPolicy(retry=RetryPolicy(max_retries=1), lease=timedelta(seconds=30)))
    story.run_until_lost()
    story.tick(400)
    story.fence()
    story.open()
    story.ack()
    story.start()
    story.complete(0)
    events = [replace(e, observed_at=e.observed_at or e.event_time) for e in _recorded(story)]
    same = what_if.compare("inst", events, story.policy, what_if.PolicyChange())
    assert same.differences == ()
    assert same.recorded.state is not None and same.recorded.state.value == "SUCCESS"
    assert len(same.recorded.fenced) == 1


def test_a_retry_the_recording_never_made_has_an_unknown_outcome() -> None:
    story = Story(TaskPolicy())
    story.open()
    story.ack()
    story.start()
    story.complete(1, "task_error")
    events = _recorded(story)
    found = what_if.compare("inst", events, story.policy, what_if.PolicyChange(retries=1))
    course = found.what_if
    assert course.state is None, "nothing is known of attempt 2"
    assert [a.state for a in course.attempts][1] is None
    assert course.outcome_json()["lower_bound"] is True
