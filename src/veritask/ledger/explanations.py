"""What ``explain`` reads: a run's or an instance's recorded events with how each was
classified, its run-level events, and the events refused for it (docs/explain.md).

One query per table for a whole run (by ``run_id``, indexed), never one per instance; the
events come in recorded order (``position``), which is the order the ledger folded them in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from veritask.core.explanation import Recorded, Refusal, RunRecorded
from veritask.ledger import schema, statements
from veritask.ledger.vocabulary import SubjectType


@dataclass
class InstanceRecord:
    """One instance's identity, its policy and its recorded and refused events."""

    instance_id: str
    run_id: str
    task_key: str
    map_index: int
    policy: str
    """Its policy as the stored JSON text: a run's instances share a few, parsed once."""
    recorded: list[Recorded] = field(default_factory=list)
    refusals: list[Refusal] = field(default_factory=list)


_t = schema.task_instances.c
_e = schema.events.c
_x = schema.rejected_events.c


def instance_records(
    connection: Connection, *, run_id: str | None = None, instance_id: str | None = None
) -> list[InstanceRecord]:
    """The run's instances (or the one instance) with their events, in task order."""
    where = _t.run_id == run_id if instance_id is None else _t.id == instance_id
    found = {
        row.id: InstanceRecord(row.id, row.run_id, row.task_key, row.map_index, row.policy)
        for row in connection.execute(
            sa.select(_t.id, _t.run_id, _t.task_key, _t.map_index, statements.POLICY_TEXT)
            .where(where)
            .order_by(_t.task_key, _t.map_index)
        )
    }
    if not found:
        return []
    events_of = (
        _e.instance_id == instance_id
        if instance_id is not None
        else sa.and_(_e.run_id == run_id, _e.subject_type == SubjectType.INSTANCE.value)
    )
    rows = connection.execute(
        sa.select(
            _e.event_id,
            _e.instance_id,
            _e.attempt_no,
            _e.kind,
            _e.actor,
            _e.event_time,
            _e.observed_at,
            _e.evidence,
            _e.seq,
            _e.outcome,
        )
        .where(events_of)
        .order_by(_e.position)
    )
    for row in rows:
        record = found.get(row.instance_id)
        if record is None:
            continue
        record.recorded.append(Recorded(statements.event_from_row(row), row.outcome))
    refused_of = _x.instance_id == instance_id if instance_id is not None else _x.run_id == run_id
    for refusal in connection.execute(
        sa.select(
            _x.instance_id,
            _x.event_id,
            _x.attempt_no,
            _x.kind,
            _x.actor,
            _x.event_time,
            _x.observed_at,
            _x.reason,
        )
        .where(refused_of)
        .order_by(_x.position)
    ):
        record = found.get(refusal.instance_id)
        if record is not None:
            record.refusals.append(
                Refusal(
                    refusal.event_id,
                    refusal.attempt_no,
                    refusal.kind,
                    refusal.actor,
                    refusal.event_time,
                    refusal.observed_at,
                    refusal.reason,
                )
            )
    return list(found.values())


def run_events(connection: Connection, run_id: str) -> Sequence[RunRecorded]:
    """The run's own events (its creation and the moves of its two states), recorded order."""
    rows = connection.execute(
        sa.select(
            _e.event_id,
            _e.kind,
            _e.actor,
            _e.event_time,
            _e.observed_at,
            _e.from_state,
            _e.to_state,
            _e.reason,
            _e.evidence,
        )
        .where(_e.run_id == run_id, _e.subject_type == SubjectType.RUN.value)
        .order_by(_e.position)
    )
    return [
        RunRecorded(
            row.event_id,
            row.kind,
            row.actor,
            row.event_time,
            row.observed_at,
            row.from_state,
            row.to_state,
            row.reason,
            row.evidence,
        )
        for row in rows
    ]


def observed_times(connection: Connection, run_id: str) -> list[datetime]:
    """When the run's events and its instances' were recorded, each instant once, in order."""
    rows = connection.execute(
        sa.select(_e.observed_at).where(_e.run_id == run_id).distinct().order_by(_e.observed_at)
    )
    return [row.observed_at for row in rows]


def observed_bounds(connection: Connection, run_id: str) -> tuple[int, datetime | None]:
    """How many distinct instants the run's events were recorded at, and the last one: one
    aggregate, whatever the run's size."""
    row = connection.execute(
        sa.select(sa.func.count(sa.distinct(_e.observed_at)), sa.func.max(_e.observed_at)).where(
            _e.run_id == run_id
        )
    ).one()
    return int(row[0]), row[1]


def observed_neighbours(
    connection: Connection, run_id: str, here: datetime
) -> tuple[datetime | None, datetime | None]:
    """The last instant an event of the run was recorded before ``here``, and the first after."""
    before = connection.execute(
        sa.select(sa.func.max(_e.observed_at)).where(_e.run_id == run_id, _e.observed_at < here)
    ).scalar_one()
    after = connection.execute(
        sa.select(sa.func.min(_e.observed_at)).where(_e.run_id == run_id, _e.observed_at > here)
    ).scalar_one()
    return before, after
