"""The wire shapes of ``/api/v2``: pydantic models read from the services' views by attribute.

Field names are the views' names, those of docs/state-machine.md: a run has ``id``, ``definition``,
``execution_state``, ``publication_state`` and ``instances`` with ``task``, ``state`` and
``attempts``. Request models refuse unknown fields.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, JsonValue

from veritask.core.events import OverrideScope
from veritask.core.states import (
    AttemptState,
    DefinitionLifecycle,
    InstanceState,
    PublicationState,
    RunExecutionState,
    TriggerKind,
)
from veritask.services.tokens import TokenRole

MAX_REASON = 2000
MAX_KEY = 200
#: The database's integer columns: a larger number would be a 500 there, not a refusal.
MAX_INT32 = 2**31 - 1
MAX_INT64 = 2**63 - 1


class Out(BaseModel):
    """A response: read from a view's attributes."""

    model_config = ConfigDict(from_attributes=True)


class In(BaseModel):
    """A request body: unknown fields are refused."""

    model_config = ConfigDict(extra="forbid")


# -- problems ----------------------------------------------------------------------------------


class FieldError(Out):
    """One thing wrong with the input."""

    field: str = Field(description="Where: a dotted path such as `schedule.cron` or `body.reason`")
    line: int | None = Field(description="The line of the definition's source, when known")
    message: str


class Problem(Out):
    """An error, as RFC 9457 ``application/problem+json``."""

    type: str = Field(description="A URI reference naming the kind of problem")
    title: str
    status: int
    detail: str
    errors: list[FieldError] | None = Field(
        default=None, description="Every problem with the input (definitions: field and line)"
    )
    current_state: str | None = Field(
        default=None, description="For a 409: the state that makes the request illegal now"
    )


# -- definitions -------------------------------------------------------------------------------


class ApplyDefinition(In):
    source: str = Field(
        min_length=1, description="The definition, as YAML or JSON text (docs/definitions.md)"
    )


class ApplyWarning(Out):
    field: str
    message: str


class AppliedDefinition(Out):
    name: str
    version: int
    created: bool = Field(description="False when a version with the same content existed")
    lifecycle: DefinitionLifecycle
    warnings: list[ApplyWarning] = Field(
        default=[],
        description="Accepted, but likely to fail: e.g. a call's module the workers cannot find",
    )


class Definition(Out):
    name: str
    description: str
    owner: str | None
    lifecycle: DefinitionLifecycle
    current_version: int | None
    tasks: list[str]
    concurrency: str
    schedule: str | None = Field(description="The schedule in words, with its time zone")
    cron: str | None
    next_fire_time: datetime | None
    publication_required: bool
    parameters: dict[str, JsonValue]
    created_at: datetime
    updated_at: datetime


class DefinitionVersion(Out):
    version: int
    content_hash: str
    created_at: datetime


class DefinitionDetail(Definition):
    versions: list[DefinitionVersion]
    source: str | None = Field(description="The source text of the current version")
    started_by: list[str] = Field(
        default=[], description="The definitions whose publications start its runs"
    )
    started_when: Literal["all", "any"] | None = Field(
        default=None, description="A run once all of them published a logical time, or per any"
    )
    starts: list[str] = Field(
        default=[], description="The definitions whose runs its publications start"
    )


class DefinitionList(Out):
    items: list[Definition]


class Deletion(Out):
    name: str
    lifecycle: DefinitionLifecycle
    cancelling_runs: list[str]
    purge: bool


# -- runs --------------------------------------------------------------------------------------


class TriggerRun(In):
    parameters: dict[str, JsonValue] = Field(default_factory=dict)
    idempotency_key: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_KEY,
        description="A second trigger with the same key returns the same run",
    )
    trigger_kind: Literal["manual", "api"] = "api"
    logical_time: AwareDatetime | None = Field(
        default=None,
        description="The run's logical time, with its offset (default: the trigger's moment)",
    )


class Triggered(Out):
    run_id: str
    created: bool
    idempotency_key: str
    execution_state: RunExecutionState
    reason: str


class Progress(Out):
    phase: str
    done: int | None
    total: int | None
    message: str | None


class Attempt(Out):
    attempt_no: int
    state: AttemptState
    reason: str
    open_reason: str | None
    executor: str | None
    external_id: str | None
    worker: str | None
    scheduled_at: datetime | None
    queued_at: datetime | None
    started_at: datetime | None
    ended_at: datetime | None
    last_heartbeat_at: datetime | None
    lease_expires_at: datetime | None
    exit_code: int | None
    error_category: str | None
    log_location: str | None
    commit_marker: str | None
    progress: Progress | None
    conflict: bool
    late: list[str]
    error_message: str | None = None
    """The last error (a failed task's last output lines, the SQL server's message)."""
    cpu_user_seconds: float | None = None
    cpu_system_seconds: float | None = None
    peak_rss_bytes: int | None = None
    output: JsonValue = None
    """The JSON the attempt's task left, kept on its record (a fenced attempt's too)."""


class Instance(Out):
    id: str
    run_id: str
    task: str
    map_index: int
    state: InstanceState
    reason: str
    epoch: int
    retry_at: datetime | None
    overridden: bool
    attempts: list[Attempt]
    output: JsonValue = None
    """What flows downstream: the current attempt's output when it succeeded, else null."""


class Run(Out):
    id: str
    definition: str
    definition_version: int
    trigger_kind: TriggerKind
    idempotency_key: str
    rerun_of: str | None
    logical_time: datetime | None
    parameters: dict[str, JsonValue]
    execution_state: RunExecutionState
    execution_reason: str | None
    publication_state: PublicationState
    publication_reason: str | None
    created_at: datetime
    updated_observed_at: datetime | None


class UpstreamRun(Out):
    run_id: str
    definition: str | None = Field(description="null when its definition's history was purged")


class RunDetail(Run):
    instances: list[Instance] = Field(
        description="Its instances in pipeline order: all of them, or for a large run the "
        "first page (then `instances_next_cursor` continues)"
    )
    instances_next_cursor: str | None = Field(
        default=None,
        description="Null when `instances` is complete; else pass as `cursor` to "
        "GET /api/v2/runs/{id}/instances for the next page",
    )
    upstream_runs: list[UpstreamRun] = Field(
        default=[], description="The PUBLISHED runs that started it (trigger_kind published)"
    )


class InstancePage(Out):
    items: list[Instance]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; null: last")


class RunPage(Out):
    items: list[Run]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page")


class HistoryEvent(Out):
    position: int
    event_id: str
    subject_type: str
    subject_id: str
    run_id: str | None
    instance_id: str | None
    attempt_no: int | None
    kind: str
    actor: str
    event_time: datetime = Field(description="When it happened, by the actor's clock")
    observed_at: datetime = Field(description="When the platform recorded it")
    evidence: dict[str, JsonValue]
    outcome: str
    reason: str | None
    from_state: str | None
    to_state: str | None


class History(Out):
    subject_type: str
    subject_id: str
    events: list[HistoryEvent]
    next_after: int | None = Field(description="Pass as `after` for the next page")


class InstanceDetail(Instance):
    definition: str
    events: list[HistoryEvent]
    next_after: int | None


class CancelRequest(In):
    reason: str = Field(default="cancelled on request", min_length=1, max_length=MAX_REASON)


class CancelRequested(Out):
    subject_type: str
    subject_id: str
    state: str = Field(description="The state the request moved it to (CANCELLING, …)")
    reason: str


class OverrideRequest(In):
    state: Literal["SUCCESS", "FAILED"]
    reason: str = Field(min_length=1, max_length=MAX_REASON)
    scope: OverrideScope = OverrideScope.INSTANCE


class Overridden(Out):
    run_id: str
    to_state: InstanceState
    scope: str
    instances: list[str]
    execution_state: RunExecutionState


class LogChunk(Out):
    instance_id: str
    attempt_no: int
    log_location: str | None
    size: int
    offset: int
    next_offset: int
    text: str
    truncated: bool
    ended: bool


class LogMatch(Out):
    run_id: str
    instance_id: str
    task: str
    attempt_no: int
    line_no: int
    line: str


class LogSearch(Out):
    text: str
    matches: list[LogMatch]
    attempts_searched: int
    truncated: bool


# -- callbacks ---------------------------------------------------------------------------------


class WorkerEvent(BaseModel):
    """A worker's report (execution/wire.py). The token comes from the Authorization header."""

    model_config = ConfigDict(extra="allow")

    event_id: str = Field(min_length=1, max_length=128)
    instance_id: str = Field(min_length=1, max_length=200)
    attempt_no: int = Field(ge=1, le=MAX_INT32)
    kind: Literal["started", "heartbeat", "progress", "completed", "output_committed"]
    actor: Literal["worker"]
    event_time: str = Field(description="ISO-8601 with its offset, by the worker's clock")
    seq: int = Field(ge=1, le=MAX_INT64)
    evidence: dict[str, JsonValue]


class CallbackAnswer(Out):
    outcome: str = Field(description="applied, stale or conflict (a duplicate: the original)")
    reason: str
    stop: bool = Field(description="The platform no longer wants this attempt: stop the task")
    duplicate: bool


class CommitRequest(In):
    instance_id: str = Field(min_length=1, max_length=64)
    attempt_no: int = Field(ge=1, le=MAX_INT32)
    marker: str = Field(min_length=1, max_length=1000)


class CommitAccepted(Out):
    instance_id: str
    attempt_no: int
    marker: str
    outcome: str


# -- tokens and health -------------------------------------------------------------------------


class TokenRequest(In):
    role: TokenRole
    name: str = Field(default="token", min_length=1, max_length=64)


class NewToken(Out):
    id: str
    name: str
    role: TokenRole
    token: str = Field(description="Shown once; only its hash is stored")
    created_at: datetime


class TokenInfo(Out):
    id: str
    name: str
    role: TokenRole
    created_at: datetime
    revoked_at: datetime | None


class TokenList(Out):
    items: list[TokenInfo]


class Health(Out):
    status: Literal["ok"]


class Readiness(Out):
    ready: bool
    database: str
    revision: str | None
    expected_revision: str
    detail: str
