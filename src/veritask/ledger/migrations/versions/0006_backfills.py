"""Backfills as objects, and the scheduled intervals that ``concurrency: forbid`` skipped.

Frozen like 0001: it does not import the package's metadata or types.

- ``backfills``: one row per backfill request (its definition, its half-open range of logical
  times, the parameters, how many of its runs may be active at once, what to do with runs
  that exist, who asked and why, and whether it is still moving).
- ``backfill_intervals``: one row per fire time of the schedule in the range, with the data
  interval the schedule gives it, what the backfill does with it (create, skip, rerun, clear)
  and the run that stands for it once there is one. ``run_id`` has no foreign key: the
  retention purge deletes run snapshots, and a backfill's record outlives them.
- ``schedule_skips``: a scheduled fire time that ``concurrency: forbid`` refused while another
  run was active. No run is created, so the interval's idempotency key stays free (a later
  backfill of it runs); this row keeps the schedule from firing that time again.

Revision ID: 0006
Revises: 0005
Create Date: 2027-02-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _time(name: str, *, nullable: bool = True) -> sa.Column[object]:
    return sa.Column(name, sa.TIMESTAMP(timezone=True), nullable=nullable)


def _json(name: str) -> sa.Column[object]:
    json_type = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
    return sa.Column(name, json_type, nullable=False)


def upgrade() -> None:
    op.create_table(
        "backfills",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("definition_id", sa.String(length=64), nullable=False),
        _time("range_start", nullable=False),
        _time("range_end", nullable=False),
        _json("parameters"),
        sa.Column("max_active_runs", sa.Integer(), nullable=False),
        sa.Column("existing", sa.String(length=16), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("actor", sa.String(length=160), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        _time("created_at", nullable=False),
        _time("finished_at"),
        sa.CheckConstraint(
            "existing IN ('all', 'failed', 'skip')", name=op.f("ck_backfills_existing")
        ),
        sa.CheckConstraint(
            "state IN ('active', 'cancelled', 'done')", name=op.f("ck_backfills_state")
        ),
        sa.CheckConstraint("max_active_runs >= 1", name=op.f("ck_backfills_max_active_positive")),
        sa.ForeignKeyConstraint(
            ["definition_id"],
            ["definitions.id"],
            name=op.f("fk_backfills_definition_id_definitions"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_backfills")),
    )
    op.create_index("ix_backfills_state_created_at", "backfills", ["state", "created_at"])
    op.create_index(
        "ix_backfills_definition_id_created_at", "backfills", ["definition_id", "created_at"]
    )
    op.create_table(
        "backfill_intervals",
        sa.Column("backfill_id", sa.String(length=64), nullable=False),
        _time("logical_time", nullable=False),
        _time("data_interval_start", nullable=False),
        _time("data_interval_end", nullable=False),
        sa.Column("action", sa.String(length=16), nullable=False),
        sa.Column("existing_run_id", sa.String(length=64), nullable=True),
        sa.Column("existing_state", sa.String(length=32), nullable=True),
        sa.Column("run_id", sa.String(length=64), nullable=True),
        sa.CheckConstraint(
            "action IN ('clear', 'create', 'rerun', 'skip')",
            name=op.f("ck_backfill_intervals_action"),
        ),
        sa.ForeignKeyConstraint(
            ["backfill_id"],
            ["backfills.id"],
            name=op.f("fk_backfill_intervals_backfill_id_backfills"),
        ),
        sa.PrimaryKeyConstraint("backfill_id", "logical_time", name=op.f("pk_backfill_intervals")),
    )
    op.create_table(
        "schedule_skips",
        sa.Column("definition_id", sa.String(length=64), nullable=False),
        _time("logical_time", nullable=False),
        sa.Column("active_run_id", sa.String(length=64), nullable=False),
        _time("skipped_at", nullable=False),
        sa.ForeignKeyConstraint(
            ["definition_id"],
            ["definitions.id"],
            name=op.f("fk_schedule_skips_definition_id_definitions"),
        ),
        sa.PrimaryKeyConstraint("definition_id", "logical_time", name=op.f("pk_schedule_skips")),
    )


def downgrade() -> None:
    op.drop_table("schedule_skips")
    op.drop_table("backfill_intervals")
    op.drop_index("ix_backfills_definition_id_created_at", table_name="backfills")
    op.drop_index("ix_backfills_state_created_at", table_name="backfills")
    op.drop_table("backfills")
