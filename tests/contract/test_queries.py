"""The reads the scheduler, the monitor and the API rely on return what they should."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from tests.contract import builders
from veritask.core import states
from veritask.ledger import (
    dialects,
    errors,
    pagination,
    queries,
    run_store,
    runs,
    schema,
    vocabulary,
)

T0 = builders.T0
I = states.InstanceState  # noqa: E741
A = states.AttemptState

SubjectType = vocabulary.SubjectType


def _set_instance(connection: Connection, instance_id: str, **values: object) -> None:
    connection.execute(
        schema.task_instances.update()
        .where(schema.task_instances.c.id == instance_id)
        .values(values)
    )


def _open_attempt(
    connection: Connection, instance_id: str, attempt_no: int, state: A, lease: datetime | None
) -> None:
    runs.insert_attempt(connection, instance_id=instance_id, attempt_no=attempt_no, state=state)
    connection.execute(
        schema.attempts.update()
        .where(
            schema.attempts.c.instance_id == instance_id,
            schema.attempts.c.attempt_no == attempt_no,
        )
        .values(lease_expires_at=lease, progress_phase="copying", progress_done=3)
    )


def test_aware_datetimes_round_trip_as_utc(engine: Engine) -> None:
    shanghai = timezone(timedelta(hours=8))
    local = datetime(2024, 5, 1, 10, 0, 0, 123456, tzinfo=shanghai)
    with engine.begin() as connection:
        definition = builders.a_definition(connection)
        run_id = builders.a_run(connection, definition, key="k", logical_time=local)

    with dialects.read_transaction(engine) as connection:
        run = queries.get_run(connection, run_id)

    assert run is not None
    assert run.logical_time is not None
    assert run.logical_time == local
    assert run.logical_time.tzinfo is UTC
    assert run.logical_time.isoformat() == "2024-05-01T02:00:00.123456+00:00"
    assert run.created_at == T0
    assert run.created_at.tzinfo is UTC


def test_naive_datetimes_are_refused(engine: Engine) -> None:
    with engine.begin() as connection:
        definition = builders.a_definition(connection)
        with pytest.raises(sa.exc.StatementError, match="naive datetime"):
            builders.a_run(connection, definition, key="k", created_at=datetime(2024, 5, 1))


def test_sweep_pages_and_late_retries(engine: Engine) -> None:
    with engine.begin() as connection:
        run_id = builders.a_run(connection, builders.a_definition(connection), key="r")
        ids = {
            key: builders.an_instance(connection, run_id, key, state=state)
            for key, state in [
                ("created", I.CREATED),
                ("running", I.RUNNING),
                ("lost", I.LOST),
                ("done", I.SUCCESS),
                ("late", I.UP_FOR_RETRY),
                ("due", I.UP_FOR_RETRY),
                ("skipped", I.SKIPPED),
            ]
        }
        _set_instance(connection, ids["late"], retry_at=T0 - timedelta(minutes=5))
        _set_instance(connection, ids["due"], retry_at=T0 + timedelta(minutes=1))

    wanted = [I.CREATED, I.RUNNING, I.LOST, I.UP_FOR_RETRY]
    with dialects.read_transaction(engine) as connection:
        running = queries.sweep_page(connection, [I.RUNNING], after="", limit=10)
        first_page = queries.sweep_page(connection, wanted, after="", limit=2)
        rest = queries.sweep_page(connection, wanted, after=first_page[-1].id, limit=10)
        late = queries.late_retries(connection, before=T0, limit=10)
        none_late = queries.late_retries(connection, before=T0 - timedelta(hours=1), limit=10)

    expected = sorted(ids[key] for key in ("created", "running", "lost", "late", "due"))
    assert [row.id for row in running] == [ids["running"]]
    assert running[0].state is I.RUNNING
    assert running[0].run_id == run_id
    assert running[0].attempt_state is None  # no attempt opened yet
    assert len(first_page) == 2
    assert [row.id for row in first_page + rest] == expected
    assert [row.id for row in late] == [ids["late"]]
    assert late[0].retry_at == T0 - timedelta(minutes=5)
    assert late[0].run_id == run_id
    assert none_late == []


def test_a_sweep_row_carries_the_current_attempt_only(engine: Engine) -> None:
    with engine.begin() as connection:
        run_id = builders.a_run(connection, builders.a_definition(connection), key="r")
        retried = builders.an_instance(connection, run_id, "retried", state=I.RUNNING)
        _open_attempt(connection, retried, 1, A.FAILED, T0 - timedelta(hours=1))
        _open_attempt(connection, retried, 2, A.RUNNING, T0 - timedelta(seconds=1))
        _set_instance(connection, retried, epoch=2)

    with dialects.read_transaction(engine) as connection:
        (row,) = queries.sweep_page(connection, [I.RUNNING], after="", limit=10)

    assert (row.id, row.epoch) == (retried, 2)
    assert row.attempt_state is A.RUNNING
    assert row.lease_expires_at == T0 - timedelta(seconds=1)
    assert json.loads(row.policy) == builders.POLICY


def test_newest_publication_and_logical_times_and_pages(engine: Engine) -> None:
    with engine.begin() as connection:
        definition = builders.a_definition(connection)
        other = builders.a_definition(connection, "other")
        run_ids = [
            builders.a_run(
                connection,
                definition,
                key=f"daily@{day}",
                logical_time=T0 + timedelta(days=day),
                created_at=T0 + timedelta(minutes=day % 3),  # ties on created_at
            )
            for day in range(7)
        ]
        builders.a_run(connection, other, key="other", logical_time=T0)
        manual = builders.a_run(connection, other, key="manual", created_at=T0 + timedelta(hours=1))
        for run_id, publication in [
            (run_ids[2], states.PublicationState.PUBLISHED),
            (manual, states.PublicationState.PUBLISHING),
        ]:
            connection.execute(
                schema.runs.update()
                .where(schema.runs.c.id == run_id)
                .values(publication_state=publication.value)
            )

    with dialects.read_transaction(engine) as connection:
        latest = run_store.latest_logical_times(connection, {definition[0]: T0, other[0]: T0})
        # Scheduled runs before the floor (the definition's apply) are not read.
        after_floor = run_store.latest_logical_times(
            connection, {definition[0]: T0 + timedelta(days=7)}
        )
        of_day_2 = run_store.latest_publication(
            connection, "daily_user_sync", T0 + timedelta(days=2)
        )
        of_day_3 = run_store.latest_publication(
            connection, "daily_user_sync", T0 + timedelta(days=3)
        )
        of_day_9 = run_store.latest_publication(
            connection, "daily_user_sync", T0 + timedelta(days=9)
        )
        newest_other = run_store.latest_publication(connection, "other", None)
        other_at_t0 = run_store.latest_publication(connection, "other", T0)
        of_nothing = run_store.latest_publication(connection, "no_such_definition", None)
        pages: list[list[str]] = []
        cursor: pagination.Cursor | None = None
        while True:
            page = queries.list_runs(connection, definition_id=definition[0], after=cursor, limit=3)
            pages.append([run.id for run in page.items])
            if page.next_cursor is None:
                break
            cursor = pagination.Cursor.decode(page.next_cursor.encode())

    assert latest == {definition[0]: T0 + timedelta(days=6), other[0]: T0}
    assert after_floor == {}
    assert of_day_2 is states.PublicationState.PUBLISHED
    assert of_day_3 is states.PublicationState.NOT_REQUIRED
    assert of_day_9 is None
    assert newest_other is states.PublicationState.PUBLISHING  # the manual run, made last
    assert other_at_t0 is states.PublicationState.NOT_REQUIRED
    assert of_nothing is None
    listed = [run_id for page_ids in pages for run_id in page_ids]
    assert sorted(listed) == sorted(run_ids)
    assert len(listed) == len(set(listed))
    assert [len(page_ids) for page_ids in pages] == [3, 3, 1]


def test_list_runs_filters_by_state_and_pages_oldest_first(engine: Engine) -> None:
    with engine.begin() as connection:
        definition = builders.a_definition(connection)
        queued = builders.a_run(
            connection, definition, key="q", execution_state=states.RunExecutionState.QUEUED
        )
        builders.a_run(connection, definition, key="r", created_at=T0 + timedelta(seconds=1))

    with dialects.read_transaction(engine) as connection:
        page = queries.list_runs(
            connection, execution_states=[states.RunExecutionState.QUEUED], newest_first=False
        )
        everything = queries.list_runs(connection, newest_first=False)

    assert [run.id for run in page.items] == [queued]
    assert everything.items[0].id == queued
    assert everything.next_cursor is None


def test_histories_in_position_order(engine: Engine) -> None:
    with engine.begin() as connection:
        definition = builders.a_definition(connection)
        run_id = builders.a_run(connection, definition, key="r")
        other_run = builders.a_run(connection, definition, key="o")
        instance_id = builders.an_instance(connection, run_id, "extract")
        builders.an_event(connection, event_id="e3", run_id=run_id, kind="run_created")
        builders.an_event(connection, event_id="e1", run_id=run_id, instance_id=instance_id)
        builders.an_event(connection, event_id="e2", run_id=other_run)
        builders.an_event(connection, event_id="e0", run_id=run_id, instance_id=instance_id)

    with dialects.read_transaction(engine) as connection:
        of_run = queries.history(connection, subject_type=SubjectType.RUN, subject_id=run_id)
        of_instance = queries.history(
            connection, subject_type=SubjectType.INSTANCE, subject_id=instance_id
        )
        tail = queries.history(
            connection,
            subject_type=SubjectType.RUN,
            subject_id=run_id,
            after_position=of_run[0].position,
            limit=1,
        )

    assert [event.event_id for event in of_run] == ["e3", "e1", "e0"]
    assert [event.event_id for event in of_instance] == ["e1", "e0"]
    assert [event.event_id for event in tail] == ["e1"]
    assert of_run[0].evidence == {"pid": 42}
    assert of_run[0].observed_at.tzinfo is UTC


def test_search_instances_with_their_current_attempt(engine: Engine) -> None:
    with engine.begin() as connection:
        definition = builders.a_definition(connection)
        run_id = builders.a_run(connection, definition, key="r")
        other_run = builders.a_run(connection, builders.a_definition(connection, "x"), key="x")
        started = builders.an_instance(connection, run_id, "extract", state=I.RUNNING)
        waiting = builders.an_instance(connection, run_id, "load")
        builders.an_instance(connection, other_run, "extract")
        _open_attempt(connection, started, 1, A.FAILED, None)
        _open_attempt(connection, started, 2, A.RUNNING, T0)
        _set_instance(connection, started, epoch=2)

    with dialects.read_transaction(engine) as connection:
        by_definition = queries.search_instances(connection, definition_id=definition[0])
        by_state = queries.search_instances(connection, instance_states=[I.RUNNING])
        by_id = queries.search_instances(connection, instance_id=waiting)

    assert [found.instance.id for found in by_definition] == [started, waiting]
    assert by_definition[0].current_attempt is not None
    assert by_definition[0].current_attempt.attempt_no == 2
    assert by_definition[0].current_attempt.progress_phase == "copying"
    assert by_definition[0].definition_id == definition[0]
    assert by_definition[1].current_attempt is None
    assert [found.instance.id for found in by_state] == [started]
    assert [found.instance.id for found in by_id] == [waiting]


def test_definitions_and_instances_of_a_run(engine: Engine) -> None:
    with engine.begin() as connection:
        definition = builders.a_definition(connection)
        run_id = builders.a_run(connection, definition, key="r")
        builders.an_instance(connection, run_id, "b")
        builders.an_instance(connection, run_id, "a", map_index=1)
        builders.an_instance(connection, run_id, "a", map_index=0)

    with dialects.read_transaction(engine) as connection:
        found = queries.get_definition(connection, name="daily_user_sync")
        version = queries.get_definition_version(
            connection, definition_id=definition[0], version=definition[1]
        )
        active = queries.list_definitions(
            connection, lifecycles=[states.DefinitionLifecycle.ACTIVE]
        )
        instances = queries.instances_of_run(connection, run_id)

    assert found is not None
    assert (found.current_version, found.lifecycle) == (1, "active")
    assert version is not None
    assert version.spec["name"] == "daily_user_sync"
    assert [row.name for row in active] == ["daily_user_sync"]
    assert [(row.task_key, row.map_index) for row in instances] == [("a", 0), ("a", 1), ("b", -1)]
    with dialects.read_transaction(engine) as connection:
        assert queries.get_definition(connection, name="missing") is None
        assert queries.get_run(connection, "missing") is None
        assert queries.get_instance(connection, "missing") is None


def test_unresolved_alerts_by_category(engine: Engine) -> None:
    with engine.begin() as connection:
        for key, category, status in [
            ("a", "reconciliation", "open"),
            ("b", "reconciliation", "resolved"),
            ("c", "engine", "acknowledged"),
        ]:
            connection.execute(
                schema.alerts.insert().values(
                    category=category,
                    dedup_key=key,
                    status=status,
                    message=key,
                    evidence={},
                    opened_at=T0,
                )
            )

    with dialects.read_transaction(engine) as connection:
        everything = queries.unresolved_alerts(connection)
        lost = queries.unresolved_alerts(connection, category="reconciliation")

    assert [alert.dedup_key for alert in everything] == ["c", "a"]
    assert [alert.dedup_key for alert in lost] == ["a"]


def test_one_unresolved_alert_per_dedup_key(engine: Engine) -> None:
    def raise_alert(connection: Connection, status: str) -> None:
        connection.execute(
            schema.alerts.insert().values(
                category="engine",
                dedup_key="cancel-failed:i1",
                status=status,
                message="m",
                evidence={},
                opened_at=T0,
            )
        )

    with engine.begin() as connection:
        raise_alert(connection, "resolved")
        raise_alert(connection, "open")
    with pytest.raises(errors.DuplicateKey), engine.begin() as connection:
        raise_alert(connection, "acknowledged")


def test_cursor_decoding_refuses_garbage() -> None:
    with pytest.raises(ValueError, match="not a page cursor"):
        pagination.Cursor.decode("not-a-cursor")
    cursor = pagination.Cursor(created_at=T0, id="r1")
    assert pagination.Cursor.decode(cursor.encode()) == cursor


def test_the_monitor_reads_only_running_attempts_whose_due_time_came(engine: Engine) -> None:
    with engine.begin() as connection:
        run_id = builders.a_run(connection, builders.a_definition(connection), key="r")
        ids = {}
        for key, instance_state, attempt_state, due in [
            ("due", I.RUNNING, A.RUNNING, T0 - timedelta(seconds=1)),
            ("due_now", I.RUNNING, A.RUNNING, T0),
            ("ahead", I.RUNNING, A.RUNNING, T0 + timedelta(minutes=10)),
            ("queued", I.QUEUED, A.QUEUED, T0 - timedelta(hours=1)),
            ("lost", I.LOST, A.LOST, T0 - timedelta(hours=1)),
        ]:
            instance_id = ids[key] = builders.an_instance(
                connection, run_id, key, state=instance_state
            )
            _open_attempt(connection, instance_id, 1, attempt_state, None)
            _set_instance(connection, instance_id, epoch=1)
            connection.execute(
                schema.attempts.update()
                .where(schema.attempts.c.instance_id == instance_id)
                .values(monitor_due_at=due)
            )
        # A retried instance: its earlier, running-looking attempt is not its current one.
        retried = ids["retried"] = builders.an_instance(
            connection, run_id, "retried", state=I.RUNNING
        )
        _open_attempt(connection, retried, 1, A.RUNNING, None)
        _open_attempt(connection, retried, 2, A.RUNNING, None)
        _set_instance(connection, retried, epoch=2)
        connection.execute(
            schema.attempts.update()
            .where(schema.attempts.c.instance_id == retried)
            .values(monitor_due_at=sa.case((schema.attempts.c.attempt_no == 1, T0), else_=None))
        )

    with dialects.read_transaction(engine) as connection:
        start = queries.MONITOR_START
        page = queries.monitor_due_page(connection, now=T0, after=start, limit=10)
        first = queries.monitor_due_page(connection, now=T0, after=start, limit=1)
        (cursor,) = first
        assert cursor.monitor_due_at is not None
        rest = queries.monitor_due_page(
            connection, now=T0, after=(cursor.monitor_due_at, cursor.id), limit=10
        )

    # By due time: the cancelled-looking and queued ones are not there, nor an earlier attempt.
    assert [row.id for row in page] == [ids["due"], ids["due_now"]]
    assert [row.id for row in first + rest] == [row.id for row in page]
    assert all(row.attempt_state is A.RUNNING and row.epoch == 1 for row in page)
    assert page[0].monitor_due_at == T0 - timedelta(seconds=1)
