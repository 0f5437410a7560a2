"""An instance's reason beside its state: pages that list many instances (a definition's grid
of 100 runs by 200 tasks) read it instead of decoding and folding each one's stored facts.

Rows written before this revision keep NULL until their instance next changes; readers fold
those. Frozen like 0001: it does not import the package's metadata or types.

Revision ID: 0005
Revises: 0004
Create Date: 2027-01-12
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("task_instances", sa.Column("reason", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("task_instances", "reason")
