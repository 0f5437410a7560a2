"""Pools: named slot counts shared by tasks, the slots each attempt holds, and who waits.

- ``pools``: a name and its number of slots, with who set it and when. The slots in use are
  not stored anywhere: they are counted from the active attempts that name the pool.
- ``attempts.pool``, ``attempts.pool_slots``: written by the transaction that opens the
  attempt, so that a slot is held exactly while the attempt's row is in an active state.
  Attempts opened before this revision keep NULL and hold no slot.
- ``pool_waits``: the instances that may run but wait for their pool, with what ranks them
  (priority, logical time, since when); hints for priorities across runs, never the truth.

Frozen like 0001: it does not import the package's metadata or types.

Revision ID: 0009
Revises: 0008
Create Date: 2027-03-15
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _time(name: str, *, nullable: bool = True) -> sa.Column[object]:
    return sa.Column(name, sa.TIMESTAMP(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "pools",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("slots", sa.Integer(), nullable=False),
        sa.Column("actor", sa.String(length=160), nullable=False),
        _time("updated_at", nullable=False),
        sa.CheckConstraint("slots >= 0", name=op.f("ck_pools_slots_not_negative")),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_pools")),
    )
    op.create_table(
        "pool_waits",
        sa.Column("instance_id", sa.String(length=64), nullable=False),
        sa.Column("pool", sa.String(length=64), nullable=False),
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("task_key", sa.String(length=128), nullable=False),
        sa.Column("slots", sa.Integer(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        _time("logical_time"),
        _time("since", nullable=False),
        _time("seen_at", nullable=False),
        sa.PrimaryKeyConstraint("instance_id", name=op.f("pk_pool_waits")),
    )
    op.create_index(op.f("ix_pool_waits_pool"), "pool_waits", ["pool"])
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("pool", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("pool_slots", sa.Integer(), nullable=True))
    op.create_index(op.f("ix_attempts_pool_state"), "attempts", ["pool", "state"])


def downgrade() -> None:
    op.drop_index(op.f("ix_attempts_pool_state"), table_name="attempts")
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("pool_slots")
        batch.drop_column("pool")
    op.drop_index(op.f("ix_pool_waits_pool"), table_name="pool_waits")
    op.drop_table("pool_waits")
    op.drop_table("pools")
