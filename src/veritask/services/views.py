"""What the services return: frozen, typed values with the state names of docs/state-machine.md.

The API turns them into its response models field by field, so a name here is a name on the
wire. Times are timezone-aware UTC; ``event_time`` and ``observed_at`` are never merged.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from veritask.core.jsontypes import JSONObject, JSONValue
from veritask.core.states import (
    AttemptState,
    DefinitionLifecycle,
    InstanceState,
    PublicationState,
    RunExecutionState,
    TriggerKind,
)
from veritask.definitions import model as definition_model
from veritask.definitions.schedule import ScheduleWords
from veritask.ledger.vocabulary import TokenRole

# -- definitions ---------------------------------------------------------------------------


@dataclass(frozen=True)
class DefinitionVersion:
    """One immutable version of a definition."""

    version: int
    content_hash: str
    created_at: datetime


@dataclass(frozen=True)
class Definition:
    """A definition as a listing shows it, with its schedule in words."""

    name: str
    description: str
    owner: str | None
    lifecycle: DefinitionLifecycle
    current_version: int | None
    tasks: tuple[str, ...]
    concurrency: str
    schedule: str | None
    """The schedule in words, with its time zone; None when it runs only when triggered."""
    schedule_words: ScheduleWords | None
    """The same as data (pattern and values), for a reader to phrase in another language."""
    cron: str | None
    next_fire_time: datetime | None
    """None when there is no schedule or the definition is not active."""
    publication_required: bool
    parameters: JSONObject
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class PublicationLinks:
    """How a definition's runs and other definitions' publications start each other."""

    started_by: tuple[str, ...] = ()
    """The definitions whose publications start its runs (``trigger.on_published``)."""
    started_when: str | None = None
    """``all`` or ``any`` of them; None without a trigger."""
    starts: tuple[str, ...] = ()
    """The live definitions that its publications start, by name."""


@dataclass(frozen=True)
class DefinitionDetail:
    """A definition with its versions and the source of its current one."""

    definition: Definition
    versions: tuple[DefinitionVersion, ...]
    source: str | None
    graph: TaskGraph | None = None
    publications: PublicationLinks = PublicationLinks()
    """The current version's task graph; None before any version."""


@dataclass(frozen=True)
class ApplyWarning:
    """Something an applied definition will likely trip on, though it was accepted."""

    field: str
    message: str


@dataclass(frozen=True)
class AppliedDefinition:
    """The outcome of an apply: the version that holds the content, and whether it is new."""

    name: str
    version: int
    created: bool
    lifecycle: DefinitionLifecycle
    warnings: tuple[ApplyWarning, ...] = ()


@dataclass(frozen=True)
class Deletion:
    """Where a definition's delete lifecycle stands."""

    name: str
    lifecycle: DefinitionLifecycle
    cancelling_runs: tuple[str, ...]
    """Runs still being stopped; the definition becomes ``deleted`` once they are terminal."""
    purge: bool


@dataclass(frozen=True)
class DeletionPreview:
    """What a delete would do now, shown before anyone confirms it (docs/api.md)."""

    name: str
    lifecycle: DefinitionLifecycle
    stops_schedule: bool
    """The definition has a schedule that is firing now and will stop."""
    runs_to_cancel: tuple[str, ...]
    """Active runs that will be asked to stop; the definition is ``deleted`` once they have."""
    runs_kept: int
    """Runs whose history stays readable after the delete."""
    already_deleting: bool


# -- runs, instances, attempts --------------------------------------------------------------


@dataclass(frozen=True)
class Progress:
    """What the task last said about how far it got."""

    phase: str
    done: int | None
    total: int | None
    message: str | None


@dataclass(frozen=True)
class Attempt:
    """One process-level try of an instance, never rewritten by a later one."""

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
    late: tuple[str, ...]
    """Facts kept on this attempt's record after a decision closed it."""
    error_message: str | None = None
    """The last error: a failed task's last output lines (shell stderr, a callable's
    traceback) or the SQL server's message; secrets masked, at most 4 KiB."""
    cpu_user_seconds: float | None = None
    cpu_system_seconds: float | None = None
    peak_rss_bytes: int | None = None
    """Resource use of the task's process (shell and call tasks); None when not reported."""
    output: JSONValue = None
    """The JSON this attempt's task left (its deciding completion's), kept on its record
    whether or not it flowed downstream."""


@dataclass(frozen=True)
class Instance:
    """One task of one run: its state, why, and every attempt."""

    id: str
    run_id: str
    task: str
    map_index: int
    state: InstanceState
    reason: str
    epoch: int
    retry_at: datetime | None
    overridden: bool
    attempts: tuple[Attempt, ...]
    output: JSONValue = None
    """The output that flows downstream: the current attempt's when it succeeded, else null
    (docs/definitions.md, "Outputs")."""


@dataclass(frozen=True)
class Run:
    """A run with both of its states and their reasons."""

    id: str
    definition: str
    definition_version: int
    trigger_kind: TriggerKind
    idempotency_key: str
    rerun_of: str | None
    logical_time: datetime | None
    parameters: JSONObject
    execution_state: RunExecutionState
    execution_reason: str | None
    publication_state: PublicationState
    publication_reason: str | None
    created_at: datetime
    updated_observed_at: datetime | None


@dataclass(frozen=True)
class UpstreamRun:
    """A run whose publication started another; its definition, if it is still known."""

    run_id: str
    definition: str | None


@dataclass(frozen=True)
class RunDetail:
    """A run and its instances, each with its attempts."""

    run: Run
    instances: tuple[Instance, ...]
    upstream_runs: tuple[UpstreamRun, ...] = ()
    """The runs whose publication started it (trigger kind ``published``)."""


@dataclass(frozen=True)
class TaskEdge:
    """An edge of a run's task graph: ``downstream`` waits for ``upstream``."""

    upstream: str
    downstream: str


@dataclass(frozen=True)
class TaskGraph:
    """A definition version's tasks, their edges, and the publish steps that follow them."""

    tasks: tuple[str, ...]
    edges: tuple[TaskEdge, ...]
    checks: tuple[str, ...] = ()
    """The publish section's quality checks, by name; they follow every leaf task."""
    commit: bool = False
    """Whether a publish commit step follows the checks (or the leaves, with none)."""

    @staticmethod
    def of(spec: definition_model.Definition) -> TaskGraph:
        edges = tuple(
            TaskEdge(upstream, task.key) for task in spec.tasks.values() for upstream in task.after
        )
        publish = spec.publish
        return TaskGraph(
            tuple(spec.tasks),
            edges,
            tuple(check.name for check in publish.checks) if publish else (),
            publish is not None,
        )


@dataclass(frozen=True)
class RunPage:
    """One page of runs, newest first, and the cursor of the next page (None on the last)."""

    items: tuple[Run, ...]
    next_cursor: str | None


@dataclass(frozen=True)
class HistoryEvent:
    """One recorded event: who, when it happened, when we learned it, the proof, the outcome."""

    position: int
    event_id: str
    subject_type: str
    subject_id: str
    run_id: str | None
    instance_id: str | None
    attempt_no: int | None
    kind: str
    actor: str
    event_time: datetime
    observed_at: datetime
    evidence: JSONObject
    outcome: str
    reason: str | None
    from_state: str | None
    to_state: str | None


@dataclass(frozen=True)
class RejectedEvent:
    """An event the ledger refused (malformed, bad token, actor not allowed…), kept for audit.

    Never folded; it may reuse a known ``event_id`` (that can be why it was refused).
    """

    position: int
    event_id: str | None
    attempt_no: int | None
    kind: str | None
    actor: str | None
    event_time: datetime | None
    observed_at: datetime
    payload: JSONObject
    reason: str


@dataclass(frozen=True)
class History:
    """A page of an object's history in recorded order; ``next_after`` continues it."""

    subject_type: str
    subject_id: str
    events: tuple[HistoryEvent, ...]
    next_after: int | None


@dataclass(frozen=True)
class InstanceEvents:
    """An instance's events as a page asked for them (ordered, filtered), and those the
    ledger refused; ``truncated`` when either list held more than was returned."""

    events: tuple[HistoryEvent, ...]
    rejected: tuple[RejectedEvent, ...]
    truncated: bool


@dataclass(frozen=True)
class InstanceDetail:
    """An instance with its definition and its history."""

    instance: Instance
    definition: str
    history: History


@dataclass(frozen=True)
class Triggered:
    """A run a trigger created, or the existing one with the same idempotency key."""

    run_id: str
    created: bool
    idempotency_key: str
    execution_state: RunExecutionState
    reason: str


@dataclass(frozen=True)
class CancelRequested:
    """What a cancel recorded; the engine's confirmation comes later, in the background."""

    subject_type: str
    subject_id: str
    state: str
    reason: str


@dataclass(frozen=True)
class Overridden:
    """The instances an override set, and the run's execution state after it."""

    run_id: str
    to_state: InstanceState
    scope: str
    instances: tuple[str, ...]
    execution_state: RunExecutionState


# -- workers ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class AttemptSender:
    """The attempt a callback's token names: the one attempt it may report about."""

    instance_id: str
    attempt_no: int


@dataclass(frozen=True)
class CallbackAnswer:
    """What the platform tells a worker about one of its events (execution/transports.py)."""

    outcome: str
    """``applied``, ``stale`` or ``conflict``; for a duplicate, the original outcome."""
    reason: str
    stop: bool
    """The platform no longer wants this attempt: the worker stops the task."""
    duplicate: bool


@dataclass(frozen=True)
class CommitAccepted:
    """The attempt may publish its output: it is the current one, neither fenced nor stopped."""

    instance_id: str
    attempt_no: int
    marker: str
    outcome: str


@dataclass(frozen=True)
class LogChunk:
    """Part of an attempt's log (capped), and where to continue reading."""

    instance_id: str
    attempt_no: int
    log_location: str | None
    size: int
    offset: int
    next_offset: int
    text: str
    truncated: bool
    """Not all of the asked range or matches fit under the cap."""
    ended: bool
    """The attempt is over: the log will not grow."""


# -- tokens and health -------------------------------------------------------------------------


@dataclass(frozen=True)
class LogMatch:
    """One log line that matched a search, with the attempt it belongs to."""

    run_id: str
    instance_id: str
    task: str
    attempt_no: int
    line_no: int
    line: str


@dataclass(frozen=True)
class LogSearch:
    """The lines that matched across a definition's runs, a run, or an instance (capped)."""

    text: str
    matches: tuple[LogMatch, ...]
    attempts_searched: int
    truncated: bool
    """More lines matched, or more attempts were there, than one answer carries."""


@dataclass(frozen=True)
class Principal:
    """Who a bearer token names, and what it may do."""

    token_id: str
    name: str
    role: TokenRole

    @property
    def actor(self) -> str:
        """The actor recorded for this person's decisions: ``operator:<name>``."""
        return f"operator:{self.name}"


@dataclass(frozen=True)
class TokenInfo:
    """An API token as a listing shows it: never the token itself."""

    id: str
    name: str
    role: TokenRole
    created_at: datetime
    revoked_at: datetime | None


@dataclass(frozen=True)
class NewToken:
    """A token just created: ``token`` is shown once and stored only as a hash."""

    id: str
    name: str
    role: TokenRole
    token: str
    created_at: datetime


@dataclass(frozen=True)
class SchedulerProcess:
    """A scheduler that holds (or held) the lease, and whether its heartbeat is fresh."""

    id: str
    host: str
    pid: int
    started_at: datetime
    heartbeat_at: datetime
    alive: bool


@dataclass(frozen=True)
class ExecutorLoad:
    """How many attempts one executor holds now (open, queued, running or stopping)."""

    executor: str
    in_use: int


@dataclass(frozen=True)
class DecisionCount:
    """How many reconciler decisions of one kind were recorded in the window."""

    kind: str
    count: int


@dataclass(frozen=True)
class Activity:
    """What the platform is doing now: the health panel of the web UI."""

    schedulers: tuple[SchedulerProcess, ...]
    executors: tuple[ExecutorLoad, ...]
    instances_waiting_to_start: int
    """Instances with an open attempt the engine has not started: SCHEDULED or QUEUED."""
    runs_queued: int
    """Runs waiting for a concurrency slot."""
    reconciler_decisions: tuple[DecisionCount, ...]
    decisions_since: datetime
    observed_at: datetime


@dataclass(frozen=True)
class Readiness:
    """Whether this process can serve: the database answers and its schema is current."""

    ready: bool
    database: str
    revision: str | None
    expected_revision: str
    detail: str
