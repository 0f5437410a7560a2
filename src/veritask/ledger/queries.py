"""The reads that the scheduler, the monitor and the API need, each backed by an index.

Every function takes a connection (use ``dialects.read_transaction`` when only reading) and
returns typed rows from ``ledger.rows``. Queries that a partial index serves repeat the index's
predicate verbatim (``schema.*_PREDICATE``): SQLite uses a partial index only then.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, NamedTuple

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from veritask.core import states
from veritask.ledger import definitions, pagination, schema, statements, vocabulary
from veritask.ledger.rows import (
    AlertRow,
    AttemptRow,
    DefinitionRow,
    DefinitionVersionRow,
    EventRow,
    InstanceProgress,
    InstanceRow,
    RunRow,
)

DEFAULT_LIMIT: Final = 1000

_instances = schema.task_instances.c
_attempts = schema.attempts.c
_runs = schema.runs.c
_events = schema.events.c


def _literal_states(values: Collection[str]) -> sa.BindParameter[list[str]]:
    # Rendered into the SQL text rather than bound: planners match index predicates and pick
    # plans against literal state names, and the state vocabulary is small and closed.
    return sa.bindparam(
        "state_names", sorted(str(value) for value in values), expanding=True, literal_execute=True
    )


# -- definitions ---------------------------------------------------------------------------


def get_definition(connection: Connection, *, name: str) -> DefinitionRow | None:
    """The definition called ``name``: the one that holds the name, else the newest deleted
    one (``definitions.holder_first``)."""
    row = connection.execute(
        sa.select(schema.definitions)
        .where(schema.definitions.c.name == name)
        .order_by(*definitions.holder_first())
        .limit(1)
    ).first()
    return DefinitionRow.from_row(row) if row else None


def get_definition_by_id(connection: Connection, definition_id: str) -> DefinitionRow | None:
    """One definition, by its id (a deleted name's older definitions have only theirs)."""
    row = connection.execute(
        sa.select(schema.definitions).where(schema.definitions.c.id == definition_id)
    ).first()
    return DefinitionRow.from_row(row) if row else None


def get_definition_version(
    connection: Connection, *, definition_id: str, version: int
) -> DefinitionVersionRow | None:
    """One saved version of a definition."""
    versions = schema.definition_versions.c
    row = connection.execute(
        sa.select(schema.definition_versions).where(
            versions.definition_id == definition_id, versions.version == version
        )
    ).first()
    return DefinitionVersionRow.from_row(row) if row else None


def list_definitions(
    connection: Connection, *, lifecycles: Collection[states.DefinitionLifecycle] | None = None
) -> list[DefinitionRow]:
    """Definitions by name, optionally only those in the given lifecycle steps."""
    statement = sa.select(schema.definitions).order_by(
        schema.definitions.c.name, *definitions.holder_first()
    )
    if lifecycles is not None:
        statement = statement.where(
            schema.definitions.c.lifecycle.in_([lifecycle.value for lifecycle in lifecycles])
        )
    return [DefinitionRow.from_row(row) for row in connection.execute(statement)]


def count_definitions(connection: Connection) -> int:
    """How many definitions there are, whatever their lifecycle."""
    found: int = connection.execute(
        sa.select(sa.func.count()).select_from(schema.definitions)
    ).scalar_one()
    return found


# -- snapshots by id -----------------------------------------------------------------------


def get_run(connection: Connection, run_id: str) -> RunRow | None:
    """A run's snapshot."""
    row = connection.execute(sa.select(schema.runs).where(_runs.id == run_id)).first()
    return RunRow.from_row(row) if row else None


def get_instance(connection: Connection, instance_id: str) -> InstanceRow | None:
    """An instance's snapshot."""
    row = connection.execute(
        sa.select(schema.task_instances).where(_instances.id == instance_id)
    ).first()
    return InstanceRow.from_row(row) if row else None


def instances_by_id(connection: Connection, instance_ids: Collection[str]) -> list[InstanceRow]:
    """The instances with these ids (those that exist), in no particular order."""
    if not instance_ids:
        return []
    statement = sa.select(schema.task_instances).where(_instances.id.in_(list(instance_ids)))
    return [InstanceRow.from_row(row) for row in connection.execute(statement)]


@dataclass(frozen=True)
class InstanceText:
    """An instance's row with its policy and facts as the stored text: a reader that keeps
    the snapshots it derived decodes them only for the instances that moved since."""

    id: str
    run_id: str
    task_key: str
    map_index: int
    state: str
    version: int
    policy: str
    fold: str | None


def instance_texts_of_run(connection: Connection, run_id: str) -> list[InstanceText]:
    """The instances of a run as :class:`InstanceText`, by task key and map index."""
    statement = (
        sa.select(
            _instances.id,
            _instances.run_id,
            _instances.task_key,
            _instances.map_index,
            _instances.state,
            _instances.version,
            statements.POLICY_TEXT,
            statements.FOLD_TEXT,
        )
        .where(_instances.run_id == run_id)
        .order_by(_instances.task_key, _instances.map_index)
    )
    return [InstanceText(*row) for row in connection.execute(statement)]


def instances_of_run(connection: Connection, run_id: str) -> list[InstanceRow]:
    """The instances of a run, by task key and map index."""
    statement = (
        sa.select(schema.task_instances)
        .where(_instances.run_id == run_id)
        .order_by(_instances.task_key, _instances.map_index)
    )
    return [InstanceRow.from_row(row) for row in connection.execute(statement)]


def attempt_of_token(connection: Connection, token_hash: str) -> tuple[str, int] | None:
    """The (instance id, attempt number) whose attempt token hashes to ``token_hash``."""
    a = schema.attempts.c
    row = connection.execute(
        sa.select(a.instance_id, a.attempt_no).where(a.token_hash == token_hash).limit(1)
    ).first()
    return None if row is None else (str(row.instance_id), int(row.attempt_no))


def attempts_of(connection: Connection, instance_id: str) -> list[AttemptRow]:
    """Every attempt of an instance, first to last; earlier ones are never rewritten."""
    statement = (
        sa.select(schema.attempts)
        .where(_attempts.instance_id == instance_id)
        .order_by(_attempts.attempt_no)
    )
    return [AttemptRow.from_row(row) for row in connection.execute(statement)]


def attempts_of_run(connection: Connection, run_id: str) -> dict[str, list[AttemptRow]]:
    """Every attempt row of the run's instances by instance, first to last: one indexed
    join, where a list of thousands of instance ids would be a statement of thousands of
    parameters."""
    statement = (
        sa.select(schema.attempts)
        .join(schema.task_instances, _instances.id == _attempts.instance_id)
        .where(_instances.run_id == run_id)
        .order_by(_attempts.instance_id, _attempts.attempt_no)
    )
    found: dict[str, list[AttemptRow]] = {}
    for row in connection.execute(statement):
        attempt = AttemptRow.from_row(row)
        found.setdefault(attempt.instance_id, []).append(attempt)
    return found


def attempts_of_instances(
    connection: Connection, instance_ids: Collection[str]
) -> dict[str, list[AttemptRow]]:
    """The attempt rows of these instances (a page of a run's), by instance, first to last."""
    if not instance_ids:
        return {}
    statement = (
        sa.select(schema.attempts)
        .where(_attempts.instance_id.in_(list(instance_ids)))
        .order_by(_attempts.instance_id, _attempts.attempt_no)
    )
    found: dict[str, list[AttemptRow]] = {}
    for row in connection.execute(statement):
        attempt = AttemptRow.from_row(row)
        found.setdefault(attempt.instance_id, []).append(attempt)
    return found


def definition_names(connection: Connection, definition_ids: Iterable[str]) -> dict[str, str]:
    """Definition names by id."""
    ids = sorted(set(definition_ids))
    if not ids:
        return {}
    d = schema.definitions.c
    rows = connection.execute(sa.select(d.id, d.name).where(d.id.in_(ids))).all()
    return {row.id: row.name for row in rows}


# -- the scheduler's and the monitor's scans ------------------------------------------------


@dataclass(frozen=True)
class RunClock:
    """When an active run's clock started: its logical time, else its creation."""

    id: str
    definition_id: str
    definition_version: int
    logical_time: datetime | None
    created_at: datetime


def runs_in_states(connection: Connection, execution_states: Collection[str]) -> list[RunClock]:
    """Every run in one of ``execution_states``, with what its deadline counts from."""
    rows = connection.execute(
        sa.select(
            _runs.id,
            _runs.logical_time,
            _runs.created_at,
            _runs.definition_id,
            _runs.definition_version,
        ).where(_runs.execution_state.in_(list(execution_states)))
    ).all()
    return [
        RunClock(
            row.id, row.definition_id, row.definition_version, row.logical_time, row.created_at
        )
        for row in rows
    ]


# -- the monitor's and the reconciler's sweeps ----------------------------------------------


@dataclass(frozen=True)
class SweepRow:
    """An active instance as a sweep lists it, with its current attempt's cached columns."""

    id: str
    run_id: str
    epoch: int
    state: states.InstanceState
    #: The policy's JSON text (``statements.POLICY_TEXT``).
    policy: str
    updated_observed_at: datetime | None
    attempt_state: states.AttemptState | None
    lease_expires_at: datetime | None
    queued_at: datetime | None
    started_at: datetime | None
    #: When the monitor must look at the attempt again (``decide.monitor_due``), if running.
    monitor_due_at: datetime | None


class LateRetry(NamedTuple):
    """An UP_FOR_RETRY instance whose ``retry_at`` passed long ago."""

    id: str
    run_id: str
    epoch: int
    retry_at: datetime


# Built once: every sweep (each second) reads its instances page by page with these.
_SWEEP_COLUMNS = (
    _instances.id,
    _instances.run_id,
    _instances.epoch,
    _instances.state,
    statements.POLICY_TEXT,
    _instances.updated_observed_at,
    _attempts.state.label("attempt_state"),
    _attempts.lease_expires_at,
    _attempts.queued_at,
    _attempts.started_at,
    _attempts.monitor_due_at,
)
_SWEEP_PAGE_SELECT = (
    sa.select(*_SWEEP_COLUMNS)
    .select_from(
        schema.task_instances.outerjoin(
            schema.attempts,
            sa.and_(
                _attempts.instance_id == _instances.id, _attempts.attempt_no == _instances.epoch
            ),
        )
    )
    .where(
        _instances.state.in_(sa.bindparam("states", expanding=True)),
        _instances.id > sa.bindparam("after"),
    )
    .order_by(_instances.id)
    .limit(sa.bindparam("limit", type_=sa.Integer))
)
# The running attempts whose lease or timeout may have run out, by the partial index of the
# running ones (``ix_attempts_monitor_due``), each with its instance if it is the current one.
_due_type = _attempts.monitor_due_at.type
_MONITOR_DUE_SELECT = (
    sa.select(*_SWEEP_COLUMNS)
    .select_from(
        schema.attempts.join(
            schema.task_instances,
            sa.and_(
                _instances.id == _attempts.instance_id, _instances.epoch == _attempts.attempt_no
            ),
        )
    )
    .where(
        _attempts.state == states.AttemptState.RUNNING.value,
        _attempts.monitor_due_at <= sa.bindparam("now", type_=_due_type),
        sa.tuple_(_attempts.monitor_due_at, _attempts.instance_id)
        > sa.tuple_(
            sa.bindparam("after_due", type_=_due_type), sa.bindparam("after_id", type_=sa.String)
        ),
    )
    .order_by(_attempts.monitor_due_at, _attempts.instance_id)
    .limit(sa.bindparam("limit", type_=sa.Integer))
)
_LATE_RETRIES_SELECT = (
    sa.select(_instances.id, _instances.run_id, _instances.epoch, _instances.retry_at)
    .where(
        _instances.state == states.InstanceState.UP_FOR_RETRY.value,
        _instances.retry_at < sa.bindparam("before", type_=_instances.retry_at.type),
    )
    .limit(sa.bindparam("limit", type_=sa.Integer))
)


def sweep_page(
    connection: Connection,
    instance_states: Collection[states.InstanceState],
    *,
    after: str,
    limit: int,
) -> list[SweepRow]:
    """Up to ``limit`` instances in these states with ids after ``after``, by id."""
    rows = connection.execute(
        _SWEEP_PAGE_SELECT,
        {"states": [state.value for state in instance_states], "after": after, "limit": limit},
    )
    return [_sweep_row(row) for row in rows]


def _sweep_row(row: sa.Row[Any]) -> SweepRow:
    return SweepRow(
        row.id,
        row.run_id,
        row.epoch,
        states.InstanceState(row.state),
        row.policy,
        row.updated_observed_at,
        states.AttemptState(row.attempt_state) if row.attempt_state else None,
        row.lease_expires_at,
        row.queued_at,
        row.started_at,
        row.monitor_due_at,
    )


#: Before every due time: the first page of the monitor's read.
MONITOR_START: Final = (datetime(1970, 1, 1, tzinfo=UTC), "")


def monitor_due_page(
    connection: Connection, *, now: datetime, after: tuple[datetime, str], limit: int
) -> list[SweepRow]:
    """Up to ``limit`` instances whose current attempt is RUNNING with a cached due time (the
    first of its lease's end and its timeout) of ``now`` or earlier, in order of (due time,
    instance id), after ``after``: the last row's pair, or ``MONITOR_START``.

    The instance's state is not asked, so that the planners find these few by the attempts'
    index whatever they know of the instances: the caller skips the instances that are not
    RUNNING (one being cancelled keeps its attempt RUNNING until the engine confirms).
    """
    rows = connection.execute(
        _MONITOR_DUE_SELECT,
        {"now": now, "after_due": after[0], "after_id": after[1], "limit": limit},
    )
    return [_sweep_row(row) for row in rows]


def late_retries(connection: Connection, *, before: datetime, limit: int) -> list[LateRetry]:
    """Up to ``limit`` UP_FOR_RETRY instances whose ``retry_at`` is earlier than ``before``."""
    rows = connection.execute(_LATE_RETRIES_SELECT, {"before": before, "limit": limit})
    return [LateRetry(*row) for row in rows]


# -- histories -------------------------------------------------------------------------------


def history(
    connection: Connection,
    *,
    subject_type: vocabulary.SubjectType,
    subject_id: str,
    after_position: int | None = None,
    limit: int | None = None,
    newest_first: bool = False,
    kinds: Collection[str] | None = None,
    outcomes: Collection[str] | None = None,
) -> list[EventRow]:
    """An object's events in the order the ledger recorded them (or the reverse), only of
    ``kinds`` and ``outcomes`` when given.

    A run's history holds its own events and those of its instances; an instance's holds
    those of the instance and its attempts; a definition's, its versions and lifecycle.
    ``after_position`` continues the recorded order.
    """
    match subject_type:
        case vocabulary.SubjectType.RUN:
            subject = _events.run_id == subject_id
        case vocabulary.SubjectType.INSTANCE:
            subject = _events.instance_id == subject_id
        case vocabulary.SubjectType.DEFINITION:
            # The predicate verbatim: SQLite uses a partial index only then.
            subject = sa.and_(
                sa.text(schema.DEFINITION_EVENT_PREDICATE), _events.subject_id == subject_id
            )
    order = _events.position.desc() if newest_first else _events.position
    statement = sa.select(schema.events).where(subject).order_by(order)
    if kinds is not None:
        statement = statement.where(_events.kind.in_(list(kinds)))
    if outcomes is not None:
        statement = statement.where(_events.outcome.in_(list(outcomes)))
    if after_position is not None:
        statement = statement.where(_events.position > after_position)
    if limit is not None:
        statement = statement.limit(limit)
    return [EventRow.from_row(row) for row in connection.execute(statement)]


# -- listings and search --------------------------------------------------------------------


def list_runs(
    connection: Connection,
    *,
    definition_id: str | None = None,
    execution_states: Collection[states.RunExecutionState] | None = None,
    after: pagination.Cursor | None = None,
    limit: int = 50,
    newest_first: bool = True,
) -> pagination.Page[RunRow]:
    """Runs, newest first by default, one keyset page at a time."""
    statement = (
        sa.select(schema.runs)
        .order_by(*pagination.order(_runs.created_at, _runs.id, newest_first=newest_first))
        .limit(limit + 1)
    )
    if definition_id is not None:
        statement = statement.where(_runs.definition_id == definition_id)
    if execution_states is not None:
        statement = statement.where(_runs.execution_state.in_(_literal_states(execution_states)))
    if after is not None:
        statement = statement.where(
            pagination.after(_runs.created_at, _runs.id, after, newest_first=newest_first)
        )
    rows = [RunRow.from_row(row) for row in connection.execute(statement)]
    if len(rows) <= limit:
        return pagination.Page(items=rows, next_cursor=None)
    last = rows[limit - 1]
    return pagination.Page(
        items=rows[:limit], next_cursor=pagination.Cursor(created_at=last.created_at, id=last.id)
    )


def search_instances(
    connection: Connection,
    *,
    definition_id: str | None = None,
    run_id: str | None = None,
    instance_id: str | None = None,
    instance_states: Collection[states.InstanceState] | None = None,
    limit: int = 100,
) -> list[InstanceProgress]:
    """Instances with their current attempt's progress, by definition, run or instance."""
    current = schema.attempts.alias("current_attempt")
    statement = (
        sa.select(
            schema.task_instances,
            _runs.definition_id,
            *[column.label(f"attempt__{column.name}") for column in current.c],
        )
        .join(schema.runs, _runs.id == _instances.run_id)
        .outerjoin(
            current,
            sa.and_(
                current.c.instance_id == _instances.id, current.c.attempt_no == _instances.epoch
            ),
        )
        .order_by(_instances.run_id, _instances.task_key, _instances.map_index)
        .limit(limit)
    )
    if definition_id is not None:
        statement = statement.where(_runs.definition_id == definition_id)
    if run_id is not None:
        statement = statement.where(_instances.run_id == run_id)
    if instance_id is not None:
        statement = statement.where(_instances.id == instance_id)
    if instance_states is not None:
        statement = statement.where(_instances.state.in_(_literal_states(instance_states)))
    found = []
    for row in connection.execute(statement):
        mapping = row._mapping
        attempt = None
        if mapping["attempt__instance_id"] is not None:
            attempt = AttemptRow.from_mapping(
                {column.name: mapping[f"attempt__{column.name}"] for column in current.c}
            )
        found.append(
            InstanceProgress(
                instance=InstanceRow.from_row(row),
                definition_id=str(mapping["definition_id"]),
                current_attempt=attempt,
            )
        )
    return found


@dataclass(frozen=True)
class AttemptLog:
    """Where one attempt's log is, with what a search result names."""

    run_id: str
    instance_id: str
    task_key: str
    attempt_no: int
    executor: str | None
    log_location: str | None


def attempt_logs(
    connection: Connection,
    *,
    definition_id: str | None = None,
    run_id: str | None = None,
    instance_id: str | None = None,
    limit: int = 500,
) -> list[AttemptLog]:
    """Attempts of a definition's runs (newest runs first), of a run, or of an instance."""
    attempts = schema.attempts.c
    statement = (
        sa.select(
            _instances.run_id,
            _instances.id,
            _instances.task_key,
            attempts.attempt_no,
            attempts.executor,
            attempts.log_location,
        )
        .join(schema.task_instances, _instances.id == attempts.instance_id)
        .join(schema.runs, _runs.id == _instances.run_id)
        .order_by(_runs.created_at.desc(), _runs.id, _instances.task_key, attempts.attempt_no)
        .limit(limit)
    )
    if definition_id is not None:
        statement = statement.where(_runs.definition_id == definition_id)
    if run_id is not None:
        statement = statement.where(_instances.run_id == run_id)
    if instance_id is not None:
        statement = statement.where(_instances.id == instance_id)
    return [AttemptLog(*row) for row in connection.execute(statement)]


def unresolved_alerts(
    connection: Connection, *, category: str | None = None, limit: int = DEFAULT_LIMIT
) -> list[AlertRow]:
    """Open and acknowledged alerts, oldest first, optionally of one owner category."""
    alerts = schema.alerts.c
    statement = (
        sa.select(schema.alerts)
        .where(sa.text(schema.UNRESOLVED_ALERT_PREDICATE))
        .order_by(alerts.category, alerts.opened_at, alerts.id)
        .limit(limit)
    )
    if category is not None:
        statement = statement.where(alerts.category == category)
    return [AlertRow.from_row(row) for row in connection.execute(statement)]
