"""The facts of an instance as JSON (the ledger stores them beside the snapshot row)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from datetime import timedelta, timezone

import pytest

from tests.unit.story import Story
from veritask.core import codec
from veritask.core.events import EventKind
from veritask.core.facts import InstanceFacts, merge
from veritask.core.fold import derive
from veritask.core.jsontypes import JSONObject, JSONValue
from veritask.core.policy import RetryPolicy, TaskPolicy
from veritask.core.states import EngineState

POLICY = TaskPolicy(retry=RetryPolicy(max_retries=2, delay=timedelta(seconds=5)))


def happy(story: Story) -> None:
    story.open()
    story.ack()
    story.start()
    story.send(EventKind.PROGRESS, 1, "worker", {"phase": "load", "done": 3, "total": 10})
    story.heartbeat()
    story.send(EventKind.OUTPUT_COMMITTED, 1, "worker", {"marker": "part=2026-03-01"})
    story.complete(0)


def retried(story: Story) -> None:
    story.open()
    story.submit_failed()
    story.open()
    story.ack()
    story.start()
    story.complete(1, "task_error")
    story.open()
    story.ack()
    story.start()
    story.complete(0)


def lost_fenced_late(story: Story) -> None:
    story.run_until_lost()
    late = story.make(EventKind.COMPLETED, 1, "worker", {"exit_code": 0, "error_category": "none"})
    story.fence("retry")
    story.open()
    story.ack()
    story.record(late)
    story.never_received()
    story.open()
    story.start()


def conflicting(story: Story) -> None:
    story.open()
    story.ack()
    story.start()
    story.engine(EngineState.FAILED, exit_code=1, error_category="task_error")
    story.complete(0)
    story.engine(EngineState.SUCCEEDED, exit_code=0)


def cancelled_and_overridden(story: Story) -> None:
    story.open()
    story.ack()
    story.start()
    story.cancel()
    story.unconfirm_stop()
    story.confirm_stop()
    story.override("SUCCESS", "the partition was written by hand")


def cancelled_while_waiting(story: Story) -> None:
    story.open()
    story.ack()
    story.start()
    story.complete(1, "task_error")
    story.cancel()


def skipped(story: Story) -> None:
    story.send(EventKind.SKIPPED, 0, "scheduler", {"rule": "all_success", "upstream": {"a": "x"}})


STORIES: dict[str, Callable[[Story], None]] = {
    "happy": happy,
    "retried": retried,
    "lost_fenced_late": lost_fenced_late,
    "conflicting": conflicting,
    "cancelled_and_overridden": cancelled_and_overridden,
    "cancelled_while_waiting": cancelled_while_waiting,
    "skipped": skipped,
}


def through_json(facts: InstanceFacts) -> InstanceFacts:
    text = json.dumps(codec.facts_to_json(facts))  # no default=: only JSON values allowed
    loaded = json.loads(text)
    assert isinstance(loaded, dict)
    return codec.facts_from_json(loaded)


@pytest.mark.parametrize("name", sorted(STORIES))
def test_the_facts_of_every_step_of_a_story_survive_json(name: str) -> None:
    story = Story(POLICY, instance_id=f"run-1/{name}")
    STORIES[name](story)
    recorded = [v for v in story.verdicts if v.recorded]
    assert len(recorded) >= 2
    for verdict in recorded:
        facts = verdict.after.facts
        back = through_json(facts)
        assert back == facts, verdict.event
        assert derive(back, POLICY) == verdict.after


def test_a_story_still_folds_the_same_after_a_round_trip_mid_way() -> None:
    """The ledger folds one event at a time from stored facts: the result must not change."""
    direct = Story(POLICY)
    retried(direct)
    events = [v.event for v in direct.verdicts if v.recorded]
    facts = codec.facts_from_json(codec.facts_to_json(InstanceFacts(direct.instance_id)))
    for event in events:
        facts = through_json(merge(facts, event))
    assert facts == direct.snapshot.facts


def test_times_keep_their_instant_and_offset() -> None:
    story = Story(POLICY)
    story.open()
    east = timezone(timedelta(hours=8))
    ack = story.make(
        EventKind.SUBMIT_ACKNOWLEDGED, 1, "executor", {"external_id": "x", "executor": "k8s"}
    )
    shifted = dataclasses.replace(ack, event_time=ack.event_time.astimezone(east))
    story.record(shifted)
    back = through_json(story.snapshot.facts)
    attempt = back.attempt(1)
    assert attempt is not None and attempt.acknowledged is not None
    assert attempt.acknowledged.event_time == ack.event_time
    assert attempt.acknowledged.event_time.utcoffset() == timedelta(hours=8)


def test_nested_evidence_survives() -> None:
    story = Story(POLICY)
    story.run_until_lost()
    gathered: JSONObject = {"engine": {"state": "unknown", "ids": [1, 2, None]}, "ok": False}
    story.send(
        EventKind.FENCED,
        1,
        "reconciler",
        {"reason": "window closed", "on_unknown": "retry", "gathered": gathered},
    )
    back = through_json(story.snapshot.facts)
    attempt = back.attempt(1)
    assert attempt is not None and attempt.fenced is not None
    assert attempt.fenced.evidence["gathered"] == gathered


@pytest.mark.parametrize("version", [0, 3, "1", "2", None, True])
def test_an_unknown_format_version_is_refused_clearly(version: JSONValue) -> None:
    story = Story(POLICY)
    happy(story)
    stored = codec.facts_to_json(story.snapshot.facts)
    stored["v"] = version
    with pytest.raises(ValueError, match="format version") as raised:
        codec.facts_from_json(stored)
    assert repr(version) in str(raised.value)


def test_missing_format_version_is_refused() -> None:
    stored = codec.facts_to_json(InstanceFacts("i"))
    del stored["v"]
    with pytest.raises(ValueError, match="format version"):
        codec.facts_from_json(stored)


def test_a_mangled_attempt_is_refused_not_misread() -> None:
    story = Story(POLICY)
    happy(story)
    stored = codec.facts_to_json(story.snapshot.facts)
    attempts = stored["attempts"]
    assert isinstance(attempts, list) and isinstance(attempts[0], dict)
    attempts[0]["n"] = "1"
    with pytest.raises(ValueError, match="integer"):
        codec.facts_from_json(stored)


#: A snapshot as the first format wrote it (every mark in full where it is used), from a
#: ledger before 0011: finished instances keep theirs until the migration rewrites them.
FIRST_FORMAT: JSONObject = json.loads("""{"v": 1, "id": "i-1", "created": {"id": "e1",
 "k": "instance_created", "a": "scheduler", "t": "2026-12-02T14:14:47.936142+00:00",
 "o": "2026-12-02T14:14:47.936142+00:00", "e": {"task_key": "t", "map_index": -1}},
 "attempts": [{"n": 1, "seq": 2, "pseq": 0,
  "opened": {"id": "e2", "k": "attempt_opened", "a": "scheduler",
   "t": "2026-12-02T14:14:47.962587+00:00", "o": "2026-12-02T14:14:47.968791+00:00",
   "e": {"reason": "first"}},
  "started": {"id": "e3", "k": "started", "a": "worker",
   "t": "2026-12-02T14:14:47.999224+08:00", "o": null, "e": {"pid": 7}},
  "first_report": {"id": "e3", "k": "started", "a": "worker",
   "t": "2026-12-02T14:14:47.999224+08:00", "o": null, "e": {"pid": 7}},
  "done": [{"m": {"id": "e4", "k": "completed", "a": "worker",
   "t": "2026-12-02T14:14:48.001355+00:00", "o": "2026-12-02T14:14:48.008408+00:00",
   "e": {"exit_code": 0, "output": null}}, "r": 1, "x": 0, "c": "none", "s": null,
   "k": null}]}],
 "decisions": []}""")


def test_the_first_format_is_still_read_and_rewritten_the_same() -> None:
    facts = codec.facts_from_json(FIRST_FORMAT)
    attempt = facts.attempt(1)
    assert attempt is not None and attempt.started is not None
    assert attempt.started == attempt.first_report
    assert attempt.started.observed_at is None
    assert attempt.started.event_time.utcoffset() == timedelta(hours=8)
    assert attempt.completions[0].mark.evidence == {"exit_code": 0, "output": None}
    assert facts.created is not None and facts.created.observed_at == facts.created.event_time
    assert through_json(facts) == facts


def test_a_mark_used_twice_is_written_once() -> None:
    story = Story(POLICY)
    happy(story)
    stored = codec.facts_to_json(story.snapshot.facts)
    marks = stored["m"]
    assert isinstance(marks, list)
    ids = [m["id"] for m in marks if isinstance(m, dict)]
    assert len(ids) == len(set(ids))
