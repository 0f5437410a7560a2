"""The transition table is law at run time (core/transitions.py, checked in ``judge``).

The property drives one instance with any event any actor may send, in any order, well timed
or not (a late completion, a report of an old attempt, a decision on the wrong state, a
rerun, an override), and proves that every move the fold makes is an edge of the table: the
run-time check never has anything to refuse. The unit tests show what it refuses when the
table lacks an edge.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.simulation import Scenario, simulate
from tests.unit.story import Story
from tests.unit.test_properties import scenarios
from veritask.core import judge, new_events, reasons, transitions
from veritask.core.events import EventKind, OpenReason
from veritask.core.jsontypes import JSONObject
from veritask.core.policy import OnUnknown, RetryPolicy, TaskPolicy
from veritask.core.states import AttemptState, EngineState, InstanceState

#: (error category, exit code) a worker may report.
_ENDINGS = (
    ("none", 0),
    ("task_error", 1),
    ("timeout", None),
    ("cancelled", None),
    ("killed", None),
    ("skipped", 99),
    ("start_error", 127),
)
_ENGINE_ENDS = (EngineState.SUCCEEDED, EngineState.FAILED)
_STOP_ANSWERS = ("not_found", "running", "unreachable")


def _move(story: Story, move: str, older: bool, pick: int) -> None:
    """One event of kind ``move``; ``older`` aims it at the attempt before the current one."""
    n = max(0, story.epoch - 1) if older else story.epoch
    token = story.token(n)
    if move == "open":
        if judge.next_opening(story.snapshot) is not None:
            story.open()
    elif move == "rerun":
        story.record(
            new_events.attempt_opened(
                event_id=story.next_id(),
                instance_id=story.instance_id,
                attempt_no=story.epoch + 1,
                event_time=story.tick(),
                token_hash=judge.hash_token(story.token(story.epoch + 1)),
                reason=OpenReason.RERUN,
                retry_index=0,
                resubmit_index=0,
            )
        )
    elif move == "ack":
        story.ack(n or None)
    elif move == "submit_failed":
        story.submit_failed(retryable=pick % 2 == 0)
    elif move == "start":
        story.start(n or None)
    elif move == "heartbeat":
        story.heartbeat(n or None)
    elif move == "commit":
        story.send(EventKind.OUTPUT_COMMITTED, n, "worker", {"marker": "m"}, token=token)
    elif move == "complete":
        category, code = _ENDINGS[pick % len(_ENDINGS)]
        story.complete(code, category, n or None)
    elif move == "engine":
        state = _ENGINE_ENDS[pick % 2]
        code = 0 if state is EngineState.SUCCEEDED else 1
        extra: dict[str, str | int | None] = {"exit_code": code}
        if pick % 3 == 0:
            extra["commit_marker"] = "m"
        story.engine(state, **extra)
    elif move == "lease":
        current = story.snapshot.current
        evidence: JSONObject = {
            "last_report_seq": current.max_report_seq if current else 0,
            "lease_expires_at": story.clock.isoformat(),
        }
        story.send(EventKind.LEASE_EXPIRED, story.epoch, "monitor", evidence)
    elif move == "cancel":
        if decide_may_stop(story):
            story.cancel()
    elif move == "timeout":
        story.timeout()
    elif move == "confirm_stop":
        story.confirm_stop()
    elif move == "unconfirm_stop":
        story.unconfirm_stop()
    elif move == "never_received":
        story.never_received()
    elif move == "fence":
        story.fence(OnUnknown.RETRY.value if pick % 2 else OnUnknown.FAIL.value)
    elif move == "override":
        story.override("SUCCESS" if pick % 2 else "FAILED")
    elif move in ("skipped", "upstream_failed"):
        kind = EventKind.SKIPPED if move == "skipped" else EventKind.UPSTREAM_FAILED
        story.send(kind, 0, "scheduler", {"rule": "all_success", "upstream": {}})
    elif move == "removed":
        story.send(EventKind.REMOVED, story.epoch, "scheduler", {"definition_version": 2})
    story.tick(pick)


def decide_may_stop(story: Story) -> bool:
    idle = story.state in (InstanceState.CREATED, InstanceState.UP_FOR_RETRY)
    current = story.snapshot.current
    running = (AttemptState.SCHEDULED, AttemptState.QUEUED, AttemptState.RUNNING)
    return idle or (current is not None and current.state in (*running, AttemptState.LOST))


MOVES = (
    "open",
    "rerun",
    "ack",
    "submit_failed",
    "start",
    "heartbeat",
    "commit",
    "complete",
    "engine",
    "lease",
    "cancel",
    "timeout",
    "confirm_stop",
    "unconfirm_stop",
    "never_received",
    "fence",
    "override",
    "skipped",
    "upstream_failed",
    "removed",
)

histories = st.lists(
    st.tuples(st.sampled_from(MOVES), st.booleans(), st.integers(min_value=0, max_value=9)),
    min_size=1,
    max_size=40,
)
policies = st.builds(
    TaskPolicy,
    retry=st.builds(RetryPolicy, max_retries=st.integers(min_value=0, max_value=3)),
    requires_commit=st.booleans(),
    timeout=st.none() | st.just(timedelta(seconds=30)),
)


def _is_the_tables_refusal(reason: str) -> bool:
    return (
        reasons.OFF_THE_TABLE.fullmatch(reason) is not None
        or reasons.ATTEMPT_OFF_THE_TABLE.fullmatch(reason) is not None
    )


@given(histories, policies)
def test_property_every_move_the_fold_makes_is_an_edge_of_the_table(
    history: list[tuple[str, bool, int]], policy: TaskPolicy
) -> None:
    story = Story(policy)
    for move, older, pick in history:
        _move(story, move, older, pick)
    for verdict in story.verdicts:
        event = verdict.event
        if _is_the_tables_refusal(verdict.reason):
            # The one move the fold would make off the table: a stop confirmed that nobody
            # asked for (no platform code sends one; the reconciler confirms only a stop it
            # sees asked). The table is right, and the check refuses it.
            facts = verdict.before.facts.attempt(event.attempt_no)
            assert event.kind is EventKind.CANCEL_CONFIRMED, verdict
            assert facts is not None and facts.stop_requested is None, verdict
            continue
        if verdict.outcome is judge.Outcome.REJECTED:
            continue
        before, after, kind = verdict.before, verdict.after, event.kind
        transitions.check_instance_edge(before.state, after.state, kind)
        was, now = before.attempt(event.attempt_no), after.attempt(event.attempt_no)
        if was is not None and now is not None:
            transitions.check_attempt_edge(was.state, now.state, kind)


@given(scenarios)
def test_property_the_table_refuses_nothing_in_a_true_history(scenario: Scenario) -> None:
    sim = simulate(scenario)
    assert sim.recorded
    for r in sim.recorded:
        assert not _is_the_tables_refusal(r.reason), r.event


def test_a_move_the_table_lacks_is_refused_with_the_rule_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    story = Story()
    story.run_until_lost()
    lost = story.snapshot
    edge = (InstanceState.LOST, InstanceState.RUNNING, EventKind.HEARTBEAT)
    monkeypatch.setattr(
        transitions,
        "INSTANCE_EDGES",
        {key: rule for key, rule in transitions.INSTANCE_EDGES.items() if key != edge},
    )
    verdict = story.heartbeat()
    assert verdict.outcome is judge.Outcome.REJECTED
    assert verdict.reason == (
        "refused by the transition table: no rule moves the instance from LOST to RUNNING on "
        "heartbeat (the rules of that kind: worker_report_proves_the_start, report_after_lost, "
        "worker_report_beats_a_submit_failure)"
    )
    assert verdict.after is lost
    assert story.snapshot is lost


def test_an_attempt_move_the_table_lacks_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    story = Story()
    story.run_until_lost()
    edge = (AttemptState.LOST, AttemptState.RUNNING, EventKind.HEARTBEAT)
    monkeypatch.setattr(
        transitions,
        "ATTEMPT_EDGES",
        {key: rule for key, rule in transitions.ATTEMPT_EDGES.items() if key != edge},
    )
    # The instance's edge stays, so it is the attempt's move that is refused.
    verdict = story.heartbeat()
    assert verdict.outcome is judge.Outcome.REJECTED
    assert verdict.reason == (
        "refused by the transition table: no rule moves attempt 1 from LOST to RUNNING on "
        "heartbeat (the rules of that kind: started, started_while_stopping, reported_after_lost)"
    )


def test_a_move_the_table_holds_is_applied() -> None:
    story = Story()
    story.run_until_lost()
    assert story.heartbeat().outcome is judge.Outcome.APPLIED
    assert story.state is InstanceState.RUNNING


def test_every_edge_is_found_by_one_lookup() -> None:
    for rule in transitions.INSTANCE_RULES:
        for source in rule.sources:
            for target in rule.targets:
                for cause in rule.causes:
                    if source is not target:
                        assert (source, target, cause) in transitions.INSTANCE_EDGES
    for attempt_rule in transitions.ATTEMPT_RULES:
        for was in attempt_rule.sources:
            for now in attempt_rule.targets:
                for cause in attempt_rule.causes:
                    if was is not now:
                        assert (was, now, cause) in transitions.ATTEMPT_EDGES
