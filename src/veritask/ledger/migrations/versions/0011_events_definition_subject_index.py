"""Index events by subject only for definitions: fewer bytes per task event.

``ix_events_subject_type_subject_id_position`` held an entry for every event, though a run's
or an instance's own events name it in ``run_id`` or ``instance_id`` as well, which have
their own indexes; only a definition's events need an index by subject. The new partial
index holds those alone: about 300 bytes fewer per task on SQLite, 500 on PostgreSQL.

The upgrade first checks that every recorded run or instance event names its subject in
``run_id`` or ``instance_id`` (events cannot be updated, so a ledger where one does not is
refused, not rewritten): the history and purge queries find them there from now on.

The instances' snapshots (``fold``, ``policy``) are written in a shorter format from now on,
and the old one is still read (``core/codec.py``, ``TaskPolicy.from_json``): no row moves.

Frozen like 0001: it does not import the package's metadata or types.

Revision ID: 0011
Revises: 0010
Create Date: 2027-04-20
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_DEFINITION = "subject_type = 'definition'"
_UNNAMED = (
    "SELECT count(*) FROM events WHERE "
    "(subject_type = 'run' AND (run_id IS NULL OR run_id <> subject_id)) OR "
    "(subject_type = 'instance' AND (instance_id IS NULL OR instance_id <> subject_id))"
)


def upgrade() -> None:
    unnamed = op.get_bind().execute(sa.text(_UNNAMED)).scalar_one()
    if unnamed:
        raise RuntimeError(
            f"0011: {unnamed} run or instance events do not name their subject in run_id or "
            "instance_id; the ledger keeps its subject index (ask for help before upgrading)"
        )
    op.create_index(
        "ix_events_definition_subject_id_position",
        "events",
        ["subject_id", "position"],
        postgresql_where=sa.text(_DEFINITION),
        sqlite_where=sa.text(_DEFINITION),
    )
    op.drop_index("ix_events_subject_type_subject_id_position", table_name="events")


def downgrade() -> None:
    op.create_index(
        "ix_events_subject_type_subject_id_position",
        "events",
        ["subject_type", "subject_id", "position"],
    )
    op.drop_index("ix_events_definition_subject_id_position", table_name="events")
