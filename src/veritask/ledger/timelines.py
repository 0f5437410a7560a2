"""The recorded events of runs' instances, grouped by instance, for computing durations.

One query per table for a whole run (or a definition's recent runs): the instances, then
their events by ``run_id`` (indexed), never one query per instance.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from veritask.core.events import Event
from veritask.core.jsontypes import JSONObject
from veritask.core.states import RunExecutionState
from veritask.ledger import schema, statements
from veritask.ledger.rows import RunRow

#: The execution states of a run whose instances will not move again by themselves.
FINISHED = (RunExecutionState.SUCCESS, RunExecutionState.FAILED, RunExecutionState.CANCELLED)


@dataclass
class InstanceHistory:
    """One instance's identity, stored state and policy, and its recorded events."""

    instance_id: str
    run_id: str
    task_key: str
    map_index: int
    state: str
    policy: JSONObject
    events: list[Event] = field(default_factory=list)


def instance_histories(connection: Connection, run_ids: Sequence[str]) -> list[InstanceHistory]:
    """The instances of these runs with their events, in run then task order."""
    if not run_ids:
        return []
    t, e = schema.task_instances.c, schema.events.c
    found = {
        row.id: InstanceHistory(
            row.id, row.run_id, row.task_key, row.map_index, row.state, row.policy
        )
        for row in connection.execute(
            sa.select(t.id, t.run_id, t.task_key, t.map_index, t.state, t.policy)
            .where(t.run_id.in_(run_ids))
            .order_by(t.run_id, t.task_key, t.map_index)
        )
    }
    rows = connection.execute(
        sa.select(*statements.EVENT_FIELDS)
        .where(e.run_id.in_(run_ids), e.subject_type == "instance")
        .order_by(e.position)
    )
    for row in rows:
        history = found.get(row.instance_id)
        if history is not None:
            history.events.append(statements.event_from_row(row))
    return list(found.values())


def recent_run_ids(connection: Connection, definition_id: str, *, limit: int) -> list[str]:
    """The ids of the definition's newest runs (keyset index on created_at, id)."""
    r = schema.runs.c
    return list(
        connection.execute(
            sa.select(r.id)
            .where(r.definition_id == definition_id)
            .order_by(r.created_at.desc(), r.id.desc())
            .limit(limit)
        ).scalars()
    )


def finished_runs(
    connection: Connection,
    *,
    since: datetime,
    until: datetime | None = None,
    definition_id: str | None = None,
    limit: int,
) -> list[RunRow]:
    """Finished runs created in ``[since, until)``, oldest first, at most ``limit`` (keyset
    index on created_at, id)."""
    r = schema.runs.c
    statement = (
        sa.select(schema.runs)
        .where(r.created_at >= since, r.execution_state.in_([s.value for s in FINISHED]))
        .order_by(r.created_at, r.id)
        .limit(limit)
    )
    if until is not None:
        statement = statement.where(r.created_at < until)
    if definition_id is not None:
        statement = statement.where(r.definition_id == definition_id)
    return [RunRow.from_row(row) for row in connection.execute(statement)]
