"""The states of instances, attempts, runs and definitions (docs/state-machine.md).

Each member's docstring is the meaning a person sees; the names are the contract that the
API, the CLI and the database store.
"""

from __future__ import annotations

from enum import StrEnum


class InstanceState(StrEnum):
    """The state of one task instance: the fold of its attempts and the retry policy."""

    CREATED = "CREATED"
    """Exists; waiting for dependencies, concurrency or time."""
    SCHEDULED = "SCHEDULED"
    """Dependencies, retry_at and concurrency allow it; attempt N is open, not yet handed over."""
    QUEUED = "QUEUED"
    """The executor acknowledged the submission."""
    RUNNING = "RUNNING"
    """The worker reported that the process started, or a report shows it alive."""
    LOST = "LOST"
    """Its lease expired: we cannot reach it. Unknown, not failed."""
    CANCELLING = "CANCELLING"
    """A stop was requested; waiting for the engine to confirm it."""
    CANCEL_FAILED = "CANCEL_FAILED"
    """The engine did not confirm the stop within the window; still reconciled, alerted."""
    UP_FOR_RETRY = "UP_FOR_RETRY"
    """The attempt ended without success and the policy allows another at retry_at."""
    SUCCESS = "SUCCESS"
    """Decisive evidence of success."""
    FAILED = "FAILED"
    """Decisive evidence of failure and no retry left."""
    START_FAILED = "START_FAILED"
    """The engine refused or could not start it, and no retry left."""
    TIMEOUT = "TIMEOUT"
    """Stopped for running past its timeout, confirmed by the engine, no retry left."""
    CANCELLED = "CANCELLED"
    """Stopped on request, confirmed by the engine (or nothing was running)."""
    SKIPPED = "SKIPPED"
    """Skipped by a trigger rule, a branch, or by the task itself."""
    UPSTREAM_FAILED = "UPSTREAM_FAILED"
    """Its trigger rule can no longer be met because upstream tasks failed."""
    REMOVED = "REMOVED"
    """Its task no longer exists in the definition version of a rerun."""

    @property
    def is_terminal(self) -> bool:
        """Nothing moves it on without a new attempt or an operator."""
        return self in TERMINAL_INSTANCE_STATES


TERMINAL_INSTANCE_STATES = frozenset(
    {
        InstanceState.SUCCESS,
        InstanceState.FAILED,
        InstanceState.START_FAILED,
        InstanceState.TIMEOUT,
        InstanceState.CANCELLED,
        InstanceState.SKIPPED,
        InstanceState.UPSTREAM_FAILED,
        InstanceState.REMOVED,
    }
)


class AttemptState(StrEnum):
    """The state of one process-level try of an instance."""

    SCHEDULED = "SCHEDULED"
    """Opened by the scheduler, not yet acknowledged by the executor."""
    QUEUED = "QUEUED"
    """The executor acknowledged it and named its external id."""
    RUNNING = "RUNNING"
    """The worker reported a start, a heartbeat or progress."""
    LOST = "LOST"
    """Its lease expired with no report since: unknown, not failed."""
    CANCELLING = "CANCELLING"
    """A stop (cancel or timeout) was requested; waiting for the engine."""
    CANCEL_FAILED = "CANCEL_FAILED"
    """The engine did not confirm the stop within the window."""
    SUCCESS = "SUCCESS"
    """Decisive evidence of success."""
    FAILED = "FAILED"
    """Decisive evidence of failure."""
    START_FAILED = "START_FAILED"
    """The engine refused or could not start it."""
    TIMEOUT = "TIMEOUT"
    """Stopped for running past its timeout, confirmed."""
    CANCELLED = "CANCELLED"
    """Stopped on request, confirmed."""
    SKIPPED = "SKIPPED"
    """The task ended by asking to be skipped (exit code 99 by default)."""
    NOT_RECEIVED = "NOT_RECEIVED"
    """The engine never had it; it is resubmitted as a new attempt."""
    ABANDONED = "ABANDONED"
    """Fenced off after the evidence stayed inconclusive; later news is kept, not obeyed."""

    @property
    def is_terminal(self) -> bool:
        """The attempt will not change again except through late facts kept on its record."""
        return self in TERMINAL_ATTEMPT_STATES


TERMINAL_ATTEMPT_STATES = frozenset(
    {
        AttemptState.SUCCESS,
        AttemptState.FAILED,
        AttemptState.START_FAILED,
        AttemptState.TIMEOUT,
        AttemptState.CANCELLED,
        AttemptState.SKIPPED,
        AttemptState.NOT_RECEIVED,
        AttemptState.ABANDONED,
    }
)

ACTIVE_ATTEMPT_STATES = frozenset(set(AttemptState) - TERMINAL_ATTEMPT_STATES)


class RunExecutionState(StrEnum):
    """Whether the computation of a run ended, and how (decided from its leaves)."""

    QUEUED = "QUEUED"
    """Waiting for a concurrency slot of its definition."""
    RUNNING = "RUNNING"
    """At least one instance is not finished."""
    SUCCESS = "SUCCESS"
    """Every leaf succeeded or was skipped."""
    FAILED = "FAILED"
    """A leaf failed, or the run deadlocked (the reason says which)."""
    CANCELLING = "CANCELLING"
    """A cancel of the run is waiting for its instances to stop."""
    CANCELLED = "CANCELLED"
    """The run was cancelled and every instance stopped."""


class PublicationState(StrEnum):
    """Whether a run's output may be used (docs/definitions.md, 'Publish')."""

    NOT_REQUIRED = "NOT_REQUIRED"
    """The definition has no publish section."""
    PENDING = "PENDING"
    """Waiting for execution to succeed."""
    CHECKING = "CHECKING"
    """Quality checks are running."""
    PUBLISHING = "PUBLISHING"
    """The commit step is running."""
    PUBLISHED = "PUBLISHED"
    """The output was committed and may be used."""
    CHECK_FAILED = "CHECK_FAILED"
    """A quality check failed; nothing was published."""
    PUBLISH_FAILED = "PUBLISH_FAILED"
    """The commit step failed."""


class DefinitionLifecycle(StrEnum):
    """Where a definition is on its way from creation to purge (docs/api.md, delete lifecycle)."""

    ACTIVE = "active"
    """Its schedule fires and it may be triggered."""
    DISABLED = "disabled"
    """It starts no new run (schedule, trigger, backfill); its active runs go on."""
    DELETING = "deleting"
    """Disabled, and its active runs are being cancelled before the soft delete."""
    DELETED = "deleted"
    """Soft-deleted: history stays readable; its name may be applied again as a new one."""
    PURGING = "purging"
    """Each executor is removing its attempts' folders, logs and results."""
    PURGED = "purged"
    """Every executor's resources and logs are gone; the event history is kept."""


class TriggerKind(StrEnum):
    """Why a run exists."""

    SCHEDULE = "schedule"
    """Its schedule fired for a logical time."""
    MANUAL = "manual"
    """A person triggered it."""
    BACKFILL = "backfill"
    """A backfill of a range asked for this logical time."""
    API = "api"
    """A program triggered it through the API."""
    RERUN = "rerun"
    """A rerun with new parameters or a new version, linked to the original run."""
    PUBLISHED = "published"
    """Runs of the definitions its ``trigger: {on_published: …}`` names were PUBLISHED for
    its logical time; the run names them."""


class EngineState(StrEnum):
    """What an execution engine says about an attempt, as an executor's observation."""

    PENDING = "pending"
    """The engine holds it but has not started it."""
    RUNNING = "running"
    """The engine says its process is running."""
    SUCCEEDED = "succeeded"
    """The engine says it ended successfully."""
    FAILED = "failed"
    """The engine says it ended without success."""
    NOT_FOUND = "not_found"
    """The engine has no trace of it."""
    UNKNOWN = "unknown"
    """The engine holds a trace but cannot say what became of it."""


#: The key of an observation's detail that is True when the engine checked that no process of
#: the attempt's task runs any more: its leader and every process of its group ended, whatever
#: its worker is doing (gone, frozen, not yet writing its exit record). ``unknown`` says what
#: the engine cannot tell (how the task ended); this says what it can. A stop is confirmed on
#: it, never on ``unknown`` alone: an engine says ``unknown`` of a host it cannot reach too.
PROCESSES_ENDED = "processes_ended"
