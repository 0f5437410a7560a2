"""Count the progress each attempt records, so that one attempt cannot fill the ledger.

``attempts.progress_bytes`` holds the JSON bytes of the progress reports recorded for the
attempt; past the bound (``core/reports.py``) its further progress is refused and counted.
Attempts recorded before this revision start counting from nothing.

Frozen like 0001: it does not import the package's metadata or types.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | Sequence[str] | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("attempts", sa.Column("progress_bytes", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    op.drop_column("attempts", "progress_bytes")
