"""Durations from transition times (docs/state-machine.md), on golden histories: exact values."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.histories import format as histories
from tests.unit.story import T0, Story
from veritask.core import durations
from veritask.core.durations import Phase
from veritask.core.events import EventKind
from veritask.core.fold import InstanceSnapshot, fold


def _snapshot(name: str) -> InstanceSnapshot:
    history = histories.load(histories.HERE / f"{name}.jsonl")
    return fold(history.instance_id, history.events, history.policy)


def _phases(name: str) -> list[durations.PhaseInterval]:
    history = histories.load(histories.HERE / f"{name}.jsonl")
    snapshot = fold(history.instance_id, history.events, history.policy)
    created = next(e.event_time for e in history.events if e.kind is EventKind.INSTANCE_CREATED)
    return durations.phase_intervals(created, snapshot.attempts)


def test_a_retry_then_success_splits_into_its_four_phases() -> None:
    found = [
        (i.phase, i.attempt_no, i.duration.total_seconds() if i.duration else None)
        for i in _phases("retry_then_success")
    ]

    # Created 12:00:01, opened :02, acknowledged :05, started :07, failed :48; attempt 2
    # opened 12:01:21, acknowledged :24, started :26, succeeded :57.
    assert found == [
        (Phase.DEPENDENCY_WAIT, 1, 1.0),
        (Phase.QUEUE, 1, 2.0),
        (Phase.EXECUTION, 1, 41.0),
        (Phase.RETRY_WAIT, 2, 33.0),
        (Phase.QUEUE, 2, 2.0),
        (Phase.EXECUTION, 2, 31.0),
    ]
    assert durations.totals(_phases("retry_then_success")) == {
        Phase.DEPENDENCY_WAIT: timedelta(seconds=1),
        Phase.QUEUE: timedelta(seconds=4),
        Phase.EXECUTION: timedelta(seconds=72),
        Phase.RETRY_WAIT: timedelta(seconds=33),
    }


def test_every_golden_history_gives_phases_that_never_run_backwards() -> None:
    for path in sorted(histories.HERE.glob("*.jsonl")):
        for interval in _phases(path.stem):
            assert interval.end is None or interval.end >= interval.start, (path.stem, interval)


def test_an_open_phase_has_no_duration_and_is_left_out_of_totals() -> None:
    history = histories.load(histories.HERE / "happy_path.jsonl")
    # Only up to the start report: execution is still going on.
    until_started = [e for e in history.events if e.kind is not EventKind.COMPLETED]
    snapshot = fold(history.instance_id, until_started, history.policy)
    intervals = durations.phase_intervals(None, snapshot.attempts)

    execution = [i for i in intervals if i.phase is Phase.EXECUTION]
    assert len(execution) == 1
    assert execution[0].end is None
    assert Phase.EXECUTION not in durations.totals(intervals)


def test_percentiles_interpolate_between_closest_ranks() -> None:
    values = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0]
    assert durations.percentile(values, 0.5) == pytest.approx(5.5)
    assert durations.percentile(values, 0.95) == pytest.approx(9.55)
    assert durations.percentile([4.0], 0.95) == 4.0
    with pytest.raises(ValueError, match="no values"):
        durations.percentile([], 0.5)


@pytest.mark.parametrize("kind", [EventKind.SKIPPED, EventKind.UPSTREAM_FAILED])
def test_an_instance_decided_without_an_attempt_waited_until_the_decision(
    kind: EventKind,
) -> None:
    story = Story()
    assert story.snapshot.facts.created is not None
    created = story.snapshot.facts.created.event_time
    story.tick(5)
    decided = story.send(kind, 0, "scheduler", {"rule": "all_success", "upstream": {"a": "x"}})
    story.tick(60)  # long after: the wait must not grow with the clock

    [wait] = durations.instance_phases(story.snapshot)
    assert (wait.phase, wait.start, wait.end) == (
        Phase.DEPENDENCY_WAIT,
        created,
        decided.event.event_time,
    )
    assert decided.event.event_time > created


def test_an_instance_still_waiting_has_an_open_dependency_wait() -> None:
    story = Story()
    [wait] = durations.instance_phases(story.snapshot)
    assert wait.phase is Phase.DEPENDENCY_WAIT
    assert wait.start >= T0
    assert wait.end is None


def test_instance_phases_agree_with_phase_intervals_on_every_golden_history() -> None:
    for path in sorted(histories.HERE.glob("*.jsonl")):
        assert durations.instance_phases(_snapshot(path.stem)) == _phases(path.stem), path.stem
