"""Let the monitor read only the running attempts whose lease or timeout may have run out.

Until now it read every running instance each second to compare its lease and timeout with
the clock: with ten thousand open waits that was most of an idle scheduler's work. Each
running attempt's row now holds when the monitor must next look at it (``monitor_due_at``:
the first of its lease's end and its timeout), kept like ``lease_expires_at`` by the
transactions that write the row, and a partial index holds the running ones.

Rows written before this revision have no due time: every running attempt is made due at
once, so the first monitor pass reads each one as before and writes its real due time.

Frozen like 0001: it does not import the package's metadata or types.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | Sequence[str] | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_RUNNING = "state = 'RUNNING'"


def upgrade() -> None:
    op.add_column("attempts", sa.Column("monitor_due_at", sa.TIMESTAMP(timezone=True)))
    # Due at once (SQLite keeps naive UTC text, PostgreSQL a timestamptz).
    at_once = "1970-01-01 00:00:00"
    if op.get_bind().dialect.name == "postgresql":
        at_once += "+00"
    op.execute(sa.text(f"UPDATE attempts SET monitor_due_at = '{at_once}' WHERE {_RUNNING}"))
    op.create_index(
        "ix_attempts_monitor_due",
        "attempts",
        ["monitor_due_at", "instance_id"],
        postgresql_where=sa.text(_RUNNING),
        sqlite_where=sa.text(_RUNNING),
    )


def downgrade() -> None:
    op.drop_index("ix_attempts_monitor_due", table_name="attempts")
    op.drop_column("attempts", "monitor_due_at")
