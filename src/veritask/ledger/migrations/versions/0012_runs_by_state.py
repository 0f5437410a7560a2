"""Find the runs the scheduler still moves (queued, executing, being cancelled, publishing) by
their states: it reads them every second, and among a long history of finished runs a read of
the whole ``runs`` table grew with it. Partial, so that it holds only those few.

Frozen like 0001: it does not import the package's metadata or types.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


_UNSETTLED = (
    "execution_state IN ('CANCELLING', 'QUEUED', 'RUNNING')"
    " OR publication_state IN ('CHECKING', 'PENDING', 'PUBLISHING')"
)


def upgrade() -> None:
    op.create_index(
        "ix_runs_unsettled_state",
        "runs",
        ["execution_state", "publication_state"],
        postgresql_where=sa.text(_UNSETTLED),
        sqlite_where=sa.text(_UNSETTLED),
    )


def downgrade() -> None:
    op.drop_index("ix_runs_unsettled_state", table_name="runs")
