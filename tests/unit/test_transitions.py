"""One test per rule of the transition table, named after the rule (docs/state-machine.md)."""

from __future__ import annotations

import sys
from datetime import timedelta

import pytest

from tests.unit.story import Story
from veritask.core import transitions
from veritask.core.errors import IllegalTransition
from veritask.core.events import EventKind
from veritask.core.jsontypes import JSONObject
from veritask.core.judge import Outcome, Verdict
from veritask.core.policy import RetryPolicy, TaskPolicy
from veritask.core.states import AttemptState, EngineState
from veritask.core.states import InstanceState as I

RETRY_ONCE = TaskPolicy(retry=RetryPolicy(max_retries=1, delay=timedelta(seconds=10)))


def assert_edge(verdict: Verdict, source: I, target: I, rule: str) -> None:
    assert verdict.outcome in (Outcome.APPLIED, Outcome.CONFLICT), verdict.reason
    assert (verdict.before.state, verdict.after.state) == (source, target), verdict.reason
    kind = verdict.event.kind
    found = transitions.instance_rule(source, target, kind)
    assert found is not None and found.name == rule, (source, target, kind, found)


def test_rule_first_attempt_opens() -> None:
    story = Story()
    assert_edge(story.open(), I.CREATED, I.SCHEDULED, "first_attempt_opens")


@pytest.mark.parametrize(
    ("kind", "target"),
    [(EventKind.SKIPPED, I.SKIPPED), (EventKind.UPSTREAM_FAILED, I.UPSTREAM_FAILED)],
)
def test_rule_trigger_rule_decides_before_any_attempt(kind: EventKind, target: I) -> None:
    story = Story()
    verdict = story.send(kind, 0, "scheduler", {"rule": "all_success", "upstream": {"a": "FAILED"}})
    assert_edge(verdict, I.CREATED, target, "trigger_rule_decides_before_any_attempt")


def test_rule_removed_from_the_definition() -> None:
    story = Story()
    verdict = story.send(EventKind.REMOVED, 0, "scheduler", {"definition_version": 2})
    assert_edge(verdict, I.CREATED, I.REMOVED, "removed_from_the_definition")


def test_rule_map_expands() -> None:
    story = Story()
    evidence: JSONObject = {"over": "list_files", "count": 2, "items": ["a", "b"]}
    verdict = story.send(EventKind.MAP_EXPANDED, 0, "scheduler", evidence)
    assert_edge(verdict, I.CREATED, I.SUCCESS, "map_expands")
    assert story.snapshot.reason == (
        "expanded into 2 instances, one per item of the output of list_files"
    )
    # Expanded once: a second expansion is illegal now.
    again = story.send(EventKind.MAP_EXPANDED, 0, "scheduler", evidence)
    assert again.outcome is Outcome.REJECTED


def test_rule_cancel_with_nothing_running() -> None:
    story = Story(RETRY_ONCE)
    story.open()
    story.ack()
    story.start()
    story.complete(1, "task_error")
    assert story.state is I.UP_FOR_RETRY
    assert_edge(story.cancel(), I.UP_FOR_RETRY, I.CANCELLED, "cancel_with_nothing_running")
    # A retry never opens after the cancel.
    assert story.snapshot.retry_at is None


def test_rule_operator_override() -> None:
    story = Story()
    story.open()
    story.ack()
    story.start()
    story.complete(3, "task_error")
    verdict = story.override("SUCCESS", "the partition was written by hand")
    assert_edge(verdict, I.FAILED, I.SUCCESS, "operator_override")
    assert "overridden to SUCCESS by operator:alice" in story.snapshot.reason
    # The facts stay: the attempt still says FAILED.
    current = story.snapshot.current
    assert current is not None and current.state is AttemptState.FAILED


def test_rule_executor_acknowledges() -> None:
    story = Story()
    story.open()
    assert_edge(story.ack(), I.SCHEDULED, I.QUEUED, "executor_acknowledges")
    current = story.snapshot.current
    assert current is not None and current.external_id == "local:1"


def test_rule_worker_report_proves_the_start() -> None:
    story = Story()
    story.open()
    story.ack()
    assert_edge(story.start(), I.QUEUED, I.RUNNING, "worker_report_proves_the_start")
    late_ack = Story()
    late_ack.open()
    assert_edge(late_ack.start(), I.SCHEDULED, I.RUNNING, "worker_report_proves_the_start")


def test_rule_engine_cannot_start_it() -> None:
    story = Story(RETRY_ONCE)
    story.open()
    assert_edge(story.submit_failed(), I.SCHEDULED, I.UP_FOR_RETRY, "engine_cannot_start_it")
    story.open()
    verdict = story.submit_failed(retryable=False)
    assert_edge(verdict, I.SCHEDULED, I.START_FAILED, "engine_cannot_start_it")


def test_rule_completion_decides() -> None:
    story = Story()
    story.open()
    story.ack()
    story.start()
    assert_edge(story.complete(0), I.RUNNING, I.SUCCESS, "completion_decides")
    implied = Story()
    implied.open()
    implied.ack()
    # The worker's `started` was lost; the completion implies it.
    assert_edge(implied.complete(0), I.QUEUED, I.SUCCESS, "completion_decides")


def test_rule_completion_confirms_our_stop() -> None:
    story = Story()
    story.open()
    story.ack()
    story.start()
    story.cancel()
    verdict = story.complete(None, "cancelled")
    assert_edge(verdict, I.CANCELLING, I.CANCELLED, "completion_confirms_our_stop")


def test_rule_lease_expires() -> None:
    story = Story()
    assert_edge(story.run_until_lost(), I.RUNNING, I.LOST, "lease_expires")
    assert "lease expired" in story.snapshot.reason


def test_rule_report_after_lost() -> None:
    story = Story()
    story.run_until_lost()
    assert_edge(story.heartbeat(), I.LOST, I.RUNNING, "report_after_lost")


def test_rule_engine_vouches_for_a_silent_attempt() -> None:
    story = Story()
    story.run_until_lost()
    story.tick()
    vouched = story.engine(EngineState.RUNNING, source="process_table")
    assert_edge(vouched, I.LOST, I.RUNNING, "engine_vouches_for_a_silent_attempt")


def test_rule_stop_requested() -> None:
    story = Story()
    story.open()
    story.ack()
    story.start()
    assert_edge(story.cancel(), I.RUNNING, I.CANCELLING, "stop_requested")
    timed = Story()
    timed.open()
    timed.ack()
    timed.start()
    assert_edge(timed.timeout(), I.RUNNING, I.CANCELLING, "stop_requested")


def test_rule_engine_confirms_the_stop() -> None:
    story = Story()
    story.open()
    story.ack()
    story.start()
    story.cancel()
    assert_edge(story.confirm_stop(), I.CANCELLING, I.CANCELLED, "engine_confirms_the_stop")
    timed = Story()
    timed.open()
    timed.ack()
    timed.start()
    timed.timeout()
    assert_edge(timed.confirm_stop(), I.CANCELLING, I.TIMEOUT, "engine_confirms_the_stop")


def test_rule_stop_unconfirmed() -> None:
    story = Story()
    story.open()
    story.ack()
    story.start()
    story.cancel()
    assert_edge(story.unconfirm_stop(), I.CANCELLING, I.CANCEL_FAILED, "stop_unconfirmed")


def test_rule_engine_never_received_it() -> None:
    story = Story()
    story.open()
    story.ack()
    assert_edge(story.never_received(), I.QUEUED, I.UP_FOR_RETRY, "engine_never_received_it")
    story.open()
    current = story.snapshot.current
    assert current is not None and (current.retry_index, current.resubmit_index) == (0, 1)


def test_rule_fenced_after_the_evidence_window() -> None:
    story = Story(RETRY_ONCE)
    story.run_until_lost()
    verdict = story.fence("retry")
    assert_edge(verdict, I.LOST, I.UP_FOR_RETRY, "fenced_after_the_evidence_window")
    failing = Story()
    failing.run_until_lost()
    verdict = failing.fence("fail")
    assert_edge(verdict, I.LOST, I.FAILED, "fenced_after_the_evidence_window")


def test_rule_retry_opens_the_next_attempt() -> None:
    story = Story(RETRY_ONCE)
    story.open()
    story.ack()
    story.start()
    story.complete(1, "task_error")
    assert_edge(story.open(), I.UP_FOR_RETRY, I.SCHEDULED, "retry_opens_the_next_attempt")
    assert story.epoch == 2


def test_rule_rerun_clears_a_finished_instance() -> None:
    story = Story()
    story.open()
    story.ack()
    story.start()
    story.complete(1, "task_error")
    rerun = story.make(
        EventKind.ATTEMPT_OPENED,
        2,
        "scheduler",
        {"token_hash": "h", "reason": "rerun", "retry_index": 0, "resubmit_index": 0},
    )
    verdict = story.record(rerun)
    assert_edge(verdict, I.FAILED, I.SCHEDULED, "rerun_clears_a_finished_instance")


def test_rule_operator_clears_a_finished_instance() -> None:
    story = Story()
    story.open()
    story.ack()
    story.start()
    story.complete(1, "task_error")
    clear = story.make(
        EventKind.CLEARED, 2, "operator:alice", {"reason": "fixed", "scope": "failed"}
    )
    assert_edge(story.record(clear), I.FAILED, I.CREATED, "operator_clears_a_finished_instance")
    # The epoch the clear opened holds no attempt yet; the first one kept its record.
    assert story.epoch == 2 and story.snapshot.current is None
    assert story.snapshot.attempts[0].state is AttemptState.FAILED
    rerun = story.make(
        EventKind.ATTEMPT_OPENED,
        2,
        "scheduler",
        {"token_hash": "h", "reason": "rerun", "retry_index": 0, "resubmit_index": 0},
    )
    assert_edge(story.record(rerun), I.CREATED, I.SCHEDULED, "first_attempt_opens")
    assert story.epoch == 2


def test_a_cleared_instance_is_decided_again_by_its_rule() -> None:
    story = Story()
    story.send(EventKind.UPSTREAM_FAILED, 0, "scheduler", {"rule": "all_success"})
    story.send(EventKind.CLEARED, 1, "operator:alice", {"reason": "again", "scope": "downstream"})
    assert story.state is I.CREATED
    verdict = story.send(EventKind.UPSTREAM_FAILED, 1, "scheduler", {"rule": "all_success"})
    assert_edge(verdict, I.CREATED, I.UPSTREAM_FAILED, "trigger_rule_decides_before_any_attempt")


def test_only_a_finished_instance_is_cleared_and_only_as_a_rerun() -> None:
    story = Story()
    story.open()
    clear = story.make(EventKind.CLEARED, 2, "operator:alice", {"reason": "x", "scope": "tasks"})
    assert story.record(clear).outcome is Outcome.REJECTED
    story.ack()
    story.start()
    story.complete(0, "none")
    story.send(EventKind.CLEARED, 2, "operator:alice", {"reason": "x", "scope": "tasks"})
    first = story.make(
        EventKind.ATTEMPT_OPENED,
        2,
        "scheduler",
        {"token_hash": "h", "reason": "first", "retry_index": 0, "resubmit_index": 0},
    )
    assert story.record(first).outcome is Outcome.REJECTED


def test_rule_stronger_completion_overrules() -> None:
    story = Story()
    story.open()
    story.ack()
    story.start()
    story.engine(EngineState.FAILED, exit_code=1)
    assert story.state is I.FAILED
    verdict = story.complete(0)
    assert verdict.outcome is Outcome.CONFLICT
    assert_edge(verdict, I.FAILED, I.SUCCESS, "stronger_completion_overrules")


def test_rule_late_commit_marker_completes_the_success() -> None:
    story = Story(TaskPolicy(requires_commit=True))
    story.open()
    story.ack()
    story.start()
    committed = story.make(EventKind.OUTPUT_COMMITTED, 1, "worker", {"marker": "part=2026-03-01"})
    story.complete(0)
    assert story.state is I.FAILED  # exit 0 without the marker it requires, so far
    verdict = story.record(committed)
    assert_edge(verdict, I.FAILED, I.SUCCESS, "late_commit_marker_completes_the_success")


def test_rule_worker_report_beats_a_submit_failure() -> None:
    story = Story(RETRY_ONCE)
    story.open()
    story.submit_failed()
    verdict = story.start()
    assert_edge(verdict, I.UP_FOR_RETRY, I.RUNNING, "worker_report_beats_a_submit_failure")


def test_every_rule_has_a_test_named_after_it() -> None:
    module = sys.modules[__name__]
    missing = [
        r.name for r in transitions.INSTANCE_RULES if not hasattr(module, f"test_rule_{r.name}")
    ]
    assert missing == []


def test_an_edge_outside_the_table_is_illegal() -> None:
    with pytest.raises(IllegalTransition, match="RUNNING -> FAILED caused by lease_expired"):
        transitions.check_instance_edge(I.RUNNING, I.FAILED, EventKind.LEASE_EXPIRED)
    with pytest.raises(IllegalTransition):
        transitions.check_instance_edge(I.FAILED, I.RUNNING, EventKind.STARTED)


def test_queued_never_becomes_running_without_a_worker_report() -> None:
    for kind in (
        EventKind.SUBMIT_ACKNOWLEDGED,
        EventKind.ATTEMPT_OPENED,
        EventKind.ENGINE_OBSERVED,
    ):
        assert transitions.instance_rule(I.QUEUED, I.RUNNING, kind) is None
