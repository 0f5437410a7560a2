"""Idempotent creation of runs, task instances and attempts (guarantee 6 of
docs/outcomes-and-fencing.md).

Each function takes an open connection inside the caller's transaction and returns whether it
created the row, so that the caller records the matching ``*_created`` event only once. The
rows are created; how their snapshots change afterwards is ``apply``'s business.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from veritask import ids
from veritask.core import states
from veritask.core.jsontypes import JSONValue
from veritask.ledger import dialects, errors, schema

#: The map index of a task that does not fan out.
UNMAPPED: int = -1


def new_id() -> str:
    """A fresh id for a row the ledger creates: a time-ordered UUID (see ``veritask.ids``)."""
    return ids.time_ordered_id()


def create_run(
    connection: Connection,
    *,
    idempotency_key: str,
    definition_id: str,
    definition_version: int,
    trigger_kind: states.TriggerKind,
    execution_state: states.RunExecutionState,
    publication_state: states.PublicationState,
    created_at: datetime,
    run_id: str | None = None,
    rerun_of: str | None = None,
    logical_time: datetime | None = None,
    data_interval_start: datetime | None = None,
    data_interval_end: datetime | None = None,
    parameters: Mapping[str, JSONValue] | None = None,
    execution_reason: str | None = None,
    publication_reason: str | None = None,
) -> tuple[str, bool]:
    """Create the run for ``idempotency_key`` unless it exists; return its id and whether it is new.

    Concurrent triggers with the same key create exactly one run; every caller gets its id.
    The key of a scheduled or backfilled run is ``definition + logical time`` (the caller
    builds it), so a backfill never duplicates a scheduled run.
    """
    candidate_id = run_id or new_id()
    created = dialects.insert_ignoring_conflict(
        connection,
        schema.runs,
        {
            "id": candidate_id,
            "definition_id": definition_id,
            "definition_version": definition_version,
            "idempotency_key": idempotency_key,
            "trigger_kind": trigger_kind.value,
            "rerun_of": rerun_of,
            "logical_time": logical_time,
            "data_interval_start": data_interval_start,
            "data_interval_end": data_interval_end,
            "parameters": dict(parameters or {}),
            "execution_state": execution_state.value,
            "execution_reason": execution_reason,
            "publication_state": publication_state.value,
            "publication_reason": publication_reason,
            "created_at": created_at,
        },
        conflict_columns=["idempotency_key"],
    )
    if created:
        return candidate_id, True
    existing = connection.execute(
        sa.select(schema.runs.c.id).where(schema.runs.c.idempotency_key == idempotency_key)
    ).scalar_one()
    return str(existing), False


def create_instance(
    connection: Connection,
    *,
    run_id: str,
    task_key: str,
    state: states.InstanceState,
    policy: Mapping[str, JSONValue],
    map_index: int = UNMAPPED,
    instance_id: str | None = None,
    observed_at: datetime | None = None,
) -> tuple[str, bool]:
    """Create the instance (run, task key, map index) unless it exists; return id, created."""
    candidate_id = instance_id or new_id()
    created = dialects.insert_ignoring_conflict(
        connection,
        schema.task_instances,
        instance_row(candidate_id, run_id, task_key, map_index, state, policy, observed_at),
        conflict_columns=["run_id", "task_key", "map_index"],
    )
    if created:
        return candidate_id, True
    instances = schema.task_instances.c
    existing = connection.execute(
        sa.select(instances.id).where(
            instances.run_id == run_id,
            instances.task_key == task_key,
            instances.map_index == map_index,
        )
    ).scalar_one()
    return str(existing), False


def instance_row(
    instance_id: str,
    run_id: str,
    task_key: str,
    map_index: int,
    state: states.InstanceState,
    policy: Mapping[str, JSONValue],
    observed_at: datetime | None,
) -> dict[str, object]:
    """The ``task_instances`` row of a new instance (its snapshot is written after)."""
    return {
        "id": instance_id,
        "run_id": run_id,
        "task_key": task_key,
        "map_index": map_index,
        "state": state.value,
        "policy": dict(policy),
        "updated_observed_at": observed_at,
    }


def insert_attempt(
    connection: Connection,
    *,
    instance_id: str,
    attempt_no: int,
    state: states.AttemptState,
    token_hash: str | None = None,
    executor: str | None = None,
) -> bool:
    """Record attempt N of the instance; False if attempt N exists (it is opened at most once)."""
    if attempt_no < 1:
        raise ValueError(f"attempt numbers start at 1, got {attempt_no}")
    return dialects.insert_ignoring_conflict(
        connection,
        schema.attempts,
        {
            "instance_id": instance_id,
            "attempt_no": attempt_no,
            "state": state.value,
            "token_hash": token_hash,
            "executor": executor,
        },
        conflict_columns=["instance_id", "attempt_no"],
    )


def compare_and_set(
    connection: Connection,
    table: sa.Table,
    *,
    row_id: str,
    expected_version: int,
    values: Mapping[str, object],
) -> int:
    """Write a snapshot only if nobody moved it since ``expected_version``; return the new one.

    ``UPDATE … SET …, version = version + 1 WHERE id = :id AND version = :expected``. Zero rows
    means another writer got there first: ``LedgerConflict`` (re-read, fold again, classify
    again; never overwrite).
    """
    if "version" in values:
        raise ValueError("the version is advanced by compare_and_set, not set by the caller")
    statement = (
        table.update()
        .where(table.c.id == row_id, table.c.version == expected_version)
        .values({**values, "version": table.c.version + 1})
    )
    if connection.execute(statement).rowcount != 1:
        raise errors.LedgerConflict(
            f"{table.name} {row_id} is no longer at version {expected_version}"
        )
    return expected_version + 1
