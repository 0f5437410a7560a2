"""The record of operations on the data (verify and repair, replay, the purges): the
``operations`` table, one row per operation, written when it starts and when it ends.

Every function works in the caller's transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from veritask.core.jsontypes import JSONObject, JSONValue
from veritask.ledger import schema

_operations = schema.operations.c


@dataclass(frozen=True)
class OperationRow:
    """One recorded operation; ``finished_at`` and ``result`` are None while it runs."""

    id: int
    kind: str
    actor: str
    started_at: datetime
    finished_at: datetime | None
    dry_run: bool
    parameters: JSONValue
    result: JSONValue


def record_start(
    connection: Connection,
    *,
    kind: str,
    actor: str,
    started_at: datetime,
    dry_run: bool,
    parameters: JSONObject,
) -> int:
    """Record that an operation started; its id."""
    operation_id: int = connection.execute(
        schema.operations.insert()
        .values(
            kind=kind, actor=actor, started_at=started_at, dry_run=dry_run, parameters=parameters
        )
        .returning(_operations.id)
    ).scalar_one()
    return operation_id


def record_end(
    connection: Connection, operation_id: int, *, finished_at: datetime, result: JSONObject
) -> None:
    connection.execute(
        schema.operations.update()
        .where(_operations.id == operation_id)
        .values(finished_at=finished_at, result=result)
    )


def newest(connection: Connection, *, limit: int) -> list[OperationRow]:
    """The newest operations, newest first."""
    rows = connection.execute(
        sa.select(schema.operations).order_by(_operations.id.desc()).limit(limit)
    ).mappings()
    return [
        OperationRow(
            row["id"],
            row["kind"],
            row["actor"],
            row["started_at"],
            row["finished_at"],
            row["dry_run"],
            row["parameters"],
            row["result"],
        )
        for row in rows
    ]


def last_started_at(connection: Connection, *, kind: str, actor: str) -> datetime | None:
    """When ``actor`` last started an operation of ``kind``."""
    found: datetime | None = connection.execute(
        sa.select(sa.func.max(_operations.started_at)).where(
            _operations.kind == kind, _operations.actor == actor
        )
    ).scalar_one()
    return found
