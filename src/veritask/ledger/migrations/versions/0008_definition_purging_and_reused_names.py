"""A definition may be ``purging``, and a deleted definition's name may be applied again.

- ``definitions.lifecycle`` admits ``purging``: the executors are removing a deleted
  definition's attempts, and one that this process does not serve keeps it there.
- ``definitions.name`` is unique only among the definitions that hold it (``active``,
  ``disabled``, ``deleting``): once deleted, the name may become a new definition with a new
  id, and the old one keeps its history under its own id. A plain index serves lookups by
  name whatever the lifecycle.

Frozen like 0001: it does not import the package's metadata or types. The downgrade fails
if two definitions share a name by then.

Revision ID: 0008
Revises: 0007
Create Date: 2027-03-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_LIFECYCLES = "lifecycle IN ('active', 'deleted', 'deleting', 'disabled', 'purged', 'purging')"
_OLD_LIFECYCLES = "lifecycle IN ('active', 'deleted', 'deleting', 'disabled', 'purged')"
_HOLDS_ITS_NAME = "lifecycle IN ('active', 'deleting', 'disabled')"


def upgrade() -> None:
    with op.batch_alter_table("definitions") as batch:
        batch.drop_constraint(op.f("uq_definitions_name"), type_="unique")
        batch.drop_constraint(op.f("ck_definitions_lifecycle"), type_="check")
        batch.create_check_constraint(op.f("ck_definitions_lifecycle"), _LIFECYCLES)
    op.create_index(op.f("ix_definitions_name"), "definitions", ["name"])
    op.create_index(
        op.f("uq_definitions_live_name"),
        "definitions",
        ["name"],
        unique=True,
        postgresql_where=sa.text(_HOLDS_ITS_NAME),
        sqlite_where=sa.text(_HOLDS_ITS_NAME),
    )


def downgrade() -> None:
    op.drop_index(op.f("uq_definitions_live_name"), table_name="definitions")
    op.drop_index(op.f("ix_definitions_name"), table_name="definitions")
    with op.batch_alter_table("definitions") as batch:
        batch.drop_constraint(op.f("ck_definitions_lifecycle"), type_="check")
        batch.create_check_constraint(op.f("ck_definitions_lifecycle"), _OLD_LIFECYCLES)
        batch.create_unique_constraint(op.f("uq_definitions_name"), ["name"])
