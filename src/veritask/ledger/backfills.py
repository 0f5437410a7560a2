"""Backfills and their intervals, and the scheduled fire times ``forbid`` skipped (0005).

A backfill is planned once, at the request: every interval is written with what the backfill
does with it. The scheduler then creates the runs of the pending intervals, at most
``max_active_runs`` of them active at once, and closes the backfill when nothing is left to
create and none of its runs is active. Progress is read by joining the intervals with the
runs, so it never goes stale.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final, NamedTuple

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from veritask.core.jsontypes import JSONObject
from veritask.core.states import RunExecutionState
from veritask.ledger import dialects, schema

ACTIVE: Final = "active"
DONE: Final = "done"
CANCELLED: Final = "cancelled"

ACTIONS: Final = schema.BACKFILL_ACTIONS
#: Interval actions that give the backfill a run of its own to move (the one it clears, for
#: ``clear``): its pacing, progress and cancel count them.
OWNING_ACTIONS: Final = ("clear", "create", "rerun")
ACTIVE_RUN_STATES: Final = (
    RunExecutionState.QUEUED.value,
    RunExecutionState.RUNNING.value,
    RunExecutionState.CANCELLING.value,
)

_b = schema.backfills.c
_i = schema.backfill_intervals.c
_r = schema.runs.c
_s = schema.schedule_skips.c


class PlannedInterval(NamedTuple):
    """One fire time of the range and what the backfill does with it."""

    logical_time: datetime
    data_interval_start: datetime
    data_interval_end: datetime
    action: str
    existing_run_id: str | None
    existing_state: str | None


@dataclass(frozen=True)
class BackfillRow:
    id: str
    definition_id: str
    range_start: datetime
    range_end: datetime
    parameters: JSONObject
    max_active_runs: int
    existing: str
    state: str
    actor: str
    reason: str | None
    created_at: datetime
    finished_at: datetime | None


class IntervalRow(NamedTuple):
    """An interval with the state of the run that stands for it (None before it has one)."""

    logical_time: datetime
    data_interval_start: datetime
    data_interval_end: datetime
    action: str
    existing_run_id: str | None
    existing_state: str | None
    run_id: str | None
    run_state: str | None


class ExistingRun(NamedTuple):
    id: str
    execution_state: str


def _backfill(row: sa.Row[tuple[object, ...]]) -> BackfillRow:
    mapping = row._mapping
    parameters = mapping["parameters"]
    return BackfillRow(
        id=str(mapping["id"]),
        definition_id=str(mapping["definition_id"]),
        range_start=mapping["range_start"],
        range_end=mapping["range_end"],
        parameters=dict(parameters) if isinstance(parameters, dict) else {},
        max_active_runs=int(mapping["max_active_runs"]),
        existing=str(mapping["existing"]),
        state=str(mapping["state"]),
        actor=str(mapping["actor"]),
        reason=mapping["reason"],
        created_at=mapping["created_at"],
        finished_at=mapping["finished_at"],
    )


# -- planning ----------------------------------------------------------------------------------


def newest_runs_between(
    connection: Connection, definition_id: str, start: datetime, end: datetime
) -> dict[datetime, ExistingRun]:
    """For each logical time in ``[start, end)``, the definition's newest run of that time."""
    rows = connection.execute(
        sa.select(_r.id, _r.logical_time, _r.execution_state)
        .where(
            _r.definition_id == definition_id,
            _r.logical_time >= start,
            _r.logical_time < end,
        )
        .order_by(_r.logical_time, _r.created_at, _r.id)
    )
    found: dict[datetime, ExistingRun] = {}
    for run_id, logical_time, state in rows:
        found[logical_time] = ExistingRun(run_id, state)  # the newest wins
    return found


def same_active_backfill(
    connection: Connection,
    *,
    definition_id: str,
    start: datetime,
    end: datetime,
    parameters: Mapping[str, object],
    existing: str,
) -> str | None:
    """An active backfill of the same range, parameters and ``existing``: asking again is it."""
    rows = connection.execute(
        sa.select(_b.id, _b.parameters).where(
            _b.state == ACTIVE,
            _b.definition_id == definition_id,
            _b.range_start == start,
            _b.range_end == end,
            _b.existing == existing,
        )
    )
    for backfill_id, stored in rows:
        if dict(stored or {}) == dict(parameters):
            return str(backfill_id)
    return None


def insert_backfill(
    connection: Connection,
    *,
    backfill_id: str,
    definition_id: str,
    start: datetime,
    end: datetime,
    parameters: Mapping[str, object],
    max_active_runs: int,
    existing: str,
    actor: str,
    reason: str | None,
    now: datetime,
    intervals: Sequence[PlannedInterval],
) -> None:
    """Write the backfill and its planned intervals (in the caller's transaction)."""
    connection.execute(
        schema.backfills.insert(),
        {
            "id": backfill_id,
            "definition_id": definition_id,
            "range_start": start,
            "range_end": end,
            "parameters": dict(parameters),
            "max_active_runs": max_active_runs,
            "existing": existing,
            "state": ACTIVE,
            "actor": actor,
            "reason": reason,
            "created_at": now,
            "finished_at": None,
        },
    )
    if intervals:
        connection.execute(
            schema.backfill_intervals.insert(),
            [
                {
                    "backfill_id": backfill_id,
                    **interval._asdict(),
                    # A skipped interval is stood for by the run that exists.
                    "run_id": interval.existing_run_id if interval.action == "skip" else None,
                }
                for interval in intervals
            ],
        )


# -- moving on ---------------------------------------------------------------------------------


def active_backfills(connection: Connection) -> list[BackfillRow]:
    """The backfills still moving, oldest first (the scheduler's read: an indexed few)."""
    rows = connection.execute(
        sa.select(schema.backfills).where(_b.state == ACTIVE).order_by(_b.created_at, _b.id)
    )
    return [_backfill(row) for row in rows]


def active_run_count(connection: Connection, backfill_id: str) -> int:
    """How many runs the backfill made are queued, running or being cancelled."""
    count = connection.execute(
        sa.select(sa.func.count())
        .select_from(schema.backfill_intervals.join(schema.runs, _r.id == _i.run_id))
        .where(
            _i.backfill_id == backfill_id,
            _i.action.in_(OWNING_ACTIONS),
            _r.execution_state.in_(ACTIVE_RUN_STATES),
        )
    ).scalar_one()
    return int(count)


def pending_intervals(connection: Connection, backfill_id: str, limit: int) -> list[IntervalRow]:
    """The oldest intervals still waiting for the run the backfill will make."""
    rows = connection.execute(
        sa.select(
            _i.logical_time,
            _i.data_interval_start,
            _i.data_interval_end,
            _i.action,
            _i.existing_run_id,
            _i.existing_state,
            _i.run_id,
            sa.null(),
        )
        .where(
            _i.backfill_id == backfill_id,
            _i.action.in_(OWNING_ACTIONS),
            _i.run_id.is_(None),
        )
        .order_by(_i.logical_time)
        .limit(limit)
    )
    return [IntervalRow(*row) for row in rows]


def set_interval_run(
    connection: Connection, backfill_id: str, logical_time: datetime, run_id: str
) -> None:
    connection.execute(
        schema.backfill_intervals.update()
        .where(_i.backfill_id == backfill_id, _i.logical_time == logical_time)
        .values(run_id=run_id)
    )


def finish(connection: Connection, backfill_id: str, *, state: str, now: datetime) -> bool:
    """Close an active backfill (done or cancelled); False if it was closed already."""
    result = connection.execute(
        schema.backfills.update()
        .where(_b.id == backfill_id, _b.state == ACTIVE)
        .values(state=state, finished_at=now)
    )
    return bool(result.rowcount == 1)


# -- reads ---------------------------------------------------------------------------------


def get(connection: Connection, backfill_id: str) -> BackfillRow | None:
    row = connection.execute(sa.select(schema.backfills).where(_b.id == backfill_id)).first()
    return None if row is None else _backfill(row)


def listing(
    connection: Connection, *, definition_id: str | None = None, limit: int = 100
) -> list[BackfillRow]:
    """Backfills, newest first."""
    statement = sa.select(schema.backfills)
    if definition_id is not None:
        statement = statement.where(_b.definition_id == definition_id)
    rows = connection.execute(statement.order_by(_b.created_at.desc(), _b.id.desc()).limit(limit))
    return [_backfill(row) for row in rows]


def intervals_of(connection: Connection, backfill_id: str) -> list[IntervalRow]:
    """The backfill's intervals, oldest first, with their runs' states."""
    rows = connection.execute(
        sa.select(
            _i.logical_time,
            _i.data_interval_start,
            _i.data_interval_end,
            _i.action,
            _i.existing_run_id,
            _i.existing_state,
            _i.run_id,
            _r.execution_state,
        )
        .select_from(schema.backfill_intervals.outerjoin(schema.runs, _r.id == _i.run_id))
        .where(_i.backfill_id == backfill_id)
        .order_by(_i.logical_time)
    )
    return [IntervalRow(*row) for row in rows]


def progress(
    connection: Connection, backfill_ids: Collection[str]
) -> dict[str, dict[str | None, int]]:
    """Per backfill: how many of the runs it made are in each execution state (None: none
    made yet), counting only the intervals it owns (created or rerun)."""
    if not backfill_ids:
        return {}
    rows = connection.execute(
        sa.select(_i.backfill_id, _r.execution_state, sa.func.count())
        .select_from(schema.backfill_intervals.outerjoin(schema.runs, _r.id == _i.run_id))
        .where(_i.backfill_id.in_(list(backfill_ids)), _i.action.in_(OWNING_ACTIONS))
        .group_by(_i.backfill_id, _r.execution_state)
    )
    found: dict[str, dict[str | None, int]] = {}
    for backfill_id, state, count in rows:
        found.setdefault(str(backfill_id), {})[state] = int(count)
    return found


def skipped_counts(connection: Connection, backfill_ids: Collection[str]) -> dict[str, int]:
    """Per backfill: how many intervals it left as they were."""
    if not backfill_ids:
        return {}
    rows = connection.execute(
        sa.select(_i.backfill_id, sa.func.count())
        .where(_i.backfill_id.in_(list(backfill_ids)), _i.action.not_in(OWNING_ACTIONS))
        .group_by(_i.backfill_id)
    )
    return {str(backfill_id): int(count) for backfill_id, count in rows}


def owned_active_runs(connection: Connection, backfill_id: str) -> list[str]:
    """The runs the backfill made that are still queued or running (a cancel stops them)."""
    return list(
        connection.execute(
            sa.select(_r.id)
            .select_from(schema.backfill_intervals.join(schema.runs, _r.id == _i.run_id))
            .where(
                _i.backfill_id == backfill_id,
                _i.action.in_(OWNING_ACTIONS),
                _r.execution_state.in_(
                    [RunExecutionState.QUEUED.value, RunExecutionState.RUNNING.value]
                ),
            )
            .order_by(_r.created_at)
        ).scalars()
    )


# -- scheduled fire times that forbid skipped --------------------------------------------------


def record_schedule_skip(
    connection: Connection,
    *,
    definition_id: str,
    logical_time: datetime,
    active_run_id: str,
    now: datetime,
) -> bool:
    """Remember that the schedule's fire time was skipped; False if it was already."""
    return dialects.insert_ignoring_conflict(
        connection,
        schema.schedule_skips,
        {
            "definition_id": definition_id,
            "logical_time": logical_time,
            "active_run_id": active_run_id,
            "skipped_at": now,
        },
        conflict_columns=["definition_id", "logical_time"],
    )


def latest_skipped_times(connection: Connection) -> dict[str, datetime]:
    """For each definition with skipped fire times, the latest one."""
    rows = connection.execute(
        sa.select(_s.definition_id, sa.func.max(_s.logical_time)).group_by(_s.definition_id)
    )
    return {str(row[0]): row[1] for row in rows}
