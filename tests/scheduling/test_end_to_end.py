"""The scheduler end to end on SQLite and PostgreSQL, with real workers and real tasks.

Each test applies a definition, triggers it and ticks the scheduler until the run has
converged, then asserts what converged: states, attempts, the order of events, the run's
reason — and that every stored snapshot is the pure fold of its events.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from datetime import datetime, timedelta

import pytest

from tests.scheduling.conftest import MakeHarness
from tests.scheduling.harness import FAST, Harness, wait_for
from veritask.core.states import InstanceState, RunExecutionState, TriggerKind
from veritask.ledger.active_runs import ActiveRun
from veritask.scheduling import triggers
from veritask.scheduling.advance import Advanced, TickReport

I = InstanceState  # noqa: E741 - a short name for the many states below
R = RunExecutionState

FAST_POLICY = """\
defaults:
  retry: {max_retries: 2, backoff: fixed, delay: 0.2s, max_delay: 1s, jitter: 0}
  lease: 2s
  evidence_window: 2s
"""

pytestmark = pytest.mark.slow


def test_a_dag_with_retries_succeeds(harness: Harness) -> None:
    harness.apply(
        "name: dag\nconcurrency: allow\n"
        + FAST_POLICY
        + """\
tasks:
  extract: {run: "echo extract"}
  flaky: {run: '[ "$VERITASK_ATTEMPT_NO" -ge 2 ]', after: [extract]}
  other: {run: "true", after: [extract]}
  load: {run: "true", after: [flaky, other]}
"""
    )
    run_id = harness.trigger("dag")

    assert harness.finish(run_id) == (R.SUCCESS, "every leaf succeeded or was skipped")
    instances = harness.instances(run_id)
    assert {k: v.state for k, v in instances.items()} == {
        "extract": I.SUCCESS,
        "flaky": I.SUCCESS,
        "other": I.SUCCESS,
        "load": I.SUCCESS,
    }
    flaky = instances["flaky"]
    # The failed try keeps its record; the retry is attempt 2 of the same instance.
    assert [(n, state, code) for n, state, code, _ in harness.attempts(flaky.id)] == [
        (1, "FAILED", 1),
        (2, "SUCCESS", 0),
    ]
    assert harness.instance_states_path(flaky.id) == [
        "CREATED",
        "SCHEDULED",
        "QUEUED",
        "RUNNING",
        "UP_FOR_RETRY",
        "SCHEDULED",
        "QUEUED",
        "RUNNING",
        "SUCCESS",
    ]
    assert harness.instance_states_path(instances["load"].id)[-4:] == [
        "SCHEDULED",
        "QUEUED",
        "RUNNING",
        "SUCCESS",
    ]
    assert harness.assert_snapshots_are_folds() == 4


def test_trigger_rules_propagate_skips_and_upstream_failures(harness: Harness) -> None:
    harness.apply(
        """\
name: rules
concurrency: allow
tasks:
  broken: {run: "exit 3"}
  needs_broken: {run: "true", after: [broken]}
  needs_that: {run: "true", after: [needs_broken]}
  on_failure: {run: "true", after: [broken], trigger_rule: all_failed}
  skips_itself: {run: "exit 99"}
  needs_skipped: {run: "true", after: [skips_itself]}
  tolerant: {run: "true", after: [needs_skipped], trigger_rule: none_failed}
  finally: {run: "true", after: [needs_that, on_failure], trigger_rule: all_done}
"""
    )
    run_id = harness.trigger("rules")

    state, reason = harness.finish(run_id)
    assert harness.states(run_id) == {
        "broken": I.FAILED,
        "needs_broken": I.UPSTREAM_FAILED,
        "needs_that": I.UPSTREAM_FAILED,
        "on_failure": I.SUCCESS,
        "skips_itself": I.SKIPPED,
        "needs_skipped": I.SKIPPED,
        "tolerant": I.SUCCESS,
        "finally": I.SUCCESS,
    }
    # The leaves (finally, tolerant) decide: a failure inside the DAG that a leaf handled does
    # not fail the run.
    assert state is R.SUCCESS, reason
    instances = harness.instances(run_id)
    for skipped in ("needs_broken", "needs_that", "needs_skipped"):
        assert harness.attempts(instances[skipped].id) == [], f"{skipped} never ran"
    history = harness.history(instances["needs_that"].id)
    assert [(e.kind, e.actor) for e in history] == [
        ("instance_created", "scheduler"),
        ("upstream_failed", "scheduler"),
    ]
    harness.assert_snapshots_are_folds()


def test_mixed_upstream_states_decide_as_airflow(harness: Harness) -> None:
    """one_failed runs on an UPSTREAM_FAILED upstream and all_done_min_one_success is skipped
    by a skipped upstream even next to a success, as Airflow 3 decides (docs/trigger-rules.md)."""
    harness.apply(
        """\
name: mixed
concurrency: allow
tasks:
  broken: {run: "exit 3"}
  needs_broken: {run: "true", after: [broken]}
  alarm: {run: "true", after: [needs_broken], trigger_rule: one_failed}
  skips_itself: {run: "exit 99"}
  fine: {run: "true"}
  gathered: {run: "true", after: [fine, skips_itself], trigger_rule: all_done_min_one_success}
"""
    )
    run_id = harness.trigger("mixed")

    state, reason = harness.finish(run_id)
    assert harness.states(run_id) == {
        "broken": I.FAILED,
        "needs_broken": I.UPSTREAM_FAILED,
        "alarm": I.SUCCESS,
        "skips_itself": I.SKIPPED,
        "fine": I.SUCCESS,
        "gathered": I.SKIPPED,
    }
    assert state is R.SUCCESS, reason
    instances = harness.instances(run_id)
    assert harness.attempts(instances["gathered"].id) == [], "gathered never ran"
    harness.assert_snapshots_are_folds()


def test_the_run_state_comes_from_its_leaves(harness: Harness) -> None:
    harness.apply(
        """\
name: leaves
concurrency: allow
tasks:
  a: {run: "true"}
  failing_leaf: {run: "exit 1", after: [a]}
  good_leaf: {run: "true", after: [a]}
"""
    )
    run_id = harness.trigger("leaves")

    state, reason = harness.finish(run_id)
    assert state is R.FAILED
    assert "failing_leaf" in reason
    assert harness.states(run_id)["good_leaf"] is I.SUCCESS
    assert harness.run_history(run_id)[-1][:2] == ("RUNNING", "FAILED")


def settling(make_harness: MakeHarness, settle: timedelta) -> Harness:
    """A harness whose leaf successes wait ``settle``, and no full scan to read runs anyway."""
    return make_harness(
        settings=dataclasses.replace(FAST, leaf_settle=settle, full_scan_every=timedelta(minutes=1))
    )


def test_what_waits_on_a_task_opens_as_soon_as_the_task_succeeded(
    make_harness: MakeHarness,
) -> None:
    settle = timedelta(seconds=3)
    harness = settling(make_harness, settle)
    harness.apply(
        """\
name: settle
concurrency: allow
tasks:
  first: {run: "true"}
  then: {run: "true", after: [first]}
"""
    )
    run_id = harness.trigger("settle")

    harness.until(harness.state_is(run_id, "first", I.SUCCESS), what="first to succeed")
    first_done = time.monotonic()
    harness.until(lambda: harness.states(run_id)["then"] is not I.CREATED, what="then to open")
    assert time.monotonic() - first_done < settle.total_seconds()
    assert harness.finish(run_id) == (R.SUCCESS, "every leaf succeeded or was skipped")


def test_a_leaf_success_waits_for_more_news_unless_it_was_the_runs_last_task(
    make_harness: MakeHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    settle = timedelta(seconds=4)
    harness = settling(make_harness, settle)
    harness.apply(
        """\
name: leaves
concurrency: allow
tasks:
  quick: {run: "true"}
  slow: {run: "sleep 1"}
"""
    )
    advancer = harness.scheduler.advancer
    advanced_at: list[float] = []

    def advance(run: ActiveRun, now: datetime, report: TickReport) -> Advanced:
        advanced_at.append(time.monotonic())
        return original(run, now, report)

    original = advancer.advance
    monkeypatch.setattr(advancer, "advance", advance)
    run_id = harness.trigger("leaves")

    harness.until(harness.state_is(run_id, "quick", I.SUCCESS), what="quick to succeed")
    quick_done = time.monotonic()
    assert harness.finish(run_id) == (R.SUCCESS, "every leaf succeeded or was skipped")
    ended = time.monotonic()
    # The success of quick, a leaf with another task still running, did not make the loop
    # read the run; the success of slow, its last task, did, at once.
    assert len([moment for moment in advanced_at if moment > quick_done]) == 1
    assert ended - quick_done < settle.total_seconds()


def test_a_failing_leaf_ends_its_run_without_waiting(make_harness: MakeHarness) -> None:
    harness = make_harness(
        settings=dataclasses.replace(
            FAST, leaf_settle=timedelta(minutes=5), full_scan_every=timedelta(minutes=5)
        )
    )
    harness.apply("name: fails\nconcurrency: allow\ntasks:\n  bad: {run: 'exit 3'}\n")
    run_id = harness.trigger("fails")

    state, reason = harness.finish(run_id, timeout=20)
    assert state is R.FAILED
    assert "bad" in reason


def test_a_branch_skips_the_direct_downstream_tasks_it_did_not_choose(harness: Harness) -> None:
    harness.apply(
        """\
name: branching
concurrency: allow
tasks:
  choose:
    run: |
      printf '{"branch": ["left"]}' > "$VERITASK_OUTPUT"
  left: {run: "true", after: [choose]}
  right: {run: "true", after: [choose]}
  after_right: {run: "true", after: [right]}
  join: {run: "true", after: [left, right], trigger_rule: none_failed_min_one_success}
"""
    )
    run_id = harness.trigger("branching")

    assert harness.finish(run_id)[0] is R.SUCCESS
    assert harness.states(run_id) == {
        "choose": I.SUCCESS,
        "left": I.SUCCESS,
        "right": I.SKIPPED,
        "after_right": I.SKIPPED,
        "join": I.SUCCESS,
    }
    instances = harness.instances(run_id)
    skip = [e for e in harness.history(instances["right"].id) if e.kind == "skipped"]
    assert len(skip) == 1 and skip[0].reason is not None
    assert harness.attempts(instances["right"].id) == []
    harness.assert_snapshots_are_folds()


SLEEPER = """\
name: {name}
concurrency: {policy}
tasks:
  work: {{run: "sleep {seconds}"}}
"""


def test_concurrency_forbid_refuses_the_overlapping_run_without_creating_it(
    harness: Harness,
) -> None:
    harness.apply(SLEEPER.format(name="forbidden", policy="forbid", seconds=30))
    first = harness.trigger("forbidden")
    harness.until(harness.state_is(first, "work", I.RUNNING), what="the first run to run")

    with pytest.raises(triggers.Overlap) as refused:
        triggers.trigger(
            harness.ledger, name="forbidden", kind=TriggerKind.MANUAL, actor="operator:test"
        )

    assert "forbid" in str(refused.value) and first in str(refused.value)
    assert [run_id for run_id, _, _ in harness.runs()] == [first]
    triggers.request_run_cancel(harness.ledger, first, actor="operator:test", reason="done")
    assert harness.finish(first)[0] is R.CANCELLED


def test_concurrency_queue_starts_the_next_run_when_the_active_one_ends(harness: Harness) -> None:
    harness.apply(SLEEPER.format(name="queued", policy="queue", seconds=0.3))
    first = harness.trigger("queued")
    second = harness.trigger("queued")
    assert harness.run(second)[0] is R.QUEUED

    assert harness.finish(first)[0] is R.SUCCESS
    assert harness.finish(second)[0] is R.SUCCESS
    history = harness.run_history(second)
    assert [(a, b) for a, b, _ in history] == [
        (None, "QUEUED"),
        ("QUEUED", "RUNNING"),
        ("RUNNING", "SUCCESS"),
    ]
    # The second run's task started only after the first run's task ended.
    first_work = harness.instances(first)["work"].id
    second_work = harness.instances(second)["work"].id
    assert _first_position(harness, second_work, "started") > _first_position(
        harness, first_work, "completed"
    )


def test_concurrency_replace_cancels_the_active_run_then_starts(harness: Harness) -> None:
    harness.apply(SLEEPER.format(name="replaced", policy="replace", seconds=30))
    first = harness.trigger("replaced")
    harness.until(harness.state_is(first, "work", I.RUNNING), what="the first run to run")

    second = harness.trigger("replaced")

    assert harness.run(first)[0] is R.CANCELLING
    assert harness.finish(first)[0] is R.CANCELLED
    first_work = harness.instances(first)["work"]
    assert first_work.state is I.CANCELLED
    assert "CANCELLING" in harness.instance_states_path(first_work.id)
    harness.until(harness.state_is(second, "work", I.RUNNING), what="the second run to run")
    assert [(a, b) for a, b, _ in harness.run_history(second)][:2] == [
        (None, "QUEUED"),
        ("QUEUED", "RUNNING"),
    ]
    triggers.request_run_cancel(harness.ledger, second, actor="operator:test", reason="done")
    assert harness.finish(second)[0] is R.CANCELLED


def test_cron_fires_due_runs_once_with_a_bounded_catch_up(harness: Harness) -> None:
    harness.apply(
        """\
name: every_five_minutes
concurrency: allow
schedule:
  cron: "*/5 * * * *"
  catchup: {enabled: true, max_runs: 3}
tasks:
  work: {run: "true"}
"""
    )
    in_two_hours = harness.ledger.clock() + timedelta(hours=2)
    newest = in_two_hours.replace(
        minute=in_two_hours.minute - in_two_hours.minute % 5, second=0, microsecond=0
    )
    later = newest + timedelta(minutes=1)

    fired = triggers.fire_schedules(harness.ledger, later)

    assert fired == 3  # about 24 fire times were missed; catch-up keeps the 3 most recent
    runs = harness.runs()
    assert len(runs) == 3
    expected = [newest - timedelta(minutes=5 * n) for n in (2, 1, 0)]
    assert [key for _, _, key in runs] == [f"every_five_minutes@{t.isoformat()}" for t in expected]
    assert triggers.fire_schedules(harness.ledger, later) == 0  # a repeated fire: no duplicate
    assert triggers.fire_schedules(harness.ledger, later + timedelta(seconds=30)) == 0
    assert triggers.fire_schedules(harness.ledger, newest + timedelta(minutes=5)) == 1
    assert len(harness.runs()) == 4
    for run_id, _, _ in harness.runs():
        assert harness.finish(run_id)[0] is R.SUCCESS


def test_a_timeout_is_confirmed_as_timeout(harness: Harness) -> None:
    harness.apply(
        """\
name: slow
concurrency: allow
tasks:
  work: {run: "sleep 30", timeout: 1s}
"""
    )
    run_id = harness.trigger("slow")

    state, reason = harness.finish(run_id)

    work = harness.instances(run_id)["work"]
    assert work.state is I.TIMEOUT
    assert state is R.FAILED, reason
    [(number, attempt_state, _, external_id)] = harness.attempts(work.id)
    assert (number, attempt_state) == (1, "TIMEOUT")
    assert external_id is not None
    seen = harness.executor.describe(external_id=external_id)
    assert seen.ended and seen.error_category is not None
    assert seen.error_category.value in ("timeout", "cancelled")
    harness.assert_snapshots_are_folds()


def test_a_cancel_is_confirmed_by_the_engine(harness: Harness) -> None:
    harness.apply(
        """\
name: cancelled
concurrency: allow
tasks:
  work: {run: "sleep 30"}
  later: {run: "true", after: [work]}
"""
    )
    run_id = harness.trigger("cancelled")
    harness.until(harness.state_is(run_id, "work", I.RUNNING), what="work to run")

    assert (
        triggers.request_run_cancel(harness.ledger, run_id, actor="operator:test", reason="stop")
        is R.CANCELLING
    )
    state, reason = harness.finish(run_id)

    assert state is R.CANCELLED, reason
    instances = harness.instances(run_id)
    assert instances["work"].state is I.CANCELLED
    assert instances["later"].state is I.CANCELLED
    path = harness.instance_states_path(instances["work"].id)
    assert path[-2:] == ["CANCELLING", "CANCELLED"]
    [(_, attempt_state, _, external_id)] = harness.attempts(instances["work"].id)
    assert attempt_state == "CANCELLED"
    assert external_id is not None
    assert harness.executor.describe(external_id=external_id).ended
    harness.assert_snapshots_are_folds()


def _first_position(harness: Harness, instance_id: str, kind: str) -> int:
    """Where the instance's first event of this kind is in the ledger's global order."""
    return next(e.position for e in harness.history(instance_id) if e.kind == kind)


def test_the_loop_can_be_stopped_and_started_again(harness: Harness) -> None:
    """``Scheduler.run`` as the services' runtime uses it: stopped, then started again."""
    harness.apply(SLEEPER.format(name="looped", policy="allow", seconds=0.1))
    for _ in range(2):
        run_id = harness.trigger("looped")
        stop = threading.Event()
        loop = threading.Thread(target=harness.scheduler.run, args=(stop,))
        loop.start()
        try:
            wait_for(
                lambda: harness.run(run_id)[0] is R.SUCCESS,  # noqa: B023 - polled at once
                what="the run to succeed under the loop",
            )
        finally:
            stop.set()
            loop.join(timeout=30)
        assert not loop.is_alive()


def test_the_loop_gathers_reports_only_while_many_attempts_are_in_flight(
    make_harness: MakeHarness,
) -> None:
    harness = make_harness(
        settings=dataclasses.replace(FAST, gather_window=timedelta(milliseconds=200), gather_from=3)
    )
    harness.apply(
        "name: wide\nconcurrency: allow\ntasks:\n"
        + "".join(f"  t{n}: {{run: 'sleep 1'}}\n" for n in range(4))
    )
    gathering = harness.scheduler.gathering
    run_id = harness.trigger("wide")

    harness.until(lambda: gathering.in_flight == 4, what="four attempts in flight")
    assert gathering.pause_after(tick_started=time.monotonic()) > 0
    assert harness.finish(run_id)[0] is R.SUCCESS
    assert gathering.in_flight == 0
    assert gathering.pause_after(tick_started=time.monotonic()) == 0.0
