"""What the platform is doing, read for people and monitors: ``/metrics``, the web UI's
health panel and ``veritask doctor``.

Bounded reads on indexed columns, each in the caller's transaction; none of them decides
anything (the scheduler's own reads are in ``queries``).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from veritask.core.states import TERMINAL_INSTANCE_STATES
from veritask.ledger import schema

_schedulers = schema.schedulers.c
_attempts = schema.attempts.c
_instances = schema.task_instances.c
_runs = schema.runs.c
_events = schema.events.c
_TERMINAL = sorted(state.value for state in TERMINAL_INSTANCE_STATES)


@dataclass(frozen=True)
class SchedulerRow:
    """A scheduler process that holds (or held) a lease."""

    id: str
    host: str
    pid: int
    started_at: datetime
    heartbeat_at: datetime
    last_tick_at: datetime | None


@dataclass(frozen=True)
class WorkerReport:
    """When a worker's report says it happened, when it was recorded, and whose it was."""

    event_time: datetime
    observed_at: datetime
    worker: str | None


# -- schedulers ---------------------------------------------------------------------------------


def schedulers(connection: Connection) -> list[SchedulerRow]:
    """Every registered scheduler, the oldest first."""
    rows = connection.execute(sa.select(schema.schedulers).order_by(_schedulers.started_at))
    return [
        SchedulerRow(row.id, row.host, row.pid, row.started_at, row.heartbeat_at, row.last_tick_at)
        for row in rows
    ]


def record_last_tick(connection: Connection, scheduler_id: str, last_tick_at: datetime) -> None:
    """When the scheduler's loop last finished a tick (its lag, beside the heartbeat)."""
    connection.execute(
        schema.schedulers.update()
        .where(_schedulers.id == scheduler_id)
        .values(last_tick_at=last_tick_at)
    )


# -- load ---------------------------------------------------------------------------------------


def attempts_by_executor(
    connection: Connection, states: Collection[str]
) -> list[tuple[str | None, int]]:
    """How many attempts in ``states`` each executor holds, by executor."""
    rows = connection.execute(
        sa.select(_attempts.executor, sa.func.count())
        .where(_attempts.state.in_(sorted(states)))
        .group_by(_attempts.executor)
        .order_by(_attempts.executor)
    ).all()
    return [(row[0], int(row[1])) for row in rows]


def count_instances_in(connection: Connection, states: Collection[str]) -> int:
    """How many instances are in one of ``states``."""
    found = connection.execute(
        sa.select(sa.func.count()).where(_instances.state.in_(list(states)))
    ).scalar_one()
    return int(found)


def instances_by_state(connection: Connection, states: Collection[str]) -> dict[str, int]:
    """How many instances are in each of ``states`` (a state with none is left out)."""
    rows = connection.execute(
        sa.select(_instances.state, sa.func.count())
        .where(_instances.state.in_(list(states)))
        .group_by(_instances.state)
    ).all()
    return {row[0]: int(row[1]) for row in rows}


def count_runs_in(connection: Connection, state: str) -> int:
    """How many runs are in execution state ``state``."""
    found = connection.execute(
        sa.select(sa.func.count()).where(_runs.execution_state == state)
    ).scalar_one()
    return int(found)


# -- the event log ------------------------------------------------------------------------------


def event_kinds_since(
    connection: Connection, *, actor: str, since: datetime
) -> list[tuple[str, int]]:
    """How many events of each kind ``actor`` recorded since ``since``, by kind."""
    rows = connection.execute(
        sa.select(_events.kind, sa.func.count())
        .where(_events.actor == actor, _events.observed_at >= since)
        .group_by(_events.kind)
        .order_by(_events.kind)
    ).all()
    return [(row[0], int(row[1])) for row in rows]


def latest_position(
    connection: Connection, *, run_id: str | None = None, instance_id: str | None = None
) -> int:
    """The position of the newest event (of the instance, else of the run, when given); 0 if
    there is none."""
    statement = sa.select(sa.func.max(_events.position))
    if instance_id is not None:
        statement = statement.where(_events.instance_id == instance_id)
    elif run_id is not None:
        statement = statement.where(_events.run_id == run_id)
    found = connection.execute(statement).scalar_one_or_none()
    return int(found or 0)


def definitions_changed_at(connection: Connection) -> datetime | None:
    """When a definition last changed (a version applied, its lifecycle moved); None if none."""
    found: datetime | None = connection.execute(
        sa.select(sa.func.max(schema.definitions.c.updated_at))
    ).scalar_one()
    return found


def newest_position_observed_by(connection: Connection, moment: datetime) -> int | None:
    """The position of the newest event recorded at or before ``moment``, None if none."""
    found: int | None = connection.execute(
        sa.select(sa.func.max(_events.position)).where(_events.observed_at <= moment)
    ).scalar_one()
    return found


def instances_finished_between(
    connection: Connection, *, after: int, upto: int, limit: int
) -> list[tuple[int, str]]:
    """(position, instance id) of the events in positions ``(after, upto]`` that moved an
    instance into a final state from an unfinished one (or from none), in order."""
    rows = connection.execute(
        sa.select(_events.position, _events.instance_id)
        .where(
            _events.position > after,
            _events.position <= upto,
            _events.subject_type == "instance",
            _events.to_state.in_(_TERMINAL),
            sa.or_(_events.from_state.is_(None), _events.from_state.not_in(_TERMINAL)),
        )
        .order_by(_events.position)
        .limit(limit)
    ).all()
    return [(row.position, row.instance_id) for row in rows]


def definition_names_by_run(
    connection: Connection, instance_ids: Collection[str]
) -> dict[str, str]:
    """The definition name of each run that holds one of these instances, by run id."""
    d = schema.definitions.c
    rows = connection.execute(
        sa.select(_instances.run_id, d.name)
        .select_from(
            schema.task_instances.join(schema.runs, _runs.id == _instances.run_id).join(
                schema.definitions, d.id == _runs.definition_id
            )
        )
        .where(_instances.id.in_(list(instance_ids)))
    ).all()
    return {row[0]: row[1] for row in rows}


def worker_report_clocks(connection: Connection, *, limit: int) -> list[WorkerReport]:
    """The newest ``limit`` worker reports' two times and the worker of their attempt."""
    a = _attempts
    rows = connection.execute(
        sa.select(_events.event_time, _events.observed_at, a.worker)
        .select_from(
            schema.events.outerjoin(
                schema.attempts,
                sa.and_(a.instance_id == _events.instance_id, a.attempt_no == _events.attempt_no),
            )
        )
        .where(_events.actor == "worker")
        .order_by(_events.position.desc())
        .limit(limit)
    ).all()
    return [WorkerReport(row.event_time, row.observed_at, row.worker) for row in rows]
