"""Backfills and ``concurrency: forbid`` with a real scheduler, ticked in this process."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tests.scheduling.conftest import MakeHarness
from tests.scheduling.harness import Harness
from veritask.core.states import InstanceState as I
from veritask.core.states import RunExecutionState as R
from veritask.core.states import TriggerKind
from veritask.ledger import backfills as store
from veritask.ledger import dialects, queries
from veritask.ledger.vocabulary import SubjectType
from veritask.scheduling import backfills, triggers

DAILY = """\
name: {name}
concurrency: {policy}
schedule: {{cron: "0 0 * * *", timezone: UTC}}
tasks:
  work: {{run: "sleep {seconds}"}}
"""


def _definition_events(harness: Harness, name: str) -> list[tuple[str, str | None]]:
    with dialects.read_transaction(harness.engine) as connection:
        row = queries.get_definition(connection, name=name)
        assert row is not None
        events = queries.history(
            connection, subject_type=SubjectType.DEFINITION, subject_id=row.id, limit=100
        )
    return [(event.kind, event.reason) for event in events]


def test_forbid_refuses_a_manual_trigger_at_the_request(harness: Harness) -> None:
    harness.apply(DAILY.format(name="forbidden", policy="forbid", seconds=30))
    first = harness.trigger("forbidden", key="first")
    harness.until(harness.state_is(first, "work", I.RUNNING), what="the first run to run")

    with pytest.raises(triggers.Overlap) as refused:
        harness.trigger("forbidden")

    assert refused.value.active_run_ids == [first]
    assert first in str(refused.value) and "forbid" in str(refused.value)
    assert [run_id for run_id, _, _ in harness.runs()] == [first]  # nothing was created
    assert harness.trigger("forbidden", key="first") == first  # asking again is the same run
    triggers.request_run_cancel(harness.ledger, first, actor="operator:test", reason="done")
    assert harness.finish(first)[0] is R.CANCELLED


def test_a_scheduled_run_forbid_refuses_is_skipped_and_its_interval_backfills(
    harness: Harness,
) -> None:
    harness.apply(DAILY.format(name="nightly", policy="forbid", seconds=30))
    first = harness.trigger("nightly")
    harness.until(harness.state_is(first, "work", I.RUNNING), what="the first run to run")
    midnight = (datetime.now(UTC) + timedelta(days=1)).replace(
        hour=0, minute=0, second=0, microsecond=0
    )

    assert triggers.fire_schedules(harness.ledger, midnight + timedelta(minutes=5)) == 0
    assert triggers.fire_schedules(harness.ledger, midnight + timedelta(minutes=6)) == 0

    assert [run_id for run_id, _, _ in harness.runs()] == [first]  # no CANCELLED run
    skips = [r for kind, r in _definition_events(harness, "nightly") if kind == "schedule_skipped"]
    assert len(skips) == 1 and skips[0] is not None and first in skips[0]
    started = backfills.start_backfill(
        harness.ledger,
        backfills.Request(
            name="nightly",
            start=midnight,
            end=midnight + timedelta(hours=1),
            actor="operator:test",
            parameters={},
        ),
    )
    [interval] = started.intervals
    assert interval.action == "create"  # the skipped fire time holds no run
    runs = harness.runs()
    assert len(runs) == 2
    assert runs[1][2] == f"nightly@{midnight.isoformat()}"
    assert runs[1][1] is R.QUEUED  # a backfill waits its turn behind the active run
    triggers.request_run_cancel(harness.ledger, first, actor="operator:test", reason="done")
    harness.finish(first)


def test_max_active_runs_paces_a_backfill_through_the_scheduler(harness: Harness) -> None:
    harness.apply(DAILY.format(name="paced", policy="allow", seconds=0.2))
    start = datetime(2026, 3, 1, tzinfo=UTC)
    started = backfills.start_backfill(
        harness.ledger,
        backfills.Request(
            name="paced",
            start=start,
            end=start + timedelta(days=5),
            actor="operator:test",
            parameters={},
            max_active_runs=2,
            reason="pacing",
        ),
    )
    backfill_id = started.backfill_id
    assert backfill_id is not None and len(started.intervals) == 5
    assert len(harness.runs()) == 2
    most_active = 0

    def done() -> bool:
        nonlocal most_active
        with dialects.read_transaction(harness.engine) as connection:
            most_active = max(most_active, store.active_run_count(connection, backfill_id))
            row = store.get(connection, backfill_id)
        return row is not None and row.state == store.DONE

    harness.until(done, what="the backfill to finish")

    assert most_active == 2
    # The schedule fires its own latest fire time beside: the backfill's are in March.
    runs = [run for run in harness.runs() if run[2].startswith("paced@2026-03-")]
    assert len(runs) == 5 and {state for _, state, _ in runs} == {R.SUCCESS}
    with dialects.read_transaction(harness.engine) as connection:
        counts = store.progress(connection, [backfill_id])[backfill_id]
        kinds = {queries.get_run(connection, run_id).trigger_kind for run_id, _, _ in runs}  # type: ignore[union-attr]
    assert counts == {R.SUCCESS.value: 5}
    assert kinds == {TriggerKind.BACKFILL.value}


FLAKY_DAILY = """\
name: flaky_daily
concurrency: allow
schedule: {{cron: "0 0 * * *", timezone: UTC}}
defaults: {{retry: {{max_retries: 0}}, timeout: 30s}}
tasks:
  extract: {{run: "true"}}
  flaky: {{run: 'test -e "{marker}"', after: [extract]}}
  load: {{run: "true", after: [flaky]}}
"""


def test_existing_failed_clears_the_failed_run_of_an_interval_and_it_succeeds(
    harness: Harness,
) -> None:
    marker = harness.home / "fixed"
    harness.apply(FLAKY_DAILY.format(marker=marker))
    start = datetime(2026, 4, 1, tzinfo=UTC)

    def request(existing: str, reason: str) -> backfills.Request:
        return backfills.Request(
            name="flaky_daily",
            start=start,
            end=start + timedelta(days=2),
            actor="operator:alice",
            parameters={},
            max_active_runs=2,
            existing=existing,
            reason=reason,
        )

    first = backfills.start_backfill(harness.ledger, request("skip", "first load"))

    def april() -> list[str]:  # the schedule fires its own latest fire time beside
        return [run_id for run_id, _, key in harness.runs() if "@2026-04-" in key]

    runs = {run_id: harness.finish(run_id)[0] for run_id in april()}
    assert sorted(runs.values()) == [R.FAILED, R.FAILED]
    failed = {interval.logical_time: interval for interval in first.intervals}
    marker.touch()  # the operator fixes the cause

    _, _, intervals = backfills.plan(harness.ledger, request("failed", "disk fixed"))
    assert [(i.action, i.existing_state) for i in intervals] == [("clear", "FAILED")] * 2
    cleared = backfills.start_backfill(harness.ledger, request("failed", "disk fixed"))
    assert cleared.backfill_id is not None and cleared.created

    with dialects.read_transaction(harness.engine) as connection:
        stood = {
            i.logical_time: i.run_id for i in store.intervals_of(connection, cleared.backfill_id)
        }
    assert set(stood.values()) == set(runs)  # the same runs, cleared: no new run
    assert len(april()) == 2
    for run_id in stood.values():
        assert run_id is not None
        assert harness.finish(run_id)[0] is R.SUCCESS
        flaky = harness.instances(run_id)["flaky"].id
        assert [(n, state) for n, state, _, _ in harness.attempts(flaky)] == [
            (1, "FAILED"),
            (2, "SUCCESS"),
        ]
        reopened = [r for a, b, r in harness.run_history(run_id) if (a, b) == ("FAILED", "RUNNING")]
        assert reopened == [
            f"cleared by operator:alice (backfill {cleared.backfill_id} (existing: failed): "
            "disk fixed): flaky, load to run again"
        ]
    assert all(failed[moment].action == "create" for moment in stood)

    def done() -> bool:
        with dialects.read_transaction(harness.engine) as connection:
            row = store.get(connection, cleared.backfill_id or "")
        return row is not None and row.state == store.DONE

    harness.until(done, what="the clearing backfill to finish")
    with dialects.read_transaction(harness.engine) as connection:
        counts = store.progress(connection, [cleared.backfill_id])[cleared.backfill_id]
    assert counts == {R.SUCCESS.value: 2}
    # Asked again, every interval has a run that succeeded: nothing to clear.
    again = backfills.plan(harness.ledger, request("failed", "disk fixed"))[2]
    assert [i.action for i in again] == ["skip", "skip"]


CATCHING_UP = """\
name: catching_up
concurrency: allow
schedule:
  cron: "0 0 * * *"
  timezone: UTC
  catchup: {enabled: true}
tasks:
  work: {run: "true"}
"""


def test_a_backfilled_old_day_does_not_wake_catch_up(make_harness: MakeHarness) -> None:
    applied = datetime(2026, 6, 10, 12, 0, tzinfo=UTC)
    now = [applied]
    harness = make_harness(clock=lambda: now[0])
    harness.apply(CATCHING_UP)
    old_day = datetime(2026, 5, 15, tzinfo=UTC)
    started = backfills.start_backfill(
        harness.ledger,
        backfills.Request(
            name="catching_up",
            start=old_day,
            end=old_day + timedelta(hours=1),
            actor="operator:test",
            parameters={},
        ),
    )
    assert [interval.action for interval in started.intervals] == ["create"]

    def scheduled() -> list[str]:
        with dialects.read_transaction(harness.engine) as connection:
            found = [queries.get_run(connection, run_id) for run_id, _, _ in harness.runs()]
        return sorted(
            run.idempotency_key
            for run in found
            if run is not None and run.trigger_kind == TriggerKind.SCHEDULE.value
        )

    harness.tick()
    now[0] = applied + timedelta(minutes=30)
    harness.tick()

    # Not one run for the 26 fire times between the backfilled day and the apply.
    assert scheduled() == []
    assert len(harness.runs()) == 1
    now[0] = datetime(2026, 6, 11, 0, 5, tzinfo=UTC)
    harness.tick()
    assert scheduled() == ["catching_up@2026-06-11T00:00:00+00:00"]
