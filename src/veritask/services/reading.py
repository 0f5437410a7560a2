"""Snapshot rows into the services' views, in one read transaction and without N+1 folds.

An instance row carries its folded facts and its policy, so its state, reason and attempts are
derived here with the core's pure ``derive`` instead of a second read per instance.
"""

from __future__ import annotations

from collections.abc import Iterable

from veritask.core import codec, fold, outputs, refusals
from veritask.core.jsontypes import JSONValue
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
    facts = codec.facts_from_json(row.fold) if isinstance(row.fold, dict) else fold.empty(row.id)
    return fold.derive(facts, TaskPolicy.from_json(row.policy))


def instance_view(
    row: InstanceRow, attempt_rows: Iterable[AttemptRow], *, waiting: str | None = None
) -> views.Instance:
    """An instance with every attempt; lease and heartbeat come from the attempt rows.
    ``waiting``: why it waits for its pool, which then is its reason."""
    snapshot = snapshot_of(row)
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
