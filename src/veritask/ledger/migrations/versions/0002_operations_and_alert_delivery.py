"""Observability and operations: who took and closed an alert, webhook deliveries, recorded
operations, metric values written by other processes, the scheduler loop's last tick.

Frozen like 0001: it does not import the package's metadata or types.

- ``alerts``: ``acknowledged_by``, ``resolved_by`` (actors), ``delivery_state`` and
  ``next_delivery_at`` (the webhook deliverer's queue, with a partial index on pending ones);
- ``alert_deliveries``: every delivery attempt, with the answer or the error;
- ``operations``: purges, log removals, repairs and replays, with who, when, what and result;
- ``metric_values``: counters and gauges that ``/metrics`` reads at scrape time;
- ``schedulers.last_tick_at``: when each scheduler's loop last finished a tick.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

PENDING_DELIVERY = "delivery_state = 'pending'"


def _time(name: str, *, nullable: bool = True) -> sa.Column[object]:
    return sa.Column(name, sa.TIMESTAMP(timezone=True), nullable=nullable)


def _json(name: str, *, nullable: bool = False, none_as_null: bool = False) -> sa.Column[object]:
    json_type = sa.JSON(none_as_null=none_as_null).with_variant(
        postgresql.JSONB(none_as_null=none_as_null, astext_type=sa.Text()), "postgresql"
    )
    return sa.Column(name, json_type, nullable=nullable)


def _position_type() -> sa.types.TypeEngine[int]:
    # Only ``INTEGER PRIMARY KEY`` is SQLite's autoincrementing rowid alias.
    return sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.add_column("alerts", sa.Column("acknowledged_by", sa.String(length=160), nullable=True))
    op.add_column("alerts", sa.Column("resolved_by", sa.String(length=160), nullable=True))
    op.add_column("alerts", sa.Column("delivery_state", sa.String(length=16), nullable=True))
    op.add_column("alerts", _time("next_delivery_at"))
    op.create_index(
        "ix_alerts_pending_delivery",
        "alerts",
        ["next_delivery_at"],
        postgresql_where=sa.text(PENDING_DELIVERY),
        sqlite_where=sa.text(PENDING_DELIVERY),
    )
    op.add_column("schedulers", _time("last_tick_at"))
    op.create_table(
        "alert_deliveries",
        sa.Column("id", _position_type(), autoincrement=True, nullable=False),
        sa.Column("alert_id", _position_type(), nullable=False),
        sa.Column("target", sa.String(length=1024), nullable=False),
        sa.Column("attempt_no", sa.Integer(), nullable=False),
        _time("attempted_at", nullable=False),
        sa.Column("delivered", sa.Boolean(), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["alert_id"], ["alerts.id"], name=op.f("fk_alert_deliveries_alert_id_alerts")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alert_deliveries")),
        sqlite_autoincrement=True,
    )
    op.create_index(
        "ix_alert_deliveries_alert_id_attempt_no",
        "alert_deliveries",
        ["alert_id", "attempt_no"],
    )
    op.create_table(
        "operations",
        sa.Column("id", _position_type(), autoincrement=True, nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("actor", sa.String(length=160), nullable=False),
        _time("started_at", nullable=False),
        _time("finished_at"),
        sa.Column("dry_run", sa.Boolean(), nullable=False),
        _json("parameters"),
        _json("result", nullable=True, none_as_null=True),
        sa.CheckConstraint(
            "kind IN ('purge_events', 'remove_logs', 'repair', 'replay')",
            name=op.f("ck_operations_kind"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_operations")),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_operations_kind_started_at", "operations", ["kind", "started_at"])
    op.create_table(
        "metric_values",
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("labels", sa.String(length=512), nullable=False),
        sa.Column("value", sa.Double(), nullable=False),
        _time("updated_at", nullable=False),
        sa.PrimaryKeyConstraint("name", "labels", name=op.f("pk_metric_values")),
    )


def downgrade() -> None:
    op.drop_table("metric_values")
    op.drop_table("operations")
    op.drop_table("alert_deliveries")
    op.drop_column("schedulers", "last_tick_at")
    op.drop_index("ix_alerts_pending_delivery", table_name="alerts")
    for column in ("next_delivery_at", "delivery_state", "resolved_by", "acknowledged_by"):
        op.drop_column("alerts", column)
