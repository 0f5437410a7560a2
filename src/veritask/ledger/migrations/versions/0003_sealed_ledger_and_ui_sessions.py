"""The ledger cannot be rewritten from inside; web UI sessions end when their user signs out.

Frozen like 0001: it does not import the package's metadata or types.

- SQLite: ``INSERT OR REPLACE`` / ``REPLACE INTO`` delete the conflicting row without firing
  delete triggers (unless a connection enables recursive triggers, which another program need
  not do). A ``BEFORE INSERT`` guard now meets every conflict first: a second row with an
  existing ``events.event_id`` is dropped, exactly as the ledger's ``ON CONFLICT (event_id)
  DO NOTHING`` already does, so the first row is never replaced; a row naming an existing
  ``position`` (the only unique key of ``rejected_events``) is refused. The delete guard no
  longer reads ``purge_permit`` (anyone could insert its row): it asks
  ``veritask_purge_permitted()``, a function that only Veritask's own connections register
  (ledger/dialects.py) and that answers true only inside the retention purge. Any other
  connection (the ``sqlite3`` shell, another program) gets "no such function" and deletes
  nothing.
- PostgreSQL: the setting ``veritask.retention_purge`` must now hold the purge permit, whose
  SHA-256 the function ``veritask_purge_key()`` returns; ``'on'`` unlocks nothing. This
  migration creates that function returning NULL (no permit enrolled: no delete passes);
  ledger/permits.py replaces it with the hash of the permit when one is first enrolled. The
  trigger function's ``search_path`` is pinned, so that no role can shadow the key function
  with one of its own.
- ``ui_sessions``: every signed-in web UI session, by the SHA-256 of its random id, with the
  token it signed in with; signing out ends it.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-13
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

APPEND_ONLY_TABLES = ("events", "rejected_events")

PG_NO_KEY = """
CREATE FUNCTION veritask_purge_key() RETURNS text LANGUAGE sql STABLE AS $$ SELECT NULL::text $$
"""

PG_FUNCTION = """
CREATE OR REPLACE FUNCTION veritask_refuse_change() RETURNS trigger LANGUAGE plpgsql
SET search_path = pg_catalog, {schema} AS $$
DECLARE
    key text := veritask_purge_key();
    offered text := coalesce(current_setting('veritask.retention_purge', true), '');
BEGIN
    IF TG_OP = 'DELETE' AND key IS NOT NULL
       AND encode(sha256(convert_to(offered, 'UTF8')), 'hex') = key THEN
        RETURN NULL;
    END IF;
    RAISE EXCEPTION 'veritask append-only: % on % refused; only the retention purge deletes',
        TG_OP, TG_TABLE_NAME USING ERRCODE = 'VT001';
END
$$
"""

# 0001's function, for the downgrade.
PG_FUNCTION_0001 = """
CREATE OR REPLACE FUNCTION veritask_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE'
       AND coalesce(current_setting('veritask.retention_purge', true), '') = 'on' THEN
        RETURN NULL;
    END IF;
    RAISE EXCEPTION 'veritask append-only: % on % refused; only the retention purge deletes',
        TG_OP, TG_TABLE_NAME USING ERRCODE = 'VT001';
END
$$
"""

SQLITE_REFUSE_DELETE = """
CREATE TRIGGER {table}_refuse_delete BEFORE DELETE ON {table}
WHEN NOT veritask_purge_permitted()
BEGIN
    SELECT RAISE(ABORT, 'veritask append-only: DELETE on {table} refused; only the purge deletes');
END
"""
SQLITE_REFUSE_DELETE_0001 = """
CREATE TRIGGER {table}_refuse_delete BEFORE DELETE ON {table}
WHEN NOT EXISTS (SELECT 1 FROM purge_permit)
BEGIN
    SELECT RAISE(ABORT, 'veritask append-only: DELETE on {table} refused; only the purge deletes');
END
"""
SQLITE_REFUSE_REPLACE = """
CREATE TRIGGER {table}_refuse_replace BEFORE INSERT ON {table}
WHEN EXISTS (SELECT 1 FROM {table} WHERE position = NEW.position)
BEGIN
    SELECT RAISE(ABORT, 'veritask append-only: INSERT over an existing row of {table} refused');
END
"""
# RAISE(IGNORE) drops only this row: what ON CONFLICT (event_id) DO NOTHING does already.
SQLITE_KEEP_FIRST_EVENT = """
CREATE TRIGGER events_keep_first BEFORE INSERT ON events
WHEN EXISTS (SELECT 1 FROM events WHERE event_id = NEW.event_id)
BEGIN
    SELECT RAISE(IGNORE);
END
"""


def _time(name: str, *, nullable: bool = True) -> sa.Column[object]:
    return sa.Column(name, sa.TIMESTAMP(timezone=True), nullable=nullable)


def _create_ui_sessions() -> None:
    op.create_table(
        "ui_sessions",
        sa.Column("id_hash", sa.String(length=128), nullable=False),
        sa.Column("token_id", sa.String(length=64), nullable=False),
        _time("created_at", nullable=False),
        _time("expires_at", nullable=False),
        _time("ended_at"),
        sa.ForeignKeyConstraint(
            ["token_id"], ["api_tokens.id"], name=op.f("fk_ui_sessions_token_id_api_tokens")
        ),
        sa.PrimaryKeyConstraint("id_hash", name=op.f("pk_ui_sessions")),
    )
    op.create_index("ix_ui_sessions_token_id", "ui_sessions", ["token_id"])
    op.create_index("ix_ui_sessions_expires_at", "ui_sessions", ["expires_at"])


def upgrade() -> None:
    _create_ui_sessions()
    if op.get_context().dialect.name == "postgresql":
        schema = op.get_bind().exec_driver_sql("SELECT quote_ident(current_schema())").scalar()
        op.execute(PG_NO_KEY)
        op.execute(PG_FUNCTION.format(schema=schema))
        return
    for table in APPEND_ONLY_TABLES:
        op.execute(f"DROP TRIGGER {table}_refuse_delete")
        op.execute(SQLITE_REFUSE_DELETE.format(table=table))
        op.execute(SQLITE_REFUSE_REPLACE.format(table=table))
    op.execute(SQLITE_KEEP_FIRST_EVENT)


def downgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        op.execute(PG_FUNCTION_0001)
        op.execute("DROP FUNCTION veritask_purge_key()")
    else:
        op.execute("DROP TRIGGER events_keep_first")
        for table in APPEND_ONLY_TABLES:
            op.execute(f"DROP TRIGGER {table}_refuse_replace")
            op.execute(f"DROP TRIGGER {table}_refuse_delete")
            op.execute(SQLITE_REFUSE_DELETE_0001.format(table=table))
    op.drop_table("ui_sessions")
