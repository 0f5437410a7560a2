"""Find an attempt by its token's hash: a worker's report is authenticated before its body is
read, by the attempt its token names (the API looks the hash up on every callback).

Frozen like 0001: it does not import the package's metadata or types.

Revision ID: 0004
Revises: 0003
Create Date: 2027-01-10
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_attempts_token_hash", "attempts", ["token_hash"])


def downgrade() -> None:
    op.drop_index("ix_attempts_token_hash", table_name="attempts")
