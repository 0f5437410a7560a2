"""An attempt's last error and what it cost, beside its state.

- ``error_message``: the worker's tail of a failed task's output (a callable's traceback, a
  command's stderr) or the SQL server's error, bounded to 4 KiB.
- ``cpu_user_seconds``, ``cpu_system_seconds``, ``peak_rss_bytes``: the task process's
  resource use from the wait that reaped it (shell and call tasks only).

Written once, by the first completion report that carries them; attempts recorded before this
revision keep NULL. Frozen like 0001: it does not import the package's metadata or types.

Revision ID: 0007
Revises: 0006
Create Date: 2027-02-15
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("error_message", sa.Text(), nullable=True))
        batch.add_column(sa.Column("cpu_user_seconds", sa.Float(), nullable=True))
        batch.add_column(sa.Column("cpu_system_seconds", sa.Float(), nullable=True))
        batch.add_column(sa.Column("peak_rss_bytes", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("peak_rss_bytes")
        batch.drop_column("cpu_system_seconds")
        batch.drop_column("cpu_user_seconds")
        batch.drop_column("error_message")
