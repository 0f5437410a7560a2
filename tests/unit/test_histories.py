"""Golden histories (tests/histories/*.jsonl): recorded event logs replayed through the fold.

Each file holds a real story's events as the ledger recorded them and, in its last line, what
the documented rules say the instance must show at the end (and at checkpoints). A change in
what the fold makes of a recorded history -- its meaning -- fails here, whatever order the
events are folded in. The files were written once by ``python -m tests.histories.make_histories``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.histories.format import HERE, History, checkpoints, load, mismatches
from veritask.core import transitions
from veritask.core.events import malformation
from veritask.core.facts import merge
from veritask.core.fold import InstanceSnapshot, derive, empty, fold, step

PATHS = sorted(HERE.glob("*.jsonl"))
STORIES = {
    "happy_path",
    "retry_then_success",
    "lost_then_late_success",
    "lost_fenced_retry_succeeds",
    "cancel_confirmed",
    "cancel_lost_the_race",
    "timeout_confirmed_then_retry",
    "never_received_then_resubmit",
}


def history(path: Path) -> History:
    loaded = load(path)
    assert loaded.name == path.stem
    return loaded


def assert_matches(snapshot: InstanceSnapshot, h: History, how: str) -> None:
    problems = mismatches(snapshot, h.expect)
    assert not problems, f"{h.name} ({how}): " + "; ".join(problems)


def test_every_golden_story_has_its_file() -> None:
    assert {p.stem for p in PATHS} == STORIES


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.stem)
def test_every_line_is_a_well_formed_recorded_event(path: Path) -> None:
    h = history(path)
    ids = [e.event_id for e in h.events]
    assert len(ids) == len(set(ids)), "an event id was recorded twice"
    for event in h.events:
        assert event.instance_id == h.instance_id
        assert event.observed_at is not None and event.observed_at.tzinfo is not None
        # The token is checked on arrival and never stored; stand one in for the shape check.
        assert malformation(dataclasses.replace(event, attempt_token="t")) is None, event


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.stem)
def test_a_golden_history_folds_to_its_expectation_in_file_order(path: Path) -> None:
    h = history(path)
    assert_matches(fold(h.instance_id, h.events, h.policy), h, "fold")
    facts = empty(h.instance_id)
    for event in h.events:
        facts = merge(facts, event)
    assert_matches(derive(facts, h.policy), h, "merged in file order")


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.stem)
def test_a_golden_history_folds_to_its_expectation_in_reverse_order(path: Path) -> None:
    h = history(path)
    backwards = tuple(reversed(h.events))
    assert_matches(fold(h.instance_id, backwards, h.policy), h, "fold, reversed")
    facts = empty(h.instance_id)
    for event in backwards:
        facts = merge(facts, event)
    assert_matches(derive(facts, h.policy), h, "merged in reverse order")


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.stem)
def test_a_golden_history_delivered_twice_folds_the_same(path: Path) -> None:
    h = history(path)
    once = fold(h.instance_id, h.events, h.policy)
    facts = empty(h.instance_id)
    for event in h.events + tuple(reversed(h.events)):
        facts = merge(facts, event)
    assert derive(facts, h.policy) == once


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.stem)
def test_a_golden_history_passes_its_checkpoints(path: Path) -> None:
    h = history(path)
    for prefix, checkpoint in checkpoints(h):
        problems = mismatches(fold(h.instance_id, prefix, h.policy), checkpoint)
        assert not problems, f"{h.name} at {checkpoint['through']}: " + "; ".join(problems)


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.stem)
def test_a_golden_history_is_a_path_of_the_transition_table(path: Path) -> None:
    h = history(path)
    snapshot = derive(empty(h.instance_id), h.policy)
    for event in h.events:
        after = step(snapshot, event, h.policy)
        transitions.check_instance_edge(snapshot.state, after.state, event.kind)
        before_attempt = snapshot.attempt(event.attempt_no)
        after_attempt = after.attempt(event.attempt_no)
        if before_attempt is not None and after_attempt is not None:
            transitions.check_attempt_edge(before_attempt.state, after_attempt.state, event.kind)
        snapshot = after
