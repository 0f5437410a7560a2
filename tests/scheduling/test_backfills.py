"""Backfills and ``concurrency: forbid`` with a real scheduler, ticked in this process."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

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
