"""Alerts of category ``run_failed``: a run that failed, routed to its definition's owner.

``alerts.category`` admits ``run_failed``. The downgrade fails while such an alert exists.

Frozen like 0001: it does not import the package's metadata or types.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0014"
down_revision: str | Sequence[str] | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_OLD = (
    "category IN ('deadline', 'dependency', 'engine', 'platform', 'queue_quota', "
    "'reconciliation', 'retry_timing', 'scheduler_executor')"
)
_NEW = (
    "category IN ('deadline', 'dependency', 'engine', 'platform', 'queue_quota', "
    "'reconciliation', 'retry_timing', 'run_failed', 'scheduler_executor')"
)


def upgrade() -> None:
    with op.batch_alter_table("alerts") as batch:
        batch.drop_constraint(op.f("ck_alerts_category"), type_="check")
        batch.create_check_constraint(op.f("ck_alerts_category"), _NEW)


def downgrade() -> None:
    with op.batch_alter_table("alerts") as batch:
        batch.drop_constraint(op.f("ck_alerts_category"), type_="check")
        batch.create_check_constraint(op.f("ck_alerts_category"), _OLD)
