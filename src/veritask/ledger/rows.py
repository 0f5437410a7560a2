"""What the ledger's reads return: frozen, typed copies of rows, one class per table.

Field names are the column names, so a row maps onto its class by name. State columns come
back as plain strings (what the database holds); callers that need the enum convert with the
core's StrEnum (``states.InstanceState(row.state)``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Self

import sqlalchemy as sa

from veritask.core.jsontypes import JSONObject, JSONValue


class _FromRow:
    @classmethod
    def from_mapping(cls, mapping: sa.RowMapping | Mapping[str, object]) -> Self:
        """Build from a mapping that holds at least this class's columns (extra ones ignored).

        The values are trusted to have the fields' types: they come from this table's columns.
        """
        names: Mapping[str, object] = getattr(cls, "__dataclass_fields__")  # noqa: B009
        values: dict[str, Any] = {name: mapping[name] for name in names}
        return cls(**values)

    @classmethod
    def from_row(cls, row: sa.Row[*tuple[object, ...]]) -> Self:
        """Build from a result row that holds at least this class's columns."""
        return cls.from_mapping(row._mapping)


@dataclass(frozen=True)
class DefinitionRow(_FromRow):
    """A definition and the version it points at."""

    id: str
    name: str
    current_version: int | None
    lifecycle: str
    owner: str | None
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class DefinitionVersionRow(_FromRow):
    """One immutable version of a definition."""

    definition_id: str
    version: int
    content_hash: str
    spec: JSONObject
    source: str
    created_at: datetime


@dataclass(frozen=True)
class RunRow(_FromRow):
    """A run's snapshot."""

    id: str
    definition_id: str
    definition_version: int
    idempotency_key: str
    trigger_kind: str
    rerun_of: str | None
    logical_time: datetime | None
    data_interval_start: datetime | None
    data_interval_end: datetime | None
    parameters: JSONObject
    execution_state: str
    execution_reason: str | None
    publication_state: str
    publication_reason: str | None
    version: int
    created_at: datetime
    updated_observed_at: datetime | None
    fold: JSONValue


@dataclass(frozen=True)
class InstanceRow(_FromRow):
    """A task instance's snapshot."""

    id: str
    run_id: str
    task_key: str
    map_index: int
    state: str
    epoch: int
    retry_at: datetime | None
    policy: JSONObject
    version: int
    fold: JSONValue
    updated_observed_at: datetime | None


@dataclass(frozen=True)
class AttemptRow(_FromRow):
    """One attempt's record (never rewritten by a later attempt)."""

    instance_id: str
    attempt_no: int
    state: str
    executor: str | None
    external_id: str | None
    worker: str | None
    token_hash: str | None
    lease_expires_at: datetime | None
    monitor_due_at: datetime | None
    """When the monitor must look at the running attempt again (a cache, like the lease)."""
    last_heartbeat_at: datetime | None
    queued_at: datetime | None
    started_at: datetime | None
    ended_at: datetime | None
    exit_code: int | None
    error_category: str | None
    log_location: str | None
    progress_phase: str | None
    progress_done: int | None
    progress_total: int | None
    progress_message: str | None
    error_message: str | None
    cpu_user_seconds: float | None
    cpu_system_seconds: float | None
    peak_rss_bytes: int | None
    pool: str | None
    """The pool whose slots the attempt holds while it is active; None: taken from none."""
    pool_slots: int | None
    progress_bytes: int | None
    """The JSON bytes of the progress reports recorded for the attempt, against its total
    (``core/reports.py``); None before the first."""


@dataclass(frozen=True)
class EventRow(_FromRow):
    """One recorded event, as the ledger classified it."""

    position: int
    event_id: str
    subject_type: str
    subject_id: str
    run_id: str | None
    instance_id: str | None
    attempt_no: int | None
    kind: str
    actor: str
    seq: int | None
    from_state: str | None
    to_state: str | None
    event_time: datetime
    observed_at: datetime
    evidence: JSONObject
    outcome: str
    reason: str | None
    fingerprint: str


@dataclass(frozen=True)
class RejectedEventRow(_FromRow):
    """An event that failed validation, kept for audit with the reason."""

    position: int
    event_id: str | None
    subject_type: str | None
    subject_id: str | None
    run_id: str | None
    instance_id: str | None
    attempt_no: int | None
    kind: str | None
    actor: str | None
    event_time: datetime | None
    observed_at: datetime
    payload: JSONObject
    reason: str


@dataclass(frozen=True)
class InstanceProgress:
    """An instance with its run's definition and its current attempt: what a search shows."""

    instance: InstanceRow
    definition_id: str
    current_attempt: AttemptRow | None


@dataclass(frozen=True)
class AlertRow(_FromRow):
    """An alert with its owner category and the evidence that raised it."""

    id: int
    category: str
    definition_id: str | None
    run_id: str | None
    instance_id: str | None
    attempt_no: int | None
    owner: str | None
    dedup_key: str
    status: str
    message: str
    evidence: JSONObject
    opened_at: datetime
    acknowledged_at: datetime | None
    resolved_at: datetime | None
