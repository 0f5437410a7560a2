"""Rows for the ledger's contract tests, built through the ledger's own functions."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Final

from sqlalchemy.engine import Connection

from veritask.core import states
from veritask.core.jsontypes import JSONObject
from veritask.ledger import definitions, runs, schema, vocabulary

T0: Final = datetime(2024, 5, 1, 2, 0, tzinfo=UTC)
POLICY: Final[JSONObject] = {"max_retries": 3, "timeout_seconds": 7200, "lease_seconds": 60}


def a_definition(connection: Connection, name: str = "daily_user_sync") -> tuple[str, int]:
    """A definition with one version; returns (definition id, version)."""
    spec: JSONObject = {"name": name, "tasks": {"extract": {"run": "true"}}}
    definition_id, version, _ = definitions.save_definition_version(
        connection,
        name=name,
        spec=spec,
        source=f"name: {name}\n",
        content_hash=hashlib.sha256(name.encode()).hexdigest(),
        owner="data-platform",
        now=T0,
    )
    return definition_id, version


def a_run(
    connection: Connection,
    definition: tuple[str, int],
    *,
    key: str,
    logical_time: datetime | None = None,
    created_at: datetime = T0,
    execution_state: states.RunExecutionState = states.RunExecutionState.RUNNING,
) -> str:
    """A scheduled run of the definition; returns its id."""
    run_id, _ = runs.create_run(
        connection,
        idempotency_key=key,
        definition_id=definition[0],
        definition_version=definition[1],
        trigger_kind=states.TriggerKind.SCHEDULE,
        execution_state=execution_state,
        publication_state=states.PublicationState.NOT_REQUIRED,
        created_at=created_at,
        logical_time=logical_time,
    )
    return run_id


def an_instance(
    connection: Connection,
    run_id: str,
    task_key: str,
    *,
    state: states.InstanceState = states.InstanceState.CREATED,
    map_index: int = runs.UNMAPPED,
) -> str:
    """An instance of the run; returns its id."""
    instance_id, _ = runs.create_instance(
        connection,
        run_id=run_id,
        task_key=task_key,
        state=state,
        policy=POLICY,
        map_index=map_index,
        observed_at=T0,
    )
    return instance_id


def an_event(
    connection: Connection,
    *,
    event_id: str,
    run_id: str,
    instance_id: str | None = None,
    kind: str = "heartbeat",
    observed_at: datetime = T0,
) -> None:
    """Append one event row directly (``apply`` is not under test here)."""
    subject_type = vocabulary.SubjectType.INSTANCE if instance_id else vocabulary.SubjectType.RUN
    connection.execute(
        schema.events.insert().values(
            event_id=event_id,
            subject_type=subject_type.value,
            subject_id=instance_id or run_id,
            run_id=run_id,
            instance_id=instance_id,
            attempt_no=1 if instance_id else None,
            kind=kind,
            actor="worker",
            event_time=observed_at,
            observed_at=observed_at,
            evidence={"pid": 42},
            outcome=vocabulary.EventOutcome.APPLIED.value,
            fingerprint=hashlib.sha256(event_id.encode()).hexdigest(),
        )
    )
