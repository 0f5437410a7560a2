"""Definitions and their immutable versions (docs/definitions.md).

Applying a definition saves a version identified by its content hash: applying the same
content again returns the version that holds it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Final

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from veritask.core import states
from veritask.core.jsontypes import JSONValue
from veritask.ledger import dialects, errors, runs, schema

#: Two applies of different content to one definition race for the next version number; the
#: loser re-reads and takes the one after. More rounds than this means something is wrong.
_VERSION_RACE_ROUNDS: Final = 8


def save_definition_version(
    connection: Connection,
    *,
    name: str,
    spec: Mapping[str, JSONValue],
    source: str,
    content_hash: str,
    owner: str | None = None,
    now: datetime | None = None,
) -> tuple[str, int, bool]:
    """Save ``spec`` as a version of definition ``name`` and make it the current version.

    Returns ``(definition_id, version, created)``: the definition is created on its first
    apply, and a content hash that a version already holds returns that version with
    ``created=False`` (it still becomes current: applying old content reverts to it). The
    lifecycle is left alone; refusing applies to a deleted definition is the caller's rule.
    """
    now = now or datetime.now(UTC)
    definition_id = _ensure_definition(connection, name=name, owner=owner, now=now)
    versions = schema.definition_versions.c
    for _ in range(_VERSION_RACE_ROUNDS):
        existing = connection.execute(
            sa.select(versions.version).where(
                versions.definition_id == definition_id, versions.content_hash == content_hash
            )
        ).scalar_one_or_none()
        if existing is not None:
            version, created = int(existing), False
            break
        latest = connection.execute(
            sa.select(sa.func.max(versions.version)).where(versions.definition_id == definition_id)
        ).scalar_one_or_none()
        version = int(latest or 0) + 1
        # No conflict target: losing on (id, version) or on (id, content_hash) both mean
        # "someone else saved first" and the next round re-reads.
        created = dialects.insert_ignoring_conflict(
            connection,
            schema.definition_versions,
            {
                "definition_id": definition_id,
                "version": version,
                "content_hash": content_hash,
                "spec": dict(spec),
                "source": source,
                "created_at": now,
            },
            conflict_columns=[],
        )
        if created:
            break
    else:
        raise errors.LedgerBusy(f"could not save a version of {name!r}: too many racing applies")
    definition_values: dict[str, object] = {"current_version": version, "updated_at": now}
    if owner is not None:
        definition_values["owner"] = owner
    connection.execute(
        schema.definitions.update()
        .where(schema.definitions.c.id == definition_id)
        .values(definition_values)
    )
    return definition_id, version, created


def _ensure_definition(
    connection: Connection, *, name: str, owner: str | None, now: datetime
) -> str:
    dialects.insert_ignoring_conflict(
        connection,
        schema.definitions,
        {
            "id": runs.new_id(),
            "name": name,
            "lifecycle": states.DefinitionLifecycle.ACTIVE.value,
            "owner": owner,
            "created_at": now,
            "updated_at": now,
        },
        conflict_columns=["name"],
    )
    definition_id = connection.execute(
        sa.select(schema.definitions.c.id).where(schema.definitions.c.name == name)
    ).scalar_one()
    return str(definition_id)
