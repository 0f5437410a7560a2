"""Runs started by published data (``trigger: {on_published: …}``), on SQLite and PostgreSQL.

Upstream runs are made PUBLISHED by moving their states in the ledger, as the scheduler's
publication phase does at its end: what is under test is what a publication starts, not how
a run gets published (tests/scheduling/test_end_to_end.py covers that).
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from tests.scheduling.harness import SECRET, Harness
from tests.scheduling.publications import downstream, published_run, upstream
from veritask.core.states import DefinitionLifecycle, RunExecutionState, TriggerKind
from veritask.definitions.errors import DefinitionError
from veritask.ledger import definitions as definition_store
from veritask.ledger import dialects, retention, run_upstreams, schema
from veritask.ledger.ledger import Ledger
from veritask.scheduling import publication_triggers
from veritask.scheduling.scheduler import Scheduler
from veritask.scheduling.tokens import AttemptTokens

MONDAY = datetime(2026, 3, 2, tzinfo=UTC)
TUESDAY = MONDAY + timedelta(days=1)


def started_runs(ledger: Ledger) -> list[tuple[str, datetime | None, str, list[str]]]:
    """The downstream's runs: id, logical time, execution state, upstream runs."""
    r, d = schema.runs.c, schema.definitions.c
    with dialects.read_transaction(ledger.engine) as connection:
        rows = connection.execute(
            sa.select(r.id, r.logical_time, r.execution_state, r.trigger_kind)
            .join(schema.definitions, d.id == r.definition_id)
            .where(d.name == "report")
            .order_by(r.created_at, r.id)
        ).all()
        found = []
        for row in rows:
            assert row.trigger_kind == TriggerKind.PUBLISHED.value
            ups = [u.run_id for u in run_upstreams.upstream_runs(connection, row.id)]
            found.append((row.id, row.logical_time, row.execution_state, ups))
    return found


def start(ledger: Ledger) -> int:
    return publication_triggers.start_published_runs(ledger)


def test_a_run_starts_when_the_upstream_publishes(harness: Harness) -> None:
    ledger = harness.ledger
    harness.apply(upstream("users"))
    harness.apply(downstream("users"))
    assert start(ledger) == 0
    users = published_run(ledger, "users", MONDAY)

    assert start(ledger) == 1
    [(run_id, logical_time, state, ups)] = started_runs(ledger)
    assert (logical_time, state, ups) == (MONDAY, "RUNNING", [users])
    assert start(ledger) == 0  # answered: a second pass finds the run
    e = schema.events.c
    with dialects.read_transaction(ledger.engine) as connection:
        key = connection.execute(
            sa.select(schema.runs.c.idempotency_key).where(schema.runs.c.id == run_id)
        ).scalar_one()
        evidence = connection.execute(
            sa.select(e.evidence).where(e.run_id == run_id, e.kind == "run_created")
        ).scalar_one()
    assert key == f"report@published:{MONDAY.isoformat()}"
    assert evidence["upstream_runs"] == [users]
    assert evidence["trigger_kind"] == "published"


def test_all_waits_for_every_upstream_of_the_same_logical_time(harness: Harness) -> None:
    ledger = harness.ledger
    for name in ("users", "orders"):
        harness.apply(upstream(name))
    harness.apply(downstream("users", "orders"))
    users = published_run(ledger, "users", MONDAY)
    published_run(ledger, "orders", TUESDAY)  # another day: it completes nothing
    assert start(ledger) == 0
    assert started_runs(ledger) == []

    orders = published_run(ledger, "orders", MONDAY)
    assert start(ledger) == 1
    [(_, logical_time, _, ups)] = started_runs(ledger)
    assert logical_time == MONDAY
    assert sorted(ups) == sorted([users, orders])
    # A second publication of Monday's users (a rerun) starts no second run.
    published_run(ledger, "users", MONDAY)
    assert start(ledger) == 0


def test_logical_times_one_upstream_never_publishes_hold_back_none_behind_them(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run_upstreams, "BATCH", 2)  # fewer than the incomplete days below
    ledger = harness.ledger
    for name in ("users", "orders"):
        harness.apply(upstream(name))
    harness.apply(downstream("users", "orders"))
    for day in range(3):
        published_run(ledger, "users", MONDAY + timedelta(days=day))
    thursday = MONDAY + timedelta(days=3)
    published_run(ledger, "users", thursday)
    published_run(ledger, "orders", thursday)

    assert start(ledger) == 1
    assert [t for _, t, _, _ in started_runs(ledger)] == [thursday]


def test_any_starts_one_run_per_upstream_run(harness: Harness) -> None:
    ledger = harness.ledger
    for name in ("users", "orders"):
        harness.apply(upstream(name))
    harness.apply(downstream("users", "orders", when="any"))
    users = published_run(ledger, "users", MONDAY)
    orders = published_run(ledger, "orders", MONDAY)
    again = published_run(ledger, "users", MONDAY)

    assert start(ledger) == 3
    assert start(ledger) == 0
    found = started_runs(ledger)
    assert sorted(ups[0] for _, _, _, ups in found) == sorted([users, orders, again])
    assert all(len(ups) == 1 and t == MONDAY for _, t, _, ups in found)


def test_publications_before_the_apply_start_nothing(harness: Harness) -> None:
    ledger = harness.ledger
    harness.apply(upstream("users"))
    published_run(ledger, "users", MONDAY)
    harness.apply(downstream("users"))

    assert start(ledger) == 0
    published_run(ledger, "users", TUESDAY)
    assert start(ledger) == 1
    assert [t for _, t, _, _ in started_runs(ledger)] == [TUESDAY]


def test_a_disabled_definition_starts_nothing_and_enabling_it_does_not_catch_up(
    harness: Harness,
) -> None:
    ledger = harness.ledger
    harness.apply(upstream("users"))
    harness.apply(downstream("users"))
    move(ledger, DefinitionLifecycle.ACTIVE, DefinitionLifecycle.DISABLED)
    published_run(ledger, "users", MONDAY)
    assert start(ledger) == 0

    move(ledger, DefinitionLifecycle.DISABLED, DefinitionLifecycle.ACTIVE)
    assert start(ledger) == 0
    published_run(ledger, "users", TUESDAY)
    assert start(ledger) == 1
    assert [t for _, t, _, _ in started_runs(ledger)] == [TUESDAY]


def move(ledger: Ledger, current: DefinitionLifecycle, target: DefinitionLifecycle) -> None:
    with ledger.engine.begin() as connection:
        heading = definition_store.definition_heading(connection, "report")
        assert heading is not None
        assert definition_store.move_lifecycle(
            connection, heading.id, current=current.value, target=target.value, now=ledger.clock()
        )


def test_forbid_records_the_refused_run_cancelled_and_does_not_retry_it(
    harness: Harness,
) -> None:
    ledger = harness.ledger
    harness.apply(upstream("users"))
    harness.apply(downstream("users", when="any", concurrency="forbid"))
    published_run(ledger, "users", MONDAY)
    assert start(ledger) == 1
    published_run(ledger, "users", TUESDAY)

    assert start(ledger) == 1
    [(first, _, running, _), (_, _, refused, _)] = started_runs(ledger)
    assert (running, refused) == ("RUNNING", "CANCELLED")
    assert first in harness.run(started_runs(ledger)[1][0])[1]  # the reason names the run
    assert start(ledger) == 0


def test_the_scheduler_starts_it_and_after_a_restart_picks_up_what_was_missed(
    harness: Harness,
) -> None:
    ledger = harness.ledger
    harness.apply(upstream("users"))
    harness.apply(downstream("users", when="any"))
    monday = published_run(ledger, "users", MONDAY)
    harness.tick()
    assert [ups for _, _, _, ups in started_runs(ledger)] == [[monday]]
    harness.scheduler.close()

    tuesday = published_run(ledger, "users", TUESDAY)  # while no scheduler runs
    restarted = Scheduler(
        Ledger(harness.engine),
        executors={"local": harness.executor},
        tokens=AttemptTokens(SECRET.encode()),
        outbox=harness.home / "outbox",
        settings=harness.scheduler.settings,
    )
    harness.scheduler = restarted
    restarted.recover()
    restarted.tick()
    restarted.tick()
    assert [ups for _, _, _, ups in started_runs(ledger)] == [[monday], [tuesday]]


def test_two_schedulers_at_once_start_it_once(harness: Harness) -> None:
    harness.apply(upstream("users"))
    harness.apply(upstream("orders"))
    harness.apply(downstream("users", "orders"))
    published_run(harness.ledger, "users", MONDAY)
    published_run(harness.ledger, "orders", MONDAY)
    engines = [dialects.create_engine(harness.url) for _ in range(2)]
    barrier = threading.Barrier(len(engines))
    made: list[int] = []

    def one_scheduler(engine: sa.Engine) -> None:
        ledger = Ledger(engine)
        barrier.wait(timeout=30)
        made.append(start(ledger))

    try:
        threads = [threading.Thread(target=one_scheduler, args=(e,)) for e in engines]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    finally:
        for engine in engines:
            engine.dispose()
    assert sorted(made) == [0, 1]
    [(_, _, _, ups)] = started_runs(harness.ledger)
    assert len(ups) == 2


def test_apply_refuses_an_upstream_without_publish_and_a_dropped_publish(
    harness: Harness,
) -> None:
    harness.apply("name: raw\ntasks:\n  t: {run: 'true'}\n")
    with pytest.raises(DefinitionError) as refused:
        harness.apply(downstream("raw"))
    assert [(p.field, p.line) for p in refused.value.problems] == [("trigger.on_published[0]", 3)]
    assert "has no publish section" in refused.value.problems[0].message

    harness.apply(upstream("users"))
    harness.apply(downstream("users", "not_yet_applied"))  # checked when it is applied
    with pytest.raises(DefinitionError) as dropped:
        harness.apply("name: users\ntasks:\n  t: {run: 'true'}\n")
    assert [p.field for p in dropped.value.problems] == ["publish"]
    assert "'report'" in dropped.value.problems[0].message
    with pytest.raises(DefinitionError):
        harness.apply("name: not_yet_applied\ntasks:\n  t: {run: 'true'}\n")


@pytest.mark.slow
def test_a_real_publication_starts_a_run_that_runs(harness: Harness) -> None:
    harness.apply(upstream("users"))
    harness.apply(downstream("users"))
    users = harness.trigger("users")
    harness.finish(users)

    def started() -> str | None:
        found = started_runs(harness.ledger)
        return found[0][0] if found else None

    run_id = harness.until(started, what="the run the publication starts")
    assert harness.finish(run_id)[0] is RunExecutionState.SUCCESS
    [(_, logical_time, _, ups)] = started_runs(harness.ledger)
    assert ups == [users]
    with dialects.read_transaction(harness.engine) as connection:
        upstream_time = connection.execute(
            sa.select(schema.runs.c.logical_time).where(schema.runs.c.id == users)
        ).scalar_one()
    assert logical_time == upstream_time


def test_purging_a_started_run_purges_its_evidence_and_an_upstreams_keeps_it(
    harness: Harness,
) -> None:
    ledger = harness.ledger
    harness.apply(upstream("users"))
    harness.apply(downstream("users", when="any"))
    users = published_run(ledger, "users", MONDAY)
    start(ledger)
    [(run_id, _, _, _)] = started_runs(ledger)
    with ledger.engine.begin() as connection:
        retention.delete_run_snapshots(connection, [users])  # no key holds the evidence's end
    with dialects.read_transaction(ledger.engine) as connection:
        assert run_upstreams.upstream_runs(connection, run_id) == [
            run_upstreams.UpstreamRun(users, None)
        ]
    with ledger.engine.begin() as connection:
        retention.delete_run_snapshots(connection, [run_id])
    with dialects.read_transaction(ledger.engine) as connection:
        assert run_upstreams.upstream_runs(connection, run_id) == []
