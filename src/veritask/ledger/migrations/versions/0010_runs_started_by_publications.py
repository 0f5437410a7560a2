"""Runs started by published data: the ``published`` trigger kind and the runs' upstreams.

- ``runs.trigger_kind`` admits ``published``: a run that other definitions' publications
  started (``trigger: {on_published: …}``).
- ``run_upstreams``: the upstream runs whose publication started a run, written in the
  transaction that creates it; a scheduler reads it to tell an answered publication from a
  new one.

Frozen like 0001: it does not import the package's metadata or types. The downgrade fails
if a run started by a publication exists by then.

Revision ID: 0010
Revises: 0009
Create Date: 2027-04-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_KINDS = "trigger_kind IN ('api', 'backfill', 'manual', 'published', 'rerun', 'schedule')"
_OLD_KINDS = "trigger_kind IN ('api', 'backfill', 'manual', 'rerun', 'schedule')"


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_constraint(op.f("ck_runs_trigger_kind"), type_="check")
        batch.create_check_constraint(op.f("ck_runs_trigger_kind"), _KINDS)
    op.create_table(
        "run_upstreams",
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("upstream_run_id", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_run_upstreams_run_id_runs")),
        sa.PrimaryKeyConstraint("run_id", "upstream_run_id", name=op.f("pk_run_upstreams")),
    )
    op.create_index(op.f("ix_run_upstreams_upstream_run_id"), "run_upstreams", ["upstream_run_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_run_upstreams_upstream_run_id"), table_name="run_upstreams")
    op.drop_table("run_upstreams")
    with op.batch_alter_table("runs") as batch:
        batch.drop_constraint(op.f("ck_runs_trigger_kind"), type_="check")
        batch.create_check_constraint(op.f("ck_runs_trigger_kind"), _OLD_KINDS)
