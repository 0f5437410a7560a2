"""Every PUBLISHED run's attestation, signed once when the run is published.

``run_attestations`` keeps, per run and publication (a run cleared after its publication may
be published again), the attestation's body (what was published and what it rests on,
docs/integrity.md), its digest, the Ed25519 signature over its canonical encoding and the
public key that made it. Written once and never updated; no foreign key to ``runs``, like
``run_upstreams``: the retention purge removes them with the run.

Frozen like 0001: it does not import the package's metadata or types.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0017"
down_revision: str | Sequence[str] | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "run_attestations",
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("attested_at", sa.TIMESTAMP(timezone=True), nullable=False),
        sa.Column("body", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("signature", sa.String(length=128), nullable=False),
        sa.Column("public_key", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("run_id", "number", name=op.f("pk_run_attestations")),
    )


def downgrade() -> None:
    op.drop_table("run_attestations")
