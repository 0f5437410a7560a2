"""The runs the scheduler's loop moves: read up to fifty times a second, so built once.

A run is active while it executes, and after it succeeded while it publishes. The loop reads
them all on a full scan, else only the runs it knows and the ones created since it last
looked (docs/scheduling.md).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from veritask.core.jsontypes import JSONObject
from veritask.core.states import PublicationState, RunExecutionState, TriggerKind
from veritask.ledger import schema


@dataclass(frozen=True)
class ActiveRun:
    """A run the scheduler moves: executing, being cancelled, or publishing."""

    id: str
    definition_id: str
    definition_version: int
    logical_time: datetime | None
    parameters: JSONObject
    execution_state: RunExecutionState
    version: int
    publication_state: PublicationState
    created_at: datetime
    trigger_kind: TriggerKind = TriggerKind.SCHEDULE


class RunOrigin(NamedTuple):
    """What a run was made of: its definition version, logical time and parameters."""

    definition_id: str
    definition_version: int
    logical_time: datetime | None
    parameters: JSONObject


_EXECUTING = (RunExecutionState.RUNNING.value, RunExecutionState.CANCELLING.value)
_PUBLISHING = (
    PublicationState.PENDING.value,
    PublicationState.CHECKING.value,
    PublicationState.PUBLISHING.value,
)

_runs = schema.runs.c
_RUN_COLUMNS = (
    _runs.id,
    _runs.definition_id,
    _runs.definition_version,
    _runs.logical_time,
    _runs.parameters,
    _runs.execution_state,
    _runs.version,
    _runs.publication_state,
    _runs.created_at,
    _runs.trigger_kind,
)
_ACTIVE_RUN = sa.and_(
    sa.or_(
        _runs.execution_state.in_(_EXECUTING),
        sa.and_(
            _runs.execution_state == RunExecutionState.SUCCESS.value,
            _runs.publication_state.in_(_PUBLISHING),
        ),
    ),
    # Implied by the above; repeated verbatim so that SQLite's planner takes the partial
    # index of the few unsettled runs instead of reading every run.
    sa.text(f"({schema.UNSETTLED_RUN_PREDICATE})"),
)
# Built once: the loop reads the active runs up to fifty times a second, and a statement built
# (and compiled, for a list of ids of another length) for each read cost more than the read.
_ACTIVE_RUNS_SELECT = sa.select(*_RUN_COLUMNS).where(_ACTIVE_RUN)
_CREATED_SINCE = _runs.created_at >= sa.bindparam("since", type_=_runs.created_at.type)
_NEW_RUNS_SELECT = sa.select(*_RUN_COLUMNS).where(_ACTIVE_RUN, _CREATED_SINCE)
_KNOWN_OR_NEW_RUNS_SELECT = sa.select(*_RUN_COLUMNS).where(
    _ACTIVE_RUN, sa.or_(_CREATED_SINCE, _runs.id.in_(sa.bindparam("known", expanding=True)))
)
_ORIGIN_SELECT = sa.select(
    _runs.definition_id, _runs.definition_version, _runs.logical_time, _runs.parameters
).where(_runs.id == sa.bindparam("run_id"))


def active_runs(
    connection: Connection, *, since: datetime | None = None, known: Collection[str] = ()
) -> list[ActiveRun]:
    """Every active run; with ``since``, only those created since then and the ``known`` ones."""
    statement = _ACTIVE_RUNS_SELECT
    parameters: dict[str, object] = {}
    if since is not None:
        parameters["since"] = since
        statement = _KNOWN_OR_NEW_RUNS_SELECT if known else _NEW_RUNS_SELECT
        if known:
            parameters["known"] = list(known)
    return [
        ActiveRun(
            row.id,
            row.definition_id,
            row.definition_version,
            row.logical_time,
            row.parameters,
            RunExecutionState(row.execution_state),
            row.version,
            PublicationState(row.publication_state),
            row.created_at,
            TriggerKind(row.trigger_kind),
        )
        for row in connection.execute(statement, parameters)
    ]


def run_origin(connection: Connection, run_id: str) -> RunOrigin:
    """The definition version, logical time and parameters of the run ``run_id``."""
    row = connection.execute(_ORIGIN_SELECT, {"run_id": run_id}).one()
    return RunOrigin(row.definition_id, row.definition_version, row.logical_time, row.parameters)
