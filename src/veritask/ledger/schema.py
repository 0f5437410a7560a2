"""The ledger's tables: SQLAlchemy Core metadata, the same on SQLite and PostgreSQL.

The ``events`` table is the truth; ``runs``, ``task_instances`` and ``attempts`` are snapshots
(caches of the fold) that can be rebuilt from it. That is why nothing in ``events`` has a
foreign key to a snapshot: rebuilding a snapshot must not touch the log, and a purge of the
log must not wait for the snapshots.

The schema is created only by the migrations in ``ledger/migrations`` (they also install the
append-only triggers); ``tests/migration`` proves that the migrated schema equals this
metadata. Column and index names here are a contract with those migrations.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

import sqlalchemy as sa

from veritask.core import states
from veritask.ledger import columns, vocabulary

NAMING_CONVENTION: Final = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_N_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)

#: State names are the core's StrEnum values; they are stored as plain strings.
STATE_LENGTH: Final = 32
#: Ids are chosen by callers (UUIDs, ``run_…`` strings); generous but bounded.
ID_LENGTH: Final = 64

#: The transaction-local PostgreSQL setting in which the retention purge shows its permit; the
#: append-only trigger lets a delete pass only if the permit's SHA-256 is the enrolled one
#: (0003, ledger/permits.py).
PURGE_SETTING: Final = "veritask.retention_purge"

#: Attempt states in which a worker holds a lease that the monitor watches: a lost
#: heartbeat moves RUNNING, or QUEUED with a started worker, to LOST (docs/state-machine.md).
LEASED_ATTEMPT_STATES: Final = (states.AttemptState.QUEUED, states.AttemptState.RUNNING)


def sql_string_list(values: Iterable[str]) -> str:
    """``'A', 'B'`` in sorted order, for index predicates that queries must repeat verbatim."""
    return ", ".join(f"'{value}'" for value in sorted(values))


def _one_of(column: str, values: Iterable[str]) -> str:
    return f"{column} IN ({sql_string_list(values)})"


def _id(name: str, *, primary_key: bool = False, nullable: bool = False) -> sa.Column[str]:
    return sa.Column(name, sa.String(ID_LENGTH), primary_key=primary_key, nullable=nullable)


def _state(name: str, *, nullable: bool = False) -> sa.Column[str]:
    return sa.Column(name, sa.String(STATE_LENGTH), nullable=nullable)


def _time(name: str, *, nullable: bool = True) -> sa.Column[object]:
    return sa.Column(name, columns.UTCDateTime(), nullable=nullable)


#: A SHA-256 as hex.
HASH_LENGTH: Final = 64


def _hash(name: str) -> sa.Column[str]:
    return sa.Column(name, sa.String(HASH_LENGTH), nullable=True)


_UNSETTLED_EXECUTION: Final = (
    states.RunExecutionState.QUEUED,
    states.RunExecutionState.RUNNING,
    states.RunExecutionState.CANCELLING,
)
_UNSETTLED_PUBLICATION: Final = (
    states.PublicationState.PENDING,
    states.PublicationState.CHECKING,
    states.PublicationState.PUBLISHING,
)

#: Instance states from which nothing moves without a new attempt or an operator.
TERMINAL_INSTANCE_PREDICATE: Final = (
    f"state NOT IN ({sql_string_list(states.TERMINAL_INSTANCE_STATES)})"
)
DUE_RETRY_PREDICATE: Final = f"state = '{states.InstanceState.UP_FOR_RETRY}'"
LEASED_ATTEMPT_PREDICATE: Final = _one_of("state", LEASED_ATTEMPT_STATES)
RUNNING_ATTEMPT_PREDICATE: Final = f"state = '{states.AttemptState.RUNNING}'"
UNRESOLVED_ALERT_PREDICATE: Final = f"status <> '{vocabulary.AlertStatus.RESOLVED}'"
PENDING_DELIVERY_PREDICATE: Final = f"delivery_state = '{vocabulary.DeliveryState.PENDING}'"
DEFINITION_EVENT_PREDICATE: Final = f"subject_type = '{vocabulary.SubjectType.DEFINITION}'"

#: Runs queued, executing, being cancelled or publishing: what the scheduler still moves.
UNSETTLED_RUN_PREDICATE: Final = (
    f"{_one_of('execution_state', _UNSETTLED_EXECUTION)}"
    f" OR {_one_of('publication_state', _UNSETTLED_PUBLICATION)}"
)

#: The lifecycles in which a definition holds its name: a deleted one's name may be applied
#: again, as a new definition with a new id.
NAME_HOLDING_LIFECYCLES: Final = (
    states.DefinitionLifecycle.ACTIVE,
    states.DefinitionLifecycle.DISABLED,
    states.DefinitionLifecycle.DELETING,
)
HOLDS_ITS_NAME_PREDICATE: Final = _one_of("lifecycle", NAME_HOLDING_LIFECYCLES)

definitions = sa.Table(
    "definitions",
    metadata,
    _id("id", primary_key=True),
    sa.Column("name", sa.String(128), nullable=False, index=True),
    sa.Column("current_version", sa.Integer, nullable=True),
    sa.Column("lifecycle", sa.String(16), nullable=False),
    sa.Column("owner", sa.String(128), nullable=True),
    _time("created_at", nullable=False),
    _time("updated_at", nullable=False),
    # The hash of the definition's last event: the head of its chain (0016).
    _hash("chain_head"),
    sa.CheckConstraint(_one_of("lifecycle", states.DefinitionLifecycle), name="lifecycle"),
    sa.Index(
        "uq_definitions_live_name",
        "name",
        unique=True,
        postgresql_where=sa.text(HOLDS_ITS_NAME_PREDICATE),
        sqlite_where=sa.text(HOLDS_ITS_NAME_PREDICATE),
    ),
)

definition_versions = sa.Table(
    "definition_versions",
    metadata,
    _id("definition_id", primary_key=True),
    sa.Column("version", sa.Integer, primary_key=True),
    sa.Column("content_hash", sa.String(128), nullable=False),
    sa.Column("spec", columns.json_column_type(), nullable=False),
    sa.Column("source", sa.Text, nullable=False),
    _time("created_at", nullable=False),
    sa.ForeignKeyConstraint(["definition_id"], ["definitions.id"]),
    sa.UniqueConstraint("definition_id", "content_hash"),
    sa.CheckConstraint("version >= 1", name="version_positive"),
)

runs = sa.Table(
    "runs",
    metadata,
    _id("id", primary_key=True),
    _id("definition_id", nullable=False),
    sa.Column("definition_version", sa.Integer, nullable=False),
    sa.Column("idempotency_key", sa.String(256), nullable=False, unique=True),
    sa.Column("trigger_kind", sa.String(16), nullable=False),
    _id("rerun_of", nullable=True),
    _time("logical_time"),
    _time("data_interval_start"),
    _time("data_interval_end"),
    sa.Column("parameters", columns.json_column_type(), nullable=False),
    _state("execution_state"),
    sa.Column("execution_reason", sa.Text, nullable=True),
    _state("publication_state"),
    sa.Column("publication_reason", sa.Text, nullable=True),
    sa.Column("version", sa.Integer, nullable=False, server_default="0"),
    _time("created_at", nullable=False),
    _time("updated_observed_at"),
    sa.Column("fold", columns.json_column_type(none_as_null=True), nullable=True),
    # The hash of the run's own last event: the head of its chain (0016).
    _hash("chain_head"),
    sa.ForeignKeyConstraint(
        ["definition_id", "definition_version"],
        ["definition_versions.definition_id", "definition_versions.version"],
    ),
    sa.ForeignKeyConstraint(["rerun_of"], ["runs.id"]),
    sa.CheckConstraint(_one_of("trigger_kind", states.TriggerKind), name="trigger_kind"),
    # Runs of a definition by logical time: the schedule's catch-up and cross-pipeline waits.
    sa.Index("ix_runs_definition_id_logical_time", "definition_id", "logical_time"),
    # Keyset pagination of listings, newest first, globally and per definition.
    sa.Index("ix_runs_created_at_id", "created_at", "id"),
    # The few runs the scheduler moves, read every second among every finished one (0012).
    # Partial on both databases, so that listings filtered by a state keep their keyset walk;
    # the scheduler's queries repeat the predicate verbatim for SQLite's planner.
    sa.Index(
        "ix_runs_unsettled_state",
        "execution_state",
        "publication_state",
        postgresql_where=sa.text(UNSETTLED_RUN_PREDICATE),
        sqlite_where=sa.text(UNSETTLED_RUN_PREDICATE),
    ),
    sa.Index("ix_runs_definition_id_created_at_id", "definition_id", "created_at", "id"),
)

#: The upstream runs whose publication started a run (``trigger: {on_published: …}``): the
#: run's evidence, and what tells a scheduler that a publication was answered already. No
#: foreign key to the upstream run: the purge of a deleted upstream's history keeps the
#: evidence of the runs it started.
run_upstreams = sa.Table(
    "run_upstreams",
    metadata,
    _id("run_id", primary_key=True),
    _id("upstream_run_id", primary_key=True),
    sa.ForeignKeyConstraint(["run_id"], ["runs.id"]),
    sa.Index("ix_run_upstreams_upstream_run_id", "upstream_run_id"),
)

task_instances = sa.Table(
    "task_instances",
    metadata,
    _id("id", primary_key=True),
    _id("run_id", nullable=False),
    sa.Column("task_key", sa.String(128), nullable=False),
    sa.Column("map_index", sa.Integer, nullable=False, server_default="-1"),
    _state("state"),
    sa.Column("epoch", sa.Integer, nullable=False, server_default="0"),
    _time("retry_at"),
    sa.Column("policy", columns.json_column_type(), nullable=False),
    sa.Column("version", sa.Integer, nullable=False, server_default="0"),
    sa.Column("fold", columns.json_column_type(none_as_null=True), nullable=True),
    _time("updated_observed_at"),
    # The snapshot's reason, written with its state (0005): lists of many instances show it
    # without decoding and folding each one's facts. NULL on rows written before 0005.
    sa.Column("reason", sa.Text, nullable=True),
    # The hash of the instance's last event, written with the snapshot by the same
    # compare-and-set: the head of its chain (0016).
    _hash("chain_head"),
    sa.ForeignKeyConstraint(["run_id"], ["runs.id"]),
    sa.UniqueConstraint("run_id", "task_key", "map_index"),
    # The scheduler and monitor scan the few unfinished instances among millions of finished
    # ones; PostgreSQL can keep only those in the index. SQLite's planner uses a partial index
    # only when the query repeats its predicate verbatim, so there it is a plain index.
    sa.Index(
        "ix_task_instances_active_state",
        "state",
        "id",
        postgresql_where=sa.text(TERMINAL_INSTANCE_PREDICATE),
    ),
    # Due retries: ``retry_at <= now`` among UP_FOR_RETRY instances. ``state`` leads so that
    # SQLite's planner, which has no statistics, prefers it to the index above.
    sa.Index(
        "ix_task_instances_due_retry",
        "state",
        "retry_at",
        postgresql_where=sa.text(DUE_RETRY_PREDICATE),
        sqlite_where=sa.text(DUE_RETRY_PREDICATE),
    ),
)

attempts = sa.Table(
    "attempts",
    metadata,
    _id("instance_id", primary_key=True),
    sa.Column("attempt_no", sa.Integer, primary_key=True),
    _state("state"),
    sa.Column("executor", sa.String(64), nullable=True),
    sa.Column("external_id", sa.String(256), nullable=True),
    sa.Column("worker", sa.String(256), nullable=True),
    # Only the hash: the token itself is given to the worker and never stored.
    sa.Column("token_hash", sa.String(128), nullable=True),
    _time("lease_expires_at"),
    # When the monitor must next look at a running attempt: the first of its lease's end and
    # its timeout, cached like the lease (never later than the truth; 0013).
    _time("monitor_due_at"),
    _time("last_heartbeat_at"),
    _time("queued_at"),
    _time("started_at"),
    _time("ended_at"),
    sa.Column("exit_code", sa.Integer, nullable=True),
    sa.Column("error_category", sa.String(32), nullable=True),
    sa.Column("log_location", sa.Text, nullable=True),
    sa.Column("progress_phase", sa.String(128), nullable=True),
    sa.Column("progress_done", sa.BigInteger, nullable=True),
    sa.Column("progress_total", sa.BigInteger, nullable=True),
    sa.Column("progress_message", sa.Text, nullable=True),
    # Written once by the first completion report that carries them (ledger/attempt_reports.py).
    sa.Column("error_message", sa.Text, nullable=True),
    sa.Column("cpu_user_seconds", sa.Float, nullable=True),
    sa.Column("cpu_system_seconds", sa.Float, nullable=True),
    sa.Column("peak_rss_bytes", sa.BigInteger, nullable=True),
    # The progress the attempt's reports recorded, in bytes of JSON, counted by the ledger as
    # it records them (ledger/attempt_reports.py) and bounded (core/reports.py; 0014).
    sa.Column("progress_bytes", sa.BigInteger, nullable=True),
    # The pool whose slots the attempt holds while it is active, written by the transaction
    # that opens it (ledger/pools.py, 0009); NULL for attempts opened before pools existed.
    sa.Column("pool", sa.String(64), nullable=True),
    sa.Column("pool_slots", sa.Integer, nullable=True),
    sa.ForeignKeyConstraint(["instance_id"], ["task_instances.id"]),
    sa.CheckConstraint("attempt_no >= 1", name="attempt_no_positive"),
    # Expired leases: ``lease_expires_at < now`` among attempts a worker holds.
    sa.Index(
        "ix_attempts_leased_expiry",
        "lease_expires_at",
        postgresql_where=sa.text(LEASED_ATTEMPT_PREDICATE),
        sqlite_where=sa.text(LEASED_ATTEMPT_PREDICATE),
    ),
    # The monitor reads only the running attempts that may be due (scheduling/sweeps.py).
    sa.Index(
        "ix_attempts_monitor_due",
        "monitor_due_at",
        "instance_id",
        postgresql_where=sa.text(RUNNING_ATTEMPT_PREDICATE),
        sqlite_where=sa.text(RUNNING_ATTEMPT_PREDICATE),
    ),
    # The reconciler maps an engine's answer back to its attempt.
    sa.Index("ix_attempts_executor_external_id", "executor", "external_id"),
    # A worker's report is authenticated by the attempt its token names, before its body.
    sa.Index("ix_attempts_token_hash", "token_hash"),
    # A pool's slots in use: its attempts in an active state.
    sa.Index("ix_attempts_pool_state", "pool", "state"),
)

events = sa.Table(
    "events",
    metadata,
    sa.Column("position", columns.PositionType, primary_key=True, autoincrement=True),
    sa.Column("event_id", sa.String(128), nullable=False, unique=True),
    sa.Column("subject_type", sa.String(16), nullable=False),
    _id("subject_id", nullable=False),
    _id("run_id", nullable=True),
    _id("instance_id", nullable=True),
    sa.Column("attempt_no", sa.Integer, nullable=True),
    sa.Column("kind", sa.String(64), nullable=False),
    sa.Column("actor", sa.String(160), nullable=False),
    # The worker's report sequence number (core ``Event.seq``); kept so that the fold can be
    # rebuilt from this table alone.
    sa.Column("seq", sa.BigInteger, nullable=True),
    _state("from_state", nullable=True),
    _state("to_state", nullable=True),
    _time("event_time", nullable=False),
    _time("observed_at", nullable=False),
    sa.Column("evidence", columns.json_column_type(), nullable=False),
    sa.Column("outcome", sa.String(16), nullable=False),
    sa.Column("reason", sa.Text, nullable=True),
    sa.Column("fingerprint", sa.String(128), nullable=False),
    # SHA-256 (hex) of the event's canonical encoding linked to the previous event of its
    # subject (ledger/chain.py, 0016). Nullable only because the column was added to a table
    # that cannot be rewritten in place; verify names a missing hash as a broken link.
    _hash("chain_hash"),
    sa.CheckConstraint(_one_of("subject_type", vocabulary.SubjectType), name="subject_type"),
    sa.CheckConstraint(_one_of("outcome", vocabulary.EventOutcome), name="outcome"),
    # Histories in position order: of an instance, of a run (run and instance events carry
    # run_id), and of a definition. An instance's or a run's own events name it in
    # instance_id or run_id as well as in subject_id, so only a definition's need an index by
    # subject: every index entry costs each of the millions of task events (0011).
    sa.Index("ix_events_instance_id_position", "instance_id", "position"),
    sa.Index("ix_events_run_id_position", "run_id", "position"),
    sa.Index(
        "ix_events_definition_subject_id_position",
        "subject_id",
        "position",
        postgresql_where=sa.text(DEFINITION_EVENT_PREDICATE),
        sqlite_where=sa.text(DEFINITION_EVENT_PREDICATE),
    ),
    # Positions are never reused after a purge (a reader's cursor stays meaningful).
    sqlite_autoincrement=True,
)

#: What a checkpoint says (ledger/seals.py): ``seal``, the heads of the chains that moved
#: since the checkpoint before; ``purge``, the heads of what a retention purge removed.
CHECKPOINT_KINDS: Final = ("purge", "seal")

#: Signed checkpoints of the event chains (0016), append-only like ``events`` and never
#: purged; each names the digest of the one before it.
chain_checkpoints = sa.Table(
    "chain_checkpoints",
    metadata,
    sa.Column("id", columns.PositionType, primary_key=True, autoincrement=True),
    sa.Column("kind", sa.String(16), nullable=False),
    _time("sealed_at", nullable=False),
    # Every event at or below this position was committed and is covered.
    sa.Column("through_position", sa.BigInteger, nullable=False),
    _hash("previous"),
    sa.Column("body", columns.json_column_type(), nullable=False),
    sa.Column("digest", sa.String(HASH_LENGTH), nullable=False),
    sa.Column("signature", sa.String(128), nullable=False),
    sa.Column("public_key", sa.String(HASH_LENGTH), nullable=False),
    sa.CheckConstraint(_one_of("kind", CHECKPOINT_KINDS), name="kind"),
    sqlite_autoincrement=True,
)

#: Each PUBLISHED run's attestation (ledger/attestations.py, 0017): written once when the
#: run is published (again, numbered, if a cleared run is published anew), never updated.
#: No foreign key to ``runs``: the retention purge removes them with the run.
run_attestations = sa.Table(
    "run_attestations",
    metadata,
    _id("run_id", primary_key=True),
    sa.Column("number", sa.Integer, primary_key=True, autoincrement=False),
    _time("attested_at", nullable=False),
    sa.Column("body", columns.json_column_type(), nullable=False),
    sa.Column("digest", sa.String(HASH_LENGTH), nullable=False),
    sa.Column("signature", sa.String(128), nullable=False),
    sa.Column("public_key", sa.String(HASH_LENGTH), nullable=False),
)

rejected_events = sa.Table(
    "rejected_events",
    metadata,
    sa.Column("position", columns.PositionType, primary_key=True, autoincrement=True),
    # Not unique: a rejected event may reuse a known id (that can be why it was rejected).
    sa.Column("event_id", sa.String(128), nullable=True, index=True),
    sa.Column("subject_type", sa.String(16), nullable=True),
    _id("subject_id", nullable=True),
    _id("run_id", nullable=True),
    _id("instance_id", nullable=True),
    sa.Column("attempt_no", sa.Integer, nullable=True),
    sa.Column("kind", sa.String(64), nullable=True),
    sa.Column("actor", sa.String(160), nullable=True),
    _time("event_time"),
    _time("observed_at", nullable=False),
    sa.Column("payload", columns.json_column_type(), nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Index("ix_rejected_events_instance_id_position", "instance_id", "position"),
    sa.Index("ix_rejected_events_run_id_position", "run_id", "position"),
    sqlite_autoincrement=True,
)

alerts = sa.Table(
    "alerts",
    metadata,
    sa.Column("id", columns.PositionType, primary_key=True, autoincrement=True),
    sa.Column("category", sa.String(32), nullable=False),
    _id("definition_id", nullable=True),
    _id("run_id", nullable=True),
    _id("instance_id", nullable=True),
    sa.Column("attempt_no", sa.Integer, nullable=True),
    sa.Column("owner", sa.String(128), nullable=True),
    sa.Column("dedup_key", sa.String(256), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("message", sa.Text, nullable=False),
    sa.Column("evidence", columns.json_column_type(), nullable=False),
    _time("opened_at", nullable=False),
    _time("acknowledged_at"),
    _time("resolved_at"),
    # Who took and who closed it (an actor: ``operator:<name>``, ``scheduler``); 0002.
    sa.Column("acknowledged_by", sa.String(160), nullable=True),
    sa.Column("resolved_by", sa.String(160), nullable=True),
    # Webhook delivery (services/alert_delivery.py): NULL when nothing is to be delivered.
    sa.Column("delivery_state", sa.String(16), nullable=True),
    _time("next_delivery_at"),
    sa.CheckConstraint(_one_of("category", vocabulary.AlertCategory), name="category"),
    sa.CheckConstraint(_one_of("status", vocabulary.AlertStatus), name="status"),
    # One unresolved alert per condition; a resolved one may be raised again.
    sa.Index(
        "uq_alerts_unresolved_dedup_key",
        "dedup_key",
        unique=True,
        postgresql_where=sa.text(UNRESOLVED_ALERT_PREDICATE),
        sqlite_where=sa.text(UNRESOLVED_ALERT_PREDICATE),
    ),
    sa.Index(
        "ix_alerts_unresolved_category",
        "category",
        "opened_at",
        postgresql_where=sa.text(UNRESOLVED_ALERT_PREDICATE),
        sqlite_where=sa.text(UNRESOLVED_ALERT_PREDICATE),
    ),
    # The deliverer's queue: the few alerts still waiting for their webhook, by due time.
    sa.Index(
        "ix_alerts_pending_delivery",
        "next_delivery_at",
        postgresql_where=sa.text(PENDING_DELIVERY_PREDICATE),
        sqlite_where=sa.text(PENDING_DELIVERY_PREDICATE),
    ),
)

#: Every attempt to deliver an alert to a webhook, successful or not (0002).
alert_deliveries = sa.Table(
    "alert_deliveries",
    metadata,
    sa.Column("id", columns.PositionType, primary_key=True, autoincrement=True),
    sa.Column("alert_id", columns.PositionType, nullable=False),
    sa.Column("target", sa.String(1024), nullable=False),
    sa.Column("attempt_no", sa.Integer, nullable=False),
    _time("attempted_at", nullable=False),
    sa.Column("delivered", sa.Boolean, nullable=False),
    sa.Column("status_code", sa.Integer, nullable=True),
    sa.Column("error", sa.Text, nullable=True),
    sa.ForeignKeyConstraint(["alert_id"], ["alerts.id"]),
    sa.Index("ix_alert_deliveries_alert_id_attempt_no", "alert_id", "attempt_no"),
    sqlite_autoincrement=True,
)

#: Operations people or housekeeping ran on the data itself: purges, log removals, repairs,
#: replays; with who, when, what was asked and what was done (0002).
operations = sa.Table(
    "operations",
    metadata,
    sa.Column("id", columns.PositionType, primary_key=True, autoincrement=True),
    sa.Column("kind", sa.String(32), nullable=False),
    sa.Column("actor", sa.String(160), nullable=False),
    _time("started_at", nullable=False),
    _time("finished_at"),
    sa.Column("dry_run", sa.Boolean, nullable=False),
    sa.Column("parameters", columns.json_column_type(), nullable=False),
    sa.Column("result", columns.json_column_type(none_as_null=True), nullable=True),
    sa.CheckConstraint(_one_of("kind", vocabulary.OperationKind), name="kind"),
    sa.Index("ix_operations_kind_started_at", "kind", "started_at"),
    sqlite_autoincrement=True,
)

#: Counters and gauges that processes other than the API write (the scheduler's loop, the
#: ledger's event outcomes, phase histograms) and ``/metrics`` reads at scrape time (0002).
#: ``labels`` is the canonical ``k=v,k=v`` form of a bounded label set.
metric_values = sa.Table(
    "metric_values",
    metadata,
    sa.Column("name", sa.String(128), primary_key=True),
    sa.Column("labels", sa.String(512), primary_key=True),
    sa.Column("value", sa.Double, nullable=False),
    _time("updated_at", nullable=False),
)

api_tokens = sa.Table(
    "api_tokens",
    metadata,
    _id("id", primary_key=True),
    sa.Column("name", sa.String(128), nullable=False),
    sa.Column("role", sa.String(16), nullable=False),
    sa.Column("token_hash", sa.String(128), nullable=False, unique=True),
    _time("created_at", nullable=False),
    _time("revoked_at"),
    sa.CheckConstraint(_one_of("role", vocabulary.TokenRole), name="role"),
)

schedulers = sa.Table(
    "schedulers",
    metadata,
    _id("id", primary_key=True),
    sa.Column("host", sa.String(256), nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    _time("started_at", nullable=False),
    _time("heartbeat_at", nullable=False),
    # When its loop last finished a tick (0002): the loop's lag, beside the lease's heartbeat.
    _time("last_tick_at"),
)

#: Until 0003, SQLite's delete trigger let deletes pass while this table held its row; anyone
#: could insert it. Since 0003 the trigger asks a function that only Veritask's connections
#: register (``dialects.purge_permitted``), and this table unlocks nothing. Kept empty.
purge_permit = sa.Table(
    "purge_permit",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.CheckConstraint("id = 1", name="single_row"),
)


#: Signed-in web UI sessions (0003). The cookie carries a random session id; only its SHA-256
#: is stored. A session is valid while not ended (sign-out), not expired, and its token is not
#: revoked (revoking a token also ends its sessions).
ui_sessions = sa.Table(
    "ui_sessions",
    metadata,
    sa.Column("id_hash", sa.String(128), primary_key=True),
    _id("token_id"),
    _time("created_at", nullable=False),
    _time("expires_at", nullable=False),
    _time("ended_at"),
    sa.ForeignKeyConstraint(["token_id"], ["api_tokens.id"]),
    sa.Index("ix_ui_sessions_token_id", "token_id"),
    sa.Index("ix_ui_sessions_expires_at", "expires_at"),
)

#: What a backfill does with an interval that has a run already (0006).
BACKFILL_EXISTING: Final = ("all", "failed", "skip")
BACKFILL_STATES: Final = ("active", "cancelled", "done")
BACKFILL_ACTIONS: Final = ("clear", "create", "rerun", "skip")

#: A backfill request: its half-open range of logical times, and whether it still moves (0006).
backfills = sa.Table(
    "backfills",
    metadata,
    _id("id", primary_key=True),
    _id("definition_id"),
    _time("range_start", nullable=False),
    _time("range_end", nullable=False),
    sa.Column("parameters", columns.json_column_type(), nullable=False),
    sa.Column("max_active_runs", sa.Integer, nullable=False),
    sa.Column("existing", sa.String(16), nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("actor", sa.String(160), nullable=False),
    sa.Column("reason", sa.Text, nullable=True),
    _time("created_at", nullable=False),
    _time("finished_at"),
    sa.CheckConstraint(_one_of("existing", BACKFILL_EXISTING), name="existing"),
    sa.CheckConstraint(_one_of("state", BACKFILL_STATES), name="state"),
    sa.CheckConstraint("max_active_runs >= 1", name="max_active_positive"),
    sa.ForeignKeyConstraint(["definition_id"], ["definitions.id"]),
    # The scheduler reads only the active ones, every pass.
    sa.Index("ix_backfills_state_created_at", "state", "created_at"),
    sa.Index("ix_backfills_definition_id_created_at", "definition_id", "created_at"),
)

#: One fire time of a backfill's range. ``run_id`` has no foreign key: the retention purge
#: deletes run snapshots, and the backfill's record outlives them (0006).
backfill_intervals = sa.Table(
    "backfill_intervals",
    metadata,
    _id("backfill_id", primary_key=True),
    sa.Column("logical_time", columns.UTCDateTime(), primary_key=True),
    _time("data_interval_start", nullable=False),
    _time("data_interval_end", nullable=False),
    sa.Column("action", sa.String(16), nullable=False),
    _id("existing_run_id", nullable=True),
    _state("existing_state", nullable=True),
    _id("run_id", nullable=True),
    sa.CheckConstraint(_one_of("action", BACKFILL_ACTIONS), name="action"),
    sa.ForeignKeyConstraint(["backfill_id"], ["backfills.id"]),
)

#: A scheduled fire time that ``concurrency: forbid`` refused: no run, so the interval's key
#: stays free for a backfill; the row keeps the schedule from firing it again (0006).
schedule_skips = sa.Table(
    "schedule_skips",
    metadata,
    _id("definition_id", primary_key=True),
    sa.Column("logical_time", columns.UTCDateTime(), primary_key=True),
    _id("active_run_id"),
    _time("skipped_at", nullable=False),
    sa.ForeignKeyConstraint(["definition_id"], ["definitions.id"]),
)

#: A named pool of slots shared by every task that names it (0009). The slots in use are not
#: stored: they are counted from the active attempts that name the pool.
pools = sa.Table(
    "pools",
    metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("slots", sa.Integer, nullable=False),
    sa.Column("actor", sa.String(160), nullable=False),
    _time("updated_at", nullable=False),
    sa.CheckConstraint("slots >= 0", name="slots_not_negative"),
)

#: An instance that may run but waits for its pool's slots, with what ranks it among the
#: pool's waiters (0009). Rows are hints, never the truth: an instance that no longer waits
#: is ignored by state, and a row not seen again for a while is ignored too.
pool_waits = sa.Table(
    "pool_waits",
    metadata,
    _id("instance_id", primary_key=True),
    sa.Column("pool", sa.String(64), nullable=False),
    _id("run_id"),
    sa.Column("task_key", sa.String(128), nullable=False),
    sa.Column("slots", sa.Integer, nullable=False),
    sa.Column("priority", sa.Integer, nullable=False),
    _time("logical_time"),
    _time("since", nullable=False),
    _time("seen_at", nullable=False),
    sa.Index("ix_pool_waits_pool", "pool"),
)
