"""The ledger's statements, built once per dialect, and the rows it writes.

SQLAlchemy compiles a statement once per shape; building them at import (or once per dialect)
keeps ``apply()`` from paying for construction and compilation on every event.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from veritask.core import decide, judge
from veritask.core.events import Event, EventKind, fingerprint
from veritask.core.fold import AttemptView
from veritask.core.jsontypes import JSONObject
from veritask.core.policy import TaskPolicy
from veritask.ledger import attempt_reports, pools, schema

_instances = schema.task_instances
#: An instance's policy as stored text, for :class:`PolicyTexts`: the ledger's batches and the
#: scheduler's sweeps read it for row after row, and a run's tasks share a few policies.
POLICY_TEXT = sa.cast(_instances.c.policy, sa.Text).label("policy")
# The fold as stored text: the ledger decodes it only when its cache of the instance is stale.
FOLD_TEXT = sa.cast(_instances.c.fold, sa.Text).label("fold")
SELECT_INSTANCE = sa.select(
    _instances.c.run_id, _instances.c.version, POLICY_TEXT, FOLD_TEXT, _instances.c.chain_head
).where(_instances.c.id == sa.bindparam("id"))
SELECT_INSTANCES = sa.select(
    _instances.c.id,
    _instances.c.run_id,
    _instances.c.version,
    POLICY_TEXT,
    FOLD_TEXT,
    _instances.c.chain_head,
).where(_instances.c.id.in_(sa.bindparam("ids", expanding=True)))
SELECT_KNOWN_MANY = sa.select(
    schema.events.c.event_id,
    schema.events.c.fingerprint,
    schema.events.c.outcome,
    schema.events.c.reason,
).where(schema.events.c.event_id.in_(sa.bindparam("ids", expanding=True)))
#: Ids per ``IN (...)`` list: far below SQLite's and PostgreSQL's parameter limits.
CHUNK = 500
SELECT_KNOWN = sa.select(
    schema.events.c.fingerprint, schema.events.c.outcome, schema.events.c.reason
).where(schema.events.c.event_id == sa.bindparam("event_id"))
UPDATE_INSTANCE = (
    _instances.update()
    .where(
        _instances.c.id == sa.bindparam("b_id"),
        _instances.c.version == sa.bindparam("b_expected"),
    )
    .values(
        state=sa.bindparam("b_state"),
        epoch=sa.bindparam("b_epoch"),
        retry_at=sa.bindparam("b_retry_at", type_=_instances.c.retry_at.type),
        fold=sa.bindparam("b_fold", type_=_instances.c.fold.type),
        reason=sa.bindparam("b_reason", type_=_instances.c.reason.type),
        updated_observed_at=sa.bindparam(
            "b_updated_observed_at", type_=_instances.c.updated_observed_at.type
        ),
        chain_head=sa.bindparam("b_chain_head", type_=_instances.c.chain_head.type),
        version=_instances.c.version + 1,
    )
)


class PolicyTexts:
    """Policies read as stored text (:data:`POLICY_TEXT`), each distinct text parsed once."""

    #: More distinct policies than this and the cache starts again: it stays small.
    BOUND = 1000

    def __init__(self) -> None:
        self._parsed: dict[str, TaskPolicy] = {}

    def parse(self, text: str) -> TaskPolicy:
        policy = self._parsed.get(text)
        if policy is None:
            if len(self._parsed) > self.BOUND:
                self._parsed.clear()
            policy = self._parsed[text] = TaskPolicy.from_json(json.loads(text))
        return policy


def event_row(event: Event, run_id: str, verdict: judge.Verdict) -> dict[str, object]:
    return {
        "event_id": event.event_id,
        "subject_type": "instance",
        "subject_id": event.instance_id,
        "run_id": run_id,
        "instance_id": event.instance_id,
        "attempt_no": event.attempt_no,
        "kind": event.kind.value,
        "actor": event.actor,
        "seq": event.seq,
        "from_state": verdict.before.state.value,
        "to_state": verdict.after.state.value,
        "event_time": event.event_time,
        "observed_at": event.observed_at,
        "evidence": event.evidence,
        "outcome": verdict.outcome.value,
        "reason": verdict.reason,
        "fingerprint": fingerprint(event),
    }


_events = schema.events.c
#: The columns of a recorded event that the fold takes, as :func:`event_from_row` reads them.
EVENT_FIELDS = (
    _events.event_id,
    _events.instance_id,
    _events.attempt_no,
    _events.kind,
    _events.actor,
    _events.event_time,
    _events.observed_at,
    _events.evidence,
    _events.seq,
)


def event_from_row(row: sa.Row[*tuple[object, ...]]) -> Event:
    """A recorded instance event (selected with :data:`EVENT_FIELDS`) as the fold takes it."""
    found = row._mapping
    return Event(
        event_id=str(found["event_id"]),
        instance_id=str(found["instance_id"]),
        attempt_no=int(found["attempt_no"] or 0),
        kind=EventKind(found["kind"]),
        actor=str(found["actor"]),
        event_time=found["event_time"],
        evidence=found["evidence"],
        seq=found["seq"],
        observed_at=found["observed_at"],
    )


def payload(event: Event) -> JSONObject:
    """What a rejected event said (never its token)."""
    return {
        "event_id": event.event_id,
        "instance_id": event.instance_id,
        "attempt_no": event.attempt_no,
        "kind": event.kind.value,
        "actor": event.actor,
        "event_time": event.event_time.isoformat(),
        "seq": event.seq,
        "evidence": event.evidence,
    }


#: What an attempt's row holds of its view: all but the liveness fields.
_ROW_FIELDS = tuple(
    f.name
    for f in fields(AttemptView)
    if f.name not in ("last_report_at", "last_report_observed_at", "max_report_seq")
)


def row_changed(before: AttemptView, after: AttemptView) -> bool:
    """Whether the attempt's row must be written again: a field other than liveness moved.

    A heartbeat only moves the last report and so the lease; writing the attempt row for it
    would double the cost of the most frequent event. The row's ``lease_expires_at`` may
    therefore lag behind: it is never later than the real expiry (reports only push it
    forward), so the monitor's query still finds every expired lease, re-derives the real
    expiry from the snapshot and refreshes the row (``Ledger.refresh_lease``). Compared field
    by field: a copy of each view without those fields cost more than the comparison.
    """
    if before is after:
        return False
    return any(getattr(before, name) != getattr(after, name) for name in _ROW_FIELDS)


def upsert_attempt(
    connection: Connection, instance_id: str, view: AttemptView, policy: TaskPolicy
) -> None:
    connection.execute(
        statements_for(connection).upsert_attempt, attempt_row(instance_id, view, policy)
    )


def attempt_row(instance_id: str, view: AttemptView, policy: TaskPolicy) -> dict[str, object]:
    progress = view.progress
    values: dict[str, object] = {
        "state": view.state.value,
        "executor": view.executor,
        "external_id": view.external_id,
        "worker": view.worker,
        "token_hash": view.token_hash,
        "lease_expires_at": decide.lease_expiry(view, policy) if view.is_active else None,
        "monitor_due_at": decide.monitor_due(view, policy),
        "last_heartbeat_at": view.last_report_at,
        "queued_at": view.queued_at,
        "started_at": view.started_at,
        "ended_at": view.ended_at,
        "exit_code": view.exit_code,
        "error_category": view.error_category,
        "log_location": view.log_location,
        "progress_phase": progress.phase if progress else None,
        "progress_done": progress.done if progress else None,
        "progress_total": progress.total if progress else None,
        "progress_message": progress.message if progress else None,
    }
    return {"instance_id": instance_id, "attempt_no": view.attempt_no, **values}


@dataclass(frozen=True)
class Statements:
    """Statements built once per dialect, so SQLAlchemy compiles each of them once."""

    insert_event: sa.Insert
    insert_events: sa.Insert
    upsert_attempt: sa.Insert


_ATTEMPT_COLUMNS = [
    c.name
    for c in schema.attempts.columns
    if not c.primary_key
    and c.name not in attempt_reports.REPORT_COLUMNS
    and c.name not in attempt_reports.COUNTER_COLUMNS
    # Written once, by the transaction that opens the attempt.
    and c.name not in pools.SLOT_COLUMNS
]
_BUILT: dict[str, Statements] = {}


def statements_for(connection: Connection) -> Statements:
    name = connection.dialect.name
    built = _BUILT.get(name)
    if built is None:
        insert = postgresql.insert if name == "postgresql" else sqlite.insert
        events = insert(schema.events).on_conflict_do_nothing(index_elements=["event_id"])
        attempts = insert(schema.attempts)
        upsert = attempts.on_conflict_do_update(
            index_elements=["instance_id", "attempt_no"],
            set_={column: attempts.excluded[column] for column in _ATTEMPT_COLUMNS},
        )
        built = _BUILT[name] = Statements(
            events.returning(schema.events.c.position), events, upsert
        )
    return built
