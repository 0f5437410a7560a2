"""Every event carries the hash of its content chained to its subject's previous event.

- ``events.chain_hash``: SHA-256 (hex) of the event's canonical encoding with the hash of the
  previous event of its subject (docs/integrity.md). Events recorded before this revision are
  hashed here, once, in position order per subject; the append-only trigger is lifted for
  that and only that, inside this migration's transaction.
- ``task_instances.chain_head``, ``runs.chain_head``, ``definitions.chain_head``: the hash of
  the subject's last event, written with every append.
- ``chain_checkpoints``: signed checkpoints of the chains' heads, append-only.

Frozen like 0001: it does not import the package's metadata or types. The encoding below is
the one ``ledger/chain.py`` defines; ``tests/migration`` proves that ``veritask verify``
holds on a ledger hashed here.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-04
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0016"
down_revision: str | Sequence[str] | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CHAINED_COLUMNS = (
    "event_id",
    "subject_type",
    "subject_id",
    "run_id",
    "instance_id",
    "attempt_no",
    "kind",
    "actor",
    "seq",
    "from_state",
    "to_state",
    "event_time",
    "observed_at",
    "evidence",
    "outcome",
    "reason",
    "fingerprint",
)
SUBJECT_TABLES = {"instance": "task_instances", "run": "runs", "definition": "definitions"}
PAGE = 5000

# 0001's SQLite update guard, dropped and made again around the hashing.
SQLITE_REFUSE_UPDATE = """
CREATE TRIGGER {table}_refuse_update BEFORE UPDATE ON {table}
BEGIN
    SELECT RAISE(ABORT, 'veritask append-only: UPDATE on {table} refused');
END
"""
SQLITE_CHECKPOINT_GUARD = """
CREATE TRIGGER chain_checkpoints_refuse_{op} BEFORE {op} ON chain_checkpoints
BEGIN
    SELECT RAISE(ABORT, 'veritask append-only: {op} on chain_checkpoints refused');
END
"""


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _microseconds(value: object) -> int:
    if not isinstance(value, datetime):
        raise TypeError(f"expected a datetime, got {value!r}")
    aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    return (aware - EPOCH) // timedelta(microseconds=1)


def _number(value: object) -> object:
    if isinstance(value, dict):
        return {key: _number(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_number(item) for item in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _link(row: dict[str, object], prev: str | None) -> str:
    values: list[object] = [prev or ""]
    for name in CHAINED_COLUMNS:
        value = row[name]
        if name in ("event_time", "observed_at"):
            value = _microseconds(value)
        elif name == "evidence":
            value = _number(value)
        values.append(value)
    encoded = json.dumps(values, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(encoded).hexdigest()


def _events() -> sa.TableClause:
    json_type = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
    columns = [
        sa.column(name, sa.TIMESTAMP(timezone=True))
        if name in ("event_time", "observed_at")
        else sa.column(name, json_type)
        if name == "evidence"
        else sa.column(name)
        for name in CHAINED_COLUMNS
    ]
    return sa.table("events", sa.column("position"), sa.column("chain_hash"), *columns)


def _hash_existing_events() -> None:
    bind = op.get_bind()
    events = _events()
    heads: dict[tuple[str, str], str] = {}
    after = 0
    update = (
        events.update()
        .where(events.c.position == sa.bindparam("b_position"))
        .values(chain_hash=sa.bindparam("b_hash"))
    )
    while True:
        page = bind.execute(
            sa.select(events)
            .where(events.c.position > after)
            .order_by(events.c.position)
            .limit(PAGE)
        ).all()
        if not page:
            break
        changes = []
        for row in page:
            data = dict(row._mapping)
            subject = (str(data["subject_type"]), str(data["subject_id"]))
            heads[subject] = _link(data, heads.get(subject))
            changes.append({"b_position": data["position"], "b_hash": heads[subject]})
        bind.execute(update, changes)
        after = page[-1].position
    for subject_type, table_name in SUBJECT_TABLES.items():
        table = sa.table(table_name, sa.column("id"), sa.column("chain_head"))
        rows = [
            {"b_id": subject_id, "b_head": head}
            for (kind, subject_id), head in heads.items()
            if kind == subject_type
        ]
        for start in range(0, len(rows), PAGE):
            bind.execute(
                table.update()
                .where(table.c.id == sa.bindparam("b_id"))
                .values(chain_head=sa.bindparam("b_head")),
                rows[start : start + PAGE],
            )


def _create_checkpoints() -> None:
    op.create_table(
        "chain_checkpoints",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("sealed_at", sa.TIMESTAMP(timezone=True), nullable=False),
        sa.Column("through_position", sa.BigInteger(), nullable=False),
        sa.Column("previous", sa.String(length=64), nullable=True),
        sa.Column("body", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("signature", sa.String(length=128), nullable=False),
        sa.Column("public_key", sa.String(length=64), nullable=False),
        sa.CheckConstraint("kind IN ('purge', 'seal')", name=op.f("ck_chain_checkpoints_kind")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_chain_checkpoints")),
        sqlite_autoincrement=True,
    )


def upgrade() -> None:
    postgres = op.get_context().dialect.name == "postgresql"
    op.add_column("events", sa.Column("chain_hash", sa.String(length=64), nullable=True))
    for table in SUBJECT_TABLES.values():
        op.add_column(table, sa.Column("chain_head", sa.String(length=64), nullable=True))
    _create_checkpoints()
    if postgres:
        op.execute(
            "CREATE TRIGGER chain_checkpoints_append_only BEFORE UPDATE OR DELETE OR TRUNCATE "
            "ON chain_checkpoints FOR EACH STATEMENT EXECUTE FUNCTION veritask_refuse_change()"
        )
        op.execute("ALTER TABLE events DISABLE TRIGGER events_append_only")
        _hash_existing_events()
        op.execute("ALTER TABLE events ENABLE TRIGGER events_append_only")
        return
    for statement in ("UPDATE", "DELETE"):
        op.execute(SQLITE_CHECKPOINT_GUARD.format(op=statement))
    op.execute("DROP TRIGGER events_refuse_update")
    _hash_existing_events()
    op.execute(SQLITE_REFUSE_UPDATE.format(table="events"))


def downgrade() -> None:
    op.drop_table("chain_checkpoints")
    for table in SUBJECT_TABLES.values():
        op.drop_column(table, "chain_head")
    op.drop_column("events", "chain_hash")
