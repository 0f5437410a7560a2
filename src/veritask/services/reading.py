"""Snapshot rows into the services' views, in one read transaction and without N+1 folds.

An instance row carries its folded facts and its policy, so its state, reason and attempts are
derived here with the core's pure ``derive`` instead of a second read per instance.
"""

from __future__ import annotations

import functools
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Final

from veritask.core import codec, fold, outputs, refusals
from veritask.core.jsontypes import JSONObject, JSONValue
from veritask.core.policy import TaskPolicy
from veritask.core.states import PublicationState, RunExecutionState, TriggerKind
from veritask.ledger import queries
from veritask.ledger.database import Connection
from veritask.ledger.rows import AttemptRow, DefinitionRow, EventRow, InstanceRow, RunRow
from veritask.services import views
from veritask.services.errors import NotFound


def definition_named(connection: Connection, name: str) -> DefinitionRow:
    """The definition called ``name``; NotFound (404) if there is none."""
    row = queries.get_definition(connection, name=name)
    if row is None:
        raise NotFound(refusals.NO_DEFINITION.format(name=name))
    return row


def snapshot_of(row: InstanceRow) -> fold.InstanceSnapshot:
    """The instance's snapshot from its row (the same derivation the ledger makes)."""
    return _kept_or(
        row.id,
        row.version,
        lambda: (row.fold if isinstance(row.fold, dict) else None, row.policy),
    )


def snapshot_of_text(row: queries.InstanceText) -> fold.InstanceSnapshot:
    """:func:`snapshot_of` for a row read as text: decoded only if not kept already."""
    return _kept_or(
        row.id, row.version, lambda: (json.loads(row.fold) if row.fold else None, row.policy)
    )


def _kept_or(
    instance_id: str,
    version: int,
    stored: Callable[[], tuple[JSONObject | None, JSONObject | str]],
) -> fold.InstanceSnapshot:
    """The snapshot kept for (instance, version), else derived from ``stored`` (the facts and
    the policy) and kept. Every change of a row's facts moves its version, so a page or a
    poll that reads a run of thousands of instances again derives only those that moved."""
    key = (instance_id, version)
    with _SNAPSHOTS_LOCK:
        kept = _SNAPSHOTS.get(key)
        if kept is not None:
            _SNAPSHOTS.move_to_end(key)
            return kept
    facts_json, policy = stored()
    facts = codec.facts_from_json(facts_json) if facts_json else fold.empty(instance_id)
    snapshot = fold.derive(facts, _policy(policy))
    with _SNAPSHOTS_LOCK:
        _SNAPSHOTS[key] = snapshot
        while len(_SNAPSHOTS) > SNAPSHOTS_KEPT:
            _SNAPSHOTS.popitem(last=False)
    return snapshot


def _policy(stored: JSONObject | str) -> TaskPolicy:
    if isinstance(stored, str):
        return _policy_of_text(stored)
    return TaskPolicy.from_json(stored)


@functools.lru_cache(maxsize=1024)
def _policy_of_text(text: str) -> TaskPolicy:
    """A run's tasks share a few policies: each text is parsed once."""
    return TaskPolicy.from_json(json.loads(text))


#: Derived snapshots kept by (instance id, version), the least recently read forgotten first.
SNAPSHOTS_KEPT: Final = 50_000
_SNAPSHOTS: OrderedDict[tuple[str, int], fold.InstanceSnapshot] = OrderedDict()
_SNAPSHOTS_LOCK = threading.Lock()  # pages render in a thread pool


def instance_view(
    row: InstanceRow | queries.InstanceText,
    attempt_rows: Iterable[AttemptRow],
    *,
    waiting: str | None = None,
) -> views.Instance:
    """An instance with every attempt; lease and heartbeat come from the attempt rows.
    ``waiting``: why it waits for its pool, which then is its reason."""
    snapshot = snapshot_of(row) if isinstance(row, InstanceRow) else snapshot_of_text(row)
    leases = {a.attempt_no: a for a in attempt_rows}
    return views.Instance(
        id=row.id,
        run_id=row.run_id,
        task=row.task_key,
        map_index=row.map_index,
        state=snapshot.state,
        reason=waiting or snapshot.reason,
        epoch=snapshot.epoch,
        retry_at=snapshot.retry_at,
        overridden=snapshot.override is not None,
        attempts=tuple(
            _attempt_view(
                a,
                leases.get(a.attempt_no),
                outputs.attempt_output(snapshot.facts.attempt(a.attempt_no)),
            )
            for a in snapshot.attempts
        ),
        output=outputs.current_output(snapshot),
    )


def _attempt_view(a: fold.AttemptView, row: AttemptRow | None, output: JSONValue) -> views.Attempt:
    progress = (
        views.Progress(a.progress.phase, a.progress.done, a.progress.total, a.progress.message)
        if a.progress
        else None
    )
    return views.Attempt(
        attempt_no=a.attempt_no,
        state=a.state,
        reason=a.reason,
        open_reason=a.open_reason.value if a.open_reason else None,
        executor=a.executor,
        external_id=a.external_id,
        worker=a.worker,
        scheduled_at=a.scheduled_at,
        queued_at=a.queued_at,
        started_at=a.started_at,
        ended_at=a.ended_at,
        last_heartbeat_at=a.last_report_at,
        lease_expires_at=row.lease_expires_at if row is not None and a.is_active else None,
        exit_code=a.exit_code,
        error_category=a.error_category,
        log_location=a.log_location or (row.log_location if row is not None else None),
        commit_marker=a.commit_marker,
        progress=progress,
        conflict=a.conflict,
        late=a.late,
        error_message=row.error_message if row is not None else None,
        cpu_user_seconds=row.cpu_user_seconds if row is not None else None,
        cpu_system_seconds=row.cpu_system_seconds if row is not None else None,
        peak_rss_bytes=row.peak_rss_bytes if row is not None else None,
        output=output,
    )


def run_view(row: RunRow, definition_name: str) -> views.Run:
    return views.Run(
        id=row.id,
        definition=definition_name,
        definition_version=row.definition_version,
        trigger_kind=TriggerKind(row.trigger_kind),
        idempotency_key=row.idempotency_key,
        rerun_of=row.rerun_of,
        logical_time=row.logical_time,
        parameters=dict(row.parameters),
        execution_state=RunExecutionState(row.execution_state),
        execution_reason=row.execution_reason,
        publication_state=PublicationState(row.publication_state),
        publication_reason=row.publication_reason,
        created_at=row.created_at,
        updated_observed_at=row.updated_observed_at,
    )


def event_view(row: EventRow) -> views.HistoryEvent:
    return views.HistoryEvent(
        position=row.position,
        event_id=row.event_id,
        subject_type=row.subject_type,
        subject_id=row.subject_id,
        run_id=row.run_id,
        instance_id=row.instance_id,
        attempt_no=row.attempt_no,
        kind=row.kind,
        actor=row.actor,
        event_time=row.event_time,
        observed_at=row.observed_at,
        evidence=dict(row.evidence),
        outcome=row.outcome,
        reason=row.reason,
        from_state=row.from_state,
        to_state=row.to_state,
    )
