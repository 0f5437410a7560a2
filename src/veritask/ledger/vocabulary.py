"""The closed vocabularies that only the ledger owns.

The state names (instance, attempt, run, publication), trigger kinds and definition lifecycle
come from ``veritask.core.states``; the values below exist only because of how events, alerts
and tokens are recorded.
"""

from __future__ import annotations

from enum import StrEnum


class EventOutcome(StrEnum):
    """How the ledger classified an event when it arrived (docs/outcomes-and-fencing.md).

    ``rejected`` is not here: rejected events live in their own table.
    """

    APPLIED = "applied"
    """It changed the snapshot or added a fact to it."""
    DUPLICATE = "duplicate"
    """Its event id was known with the same content; nothing changed."""
    STALE = "stale"
    """It belongs to a fenced attempt: kept on that attempt's record, changes nothing else."""
    CONFLICT = "conflict"
    """It contradicts decisive evidence already held; precedence decided, an alert was raised."""


class SubjectType(StrEnum):
    """What an event is about."""

    RUN = "run"
    """A run: its creation, its execution and publication states."""
    INSTANCE = "instance"
    """A task instance or one of its attempts (``attempt_no`` says which)."""
    DEFINITION = "definition"
    """A definition: new versions and lifecycle steps."""


class AlertCategory(StrEnum):
    """Who owns the problem an alert describes (docs/scheduling.md, section 7)."""

    QUEUE_QUOTA = "queue_quota"
    """QUEUED too long: the engine's queue or quota."""
    SCHEDULER_EXECUTOR = "scheduler_executor"
    """SCHEDULED but not submitted: the scheduler/executor interface."""
    RETRY_TIMING = "retry_timing"
    """UP_FOR_RETRY past its retry_at."""
    RECONCILIATION = "reconciliation"
    """LOST, evidence that stayed inconclusive, or late evidence that changed a finished
    instance after decisions were taken on its old state."""
    ENGINE = "engine"
    """CANCEL_FAILED: the engine did not confirm a stop."""
    PLATFORM = "platform"
    """Conflicting evidence and other faults of the platform itself."""
    DEPENDENCY = "dependency"
    """A cross-pipeline dependency was not published in time."""
    DEADLINE = "deadline"
    """A run missed its deadline."""
    RUN_FAILED = "run_failed"
    """A run failed (its tasks out of retries): the definition's owner, unless the definition
    turns it off (``alert_on_failure: false``)."""


class AlertStatus(StrEnum):
    """Where an alert is in its life. Open and acknowledged alerts block a duplicate."""

    OPEN = "open"
    """Raised, nobody has taken it yet."""
    ACKNOWLEDGED = "acknowledged"
    """Someone took it; still unresolved."""
    RESOLVED = "resolved"
    """The condition ended or someone closed it."""


class DeliveryState(StrEnum):
    """Where an alert's webhook delivery is (NULL in the table: nothing to deliver)."""

    PENDING = "pending"
    """Waiting for its first or next attempt (``next_delivery_at``)."""
    DELIVERED = "delivered"
    """A target answered 2xx."""
    FAILED = "failed"
    """Every attempt failed; the attempts are in ``alert_deliveries``."""
    UNROUTED = "unrouted"
    """No webhook was configured for its owner when it came due."""


class OperationKind(StrEnum):
    """What an operation in the ``operations`` table did."""

    PURGE_EVENTS = "purge_events"
    """Deleted the history of deleted definitions' runs past the retention period."""
    REMOVE_LOGS = "remove_logs"
    """Removed attempt logs of attempts that ended before the retention period."""
    REPAIR = "repair"
    """Rebuilt snapshots that differed from the fold of their events (``verify --repair``)."""
    REPLAY = "replay"
    """Loaded an export into this database and rebuilt its snapshots."""


class TokenRole(StrEnum):
    """What an API token may do."""

    VIEWER = "viewer"
    """Read everything."""
    OPERATOR = "operator"
    """Read, trigger, cancel and override."""
    ADMIN = "admin"
    """Everything, including tokens and definitions' lifecycle."""
