"""The scans that run every few seconds use their index on both databases.

The tables are tiny here, so PostgreSQL is told not to prefer sequential scans: the test
proves that the index is usable for the query as written (for a partial index, that the
query implies its predicate), not that the planner would pick it on this data.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from tests.contract import builders
from veritask.core import states
from veritask.ledger import active_runs, queries, run_lists, run_store, vocabulary

Captured = list[tuple[str, Any]]

SubjectType = vocabulary.SubjectType


@contextmanager
def _captured_statements(connection: Connection) -> Iterator[Captured]:
    captured: Captured = []

    def record(
        conn: Connection, cursor: object, statement: str, parameters: Any, *args: object
    ) -> None:
        captured.append((statement, parameters))

    sa.event.listen(connection, "before_cursor_execute", record)
    try:
        yield captured
    finally:
        sa.event.remove(connection, "before_cursor_execute", record)


def _plan(connection: Connection, read: Callable[[Connection], object]) -> str:
    with _captured_statements(connection) as captured:
        read(connection)
    (statement, parameters), *_ = captured
    if connection.dialect.name == "postgresql":
        connection.exec_driver_sql("SET LOCAL enable_seqscan = off")
        explained = connection.exec_driver_sql(f"EXPLAIN {statement}", parameters)
    else:
        explained = connection.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters)
    # PostgreSQL answers one line per row; SQLite's detail is the last column.
    return "\n".join(str(row[-1]) for row in explained)


#: The instances the monitor and the reconciler sweep (scheduling/sweeps.py).
_MONITORED = [states.InstanceState.LOST]
_RECONCILED = [
    states.InstanceState.LOST,
    states.InstanceState.CANCELLING,
    states.InstanceState.CANCEL_FAILED,
    states.InstanceState.SCHEDULED,
    states.InstanceState.QUEUED,
]

#: An index the read must use, or the indexes of which it must use one: SQLite names a unique
#: constraint's index itself, and the planners pick different indexes that serve a read.
Indexes = str | tuple[str, ...]

READS: dict[str, tuple[Callable[[Connection], object], Indexes]] = {
    # The scheduler's loop (scheduling/scheduler.py, advance.py): runs with news since the
    # last read, by creation time or by state (either finds only the few), every active run
    # on its full scan each second, and each moved run's instances with their retry times.
    "new_runs": (
        lambda c: active_runs.active_runs(c, since=builders.T0),
        ("ix_runs_created_at_id", "ix_runs_unsettled_state"),
    ),
    "known_or_new_runs": (
        lambda c: active_runs.active_runs(c, since=builders.T0, known=["r1", "r2"]),
        ("ix_runs_created_at_id", "ix_runs_unsettled_state"),
    ),
    "active_runs": (
        lambda c: active_runs.active_runs(c),
        "ix_runs_unsettled_state",
    ),
    # Each second too: the runs waiting for their definition's active runs to end, and the
    # newest fire time of each scheduled definition (scheduling/triggers.py). A ledger of a
    # million finished instances in runs of ten read the whole runs table three times a
    # second without them (bench/scale.py --run-size 10).
    "queued_runs": (
        lambda c: run_store.queued_runs(c),
        "ix_runs_unsettled_state",
    ),
    "latest_scheduled_time": (
        lambda c: run_store.latest_logical_times(c, {"d": builders.T0}),
        "ix_runs_definition_id_logical_time",
    ),
    # A run waiting for other pipelines: how its trigger chose its logical time, and the
    # event that published an upstream run (scheduling/dependencies.py).
    "run_creation_evidence": (
        lambda c: run_store.creation_evidence(c, "r"),
        "ix_events_run_id_position",
    ),
    "published_event": (
        lambda c: run_store.published_event_id(c, "r"),
        "ix_events_run_id_position",
    ),
    "instances_of_a_moved_run": (
        lambda c: run_store.instances_brief(c, "r"),
        ("uq_task_instances_run_id_task_key_map_index", "sqlite_autoindex_task_instances_2"),
    ),
    # The sweeps (scheduling/sweeps.py): the monitor's and the reconciler's pages, and the
    # retries that came due long ago.
    "monitor_lost_sweep": (
        lambda c: queries.sweep_page(c, _MONITORED, after="", limit=100),
        "ix_task_instances_active_state",
    ),
    "monitor_due": (
        lambda c: queries.monitor_due_page(
            c, now=builders.T0, after=queries.MONITOR_START, limit=100
        ),
        "ix_attempts_monitor_due",
    ),
    "reconciler_sweep": (
        lambda c: queries.sweep_page(c, _RECONCILED, after="", limit=100),
        "ix_task_instances_active_state",
    ),
    "late_retries": (
        lambda c: queries.late_retries(c, before=builders.T0, limit=100),
        "ix_task_instances_due_retry",
    ),
    # A run waiting for another pipeline (scheduling/dependencies.py).
    "dependency_publication": (
        lambda c: run_store.latest_publication(c, "upstream", builders.T0),
        ("ix_runs_definition_id_logical_time", "ix_runs_definition_id_created_at_id"),
    ),
    "filtered_runs": (
        lambda c: run_lists.filtered_runs(
            c,
            run_lists.RunFilter(
                execution_states=[states.RunExecutionState.FAILED],
                trigger_kinds=[states.TriggerKind.SCHEDULE],
                created_from=builders.T0,
                text="orders",
            ),
        ),
        "ix_runs_created_at_id",
    ),
    "filtered_runs_of_a_definition": (
        lambda c: run_lists.filtered_runs(
            c,
            run_lists.RunFilter(
                definition_id="d",
                publication_states=[states.PublicationState.PUBLISHED],
                logical_from=builders.T0,
            ),
        ),
        # Either of the definition's indexes: by creation (the keyset walk) or, with a
        # logical range, by logical time (SQLite reads the range and sorts just that).
        "ix_runs_definition_id_",
    ),
    "newest_runs_of_a_grid": (
        lambda c: run_lists.newest_runs(c, definition_id="d", count=100),
        "ix_runs_definition_id_created_at_id",
    ),
    "history_of_instance": (
        lambda c: queries.history(c, subject_type=SubjectType.INSTANCE, subject_id="i"),
        "ix_events_instance_id_position",
    ),
    "history_of_run": (
        lambda c: queries.history(c, subject_type=SubjectType.RUN, subject_id="r"),
        "ix_events_run_id_position",
    ),
    "history_of_definition": (
        lambda c: queries.history(c, subject_type=SubjectType.DEFINITION, subject_id="d"),
        "ix_events_definition_subject_id_position",
    ),
    "unresolved_alerts": (
        lambda c: queries.unresolved_alerts(c, category="engine"),
        "ix_alerts_unresolved_category",
    ),
}


@pytest.mark.parametrize("name", sorted(READS))
def test_the_read_uses_its_index(engine: Engine, name: str) -> None:
    read, indexes = READS[name]
    with engine.begin() as connection:
        plan = _plan(connection, read)
        connection.rollback()
    names = (indexes,) if isinstance(indexes, str) else indexes
    assert any(index in plan for index in names), plan
