"""The ``schedulers`` table: one row per scheduler process, with its heartbeat.

``scheduling.lease`` decides who may run (on SQLite, the holder of a file lock); these are its
reads and writes, each inside the caller's transaction.
"""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from veritask.ledger import schema

_schedulers = schema.schedulers


class SchedulerRow(NamedTuple):
    """Who a registered scheduler is and when it last beat."""

    id: str
    host: str
    pid: int
    heartbeat_at: datetime


def latest_scheduler(connection: Connection) -> SchedulerRow | None:
    """The registered scheduler that beat last, if any."""
    s = _schedulers.c
    row = connection.execute(
        sa.select(s.id, s.host, s.pid, s.heartbeat_at).order_by(s.heartbeat_at.desc())
    ).first()
    return None if row is None else SchedulerRow(*row)


def forget_every_scheduler(connection: Connection) -> None:
    """Delete every scheduler's row (SQLite: the lock's holder knows the rest are dead)."""
    connection.execute(_schedulers.delete())


def forget_schedulers_silent_since(connection: Connection, moment: datetime) -> None:
    """Delete the rows of schedulers whose last heartbeat is older than ``moment``."""
    connection.execute(_schedulers.delete().where(_schedulers.c.heartbeat_at < moment))


def register_scheduler(
    connection: Connection, *, scheduler_id: str, host: str, pid: int, now: datetime
) -> None:
    """Add this scheduler's row, started and beating ``now``."""
    connection.execute(
        _schedulers.insert().values(
            id=scheduler_id, host=host, pid=pid, started_at=now, heartbeat_at=now
        )
    )


def beat(connection: Connection, scheduler_id: str, now: datetime) -> bool:
    """Record that the scheduler ``scheduler_id`` was alive at ``now``; False if it has no row
    (another scheduler forgot it after it stayed silent too long)."""
    result = connection.execute(
        _schedulers.update().where(_schedulers.c.id == scheduler_id).values(heartbeat_at=now)
    )
    return bool(result.rowcount)


def live_scheduler_ids(connection: Connection, since: datetime) -> list[str]:
    """The ids of the schedulers that beat at or after ``since``, in id order."""
    s = _schedulers.c
    return list(
        connection.execute(sa.select(s.id).where(s.heartbeat_at >= since).order_by(s.id)).scalars()
    )


def forget_scheduler(connection: Connection, scheduler_id: str) -> None:
    """Delete the row of the scheduler ``scheduler_id`` (it stops)."""
    connection.execute(_schedulers.delete().where(_schedulers.c.id == scheduler_id))
