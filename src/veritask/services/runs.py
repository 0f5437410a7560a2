"""Runs and instances: trigger, read, follow their histories, and cancel.

A trigger records the run and returns its id; a cancel records the request and returns the
state it moved to (CANCELLING while the engine has not confirmed). Nothing here calls an
engine: the scheduler sends the stops and records the confirmations.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Mapping
from datetime import datetime
from typing import Final

from veritask.core import decide, refusals
from veritask.core.events import EventKind
from veritask.core.jsontypes import JSONValue
from veritask.core.judge import Outcome
from veritask.core.states import InstanceState, RunExecutionState, TriggerKind
from veritask.definitions import parse
from veritask.definitions.parameters import InvalidParameters
from veritask.ledger import (
    dialects,
    pagination,
    pools,
    queries,
    rejections,
    run_store,
    run_upstreams,
)
from veritask.ledger.database import Connection
from veritask.ledger.ledger import StaleDecision
from veritask.ledger.rows import EventRow, InstanceRow, RunRow
from veritask.ledger.vocabulary import EventOutcome
from veritask.ledger.vocabulary import SubjectType as SubjectType  # re-exported for the API
from veritask.scheduling import triggers
from veritask.scheduling.dispatch import new_event_id
from veritask.services import ordering, reading, views
from veritask.services.errors import Conflict, FieldProblem, InvalidInput, NotFound
from veritask.services.platform import Platform

MAX_PAGE: Final = 200
MAX_HISTORY: Final = 1000
#: The outcome of an event the ledger refused (kept in its own table, never folded).
REJECTED: Final = "rejected"
#: A decision lost to a concurrent writer is re-read and taken again, this many times.
_DECISION_ROUNDS: Final = 5
#: The states of an instance that may be waiting for its pool's slots.
#: How many of a cancelled run's instances the request itself asks to stop (the scheduler
#: asks the rest).
INLINE_STOPS: Final = 50
_MAY_WAIT: Final = (InstanceState.CREATED.value, InstanceState.UP_FOR_RETRY.value)

# -- trigger -----------------------------------------------------------------------------------


def trigger_run(
    platform: Platform,
    name: str,
    *,
    actor: str,
    kind: TriggerKind = TriggerKind.API,
    parameters: Mapping[str, JSONValue] | None = None,
    key: str | None = None,
    logical_time: datetime | None = None,
) -> views.Triggered:
    """Create a run of the definition's current version, or return the run with this key.

    Parameters must be ones the definition declares (when it declares any), each a value
    of its declared type. ``triggers.trigger`` reads the definition and checks them, the one
    place: its refusals become the service's errors here. The run's logical time is
    ``logical_time`` (timezone-aware), or the trigger's moment.

    A key already used with other parameters is a 409 naming the parameters that differ.
    """
    if kind not in (TriggerKind.MANUAL, TriggerKind.API):
        raise InvalidInput.about("trigger_kind", refusals.TRIGGER_KIND.format())
    try:
        result = triggers.trigger(
            platform.ledger,
            name=name,
            kind=kind,
            actor=actor,
            key=key,
            parameters=parameters,
            logical_time=logical_time,
        )
    except triggers.NotFound as exc:
        raise NotFound(str(exc)) from None
    except InvalidParameters as exc:
        found = [FieldProblem(p.field, None, p.message) for p in exc.problems]
        raise InvalidInput(str(exc), found) from None
    except triggers.Overlap as exc:
        # ``concurrency: forbid`` with a run active: refused at the request, naming the run(s).
        raise Conflict(str(exc), run_ids=exc.active_run_ids) from None
    except triggers.KeyReused as exc:
        # A key reused with other parameters: refused at the request, naming the run.
        raise Conflict(str(exc)) from None
    except triggers.Refused as exc:
        with dialects.read_transaction(platform.engine) as connection:
            row = queries.get_definition(connection, name=name)
        raise Conflict(str(exc), current_state=row.lifecycle if row else None) from None
    with dialects.read_transaction(platform.engine) as connection:
        run = queries.get_run(connection, result.run_id)
    return views.Triggered(
        result.run_id,
        result.created,
        run.idempotency_key if run else "",
        result.execution_state,
        result.reason,
    )


# -- reads -------------------------------------------------------------------------------------


def list_runs(
    platform: Platform,
    *,
    definition: str | None = None,
    states: Collection[RunExecutionState] | None = None,
    cursor: str | None = None,
    limit: int = 50,
) -> views.RunPage:
    """Runs, newest first, one page at a time; ``cursor`` is the previous page's next_cursor."""
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidInput.about("limit", refusals.BETWEEN.format(low=1, high=MAX_PAGE))
    after = None
    if cursor:
        try:
            after = pagination.Cursor.decode(cursor)
        except ValueError:
            raise InvalidInput.about("cursor", refusals.NOT_A_CURSOR.format()) from None
    with dialects.read_transaction(platform.engine) as connection:
        definition_id = None
        if definition is not None:
            definition_id = reading.definition_named(connection, definition).id
        page = queries.list_runs(
            connection,
            definition_id=definition_id,
            execution_states=list(states) if states else None,
            after=after,
            limit=limit,
        )
        names = queries.definition_names(connection, (r.definition_id for r in page.items))
    return views.RunPage(
        tuple(reading.run_view(r, names.get(r.definition_id, "")) for r in page.items),
        page.next_cursor.encode() if page.next_cursor else None,
    )


def get_run(platform: Platform, run_id: str) -> views.RunDetail:
    """A run with both states and their reasons, and its instances with their attempts, in
    pipeline order (``ordering``)."""
    with dialects.read_transaction(platform.engine) as connection:
        row = _run_row(connection, run_id)
        instances = queries.instance_texts_of_run(connection, run_id)
        attempts = queries.attempts_of_run(connection, run_id)
        names = queries.definition_names(connection, [row.definition_id])
        upstreams = run_upstreams.upstream_runs(connection, run_id)
        order = ordering.version_order(connection, row.definition_id, row.definition_version)
        waits = pools.waiting_reasons(
            connection, [i.id for i in instances if i.state in _MAY_WAIT], now=platform.now()
        )
    listed = ordering.in_pipeline_order(
        instances, order, task=lambda i: i.task_key, index=lambda i: i.map_index
    )
    return views.RunDetail(
        reading.run_view(row, names.get(row.definition_id, "")),
        tuple(
            reading.instance_view(i, attempts.get(i.id, ()), waiting=waits.get(i.id))
            for i in listed
        ),
        tuple(views.UpstreamRun(u.run_id, u.definition) for u in upstreams),
    )


def get_run_summary(platform: Platform, run_id: str) -> views.Run:
    """A run's states and reasons without its instances: one row, whatever the run's size
    (what a poll for the run's end reads)."""
    with dialects.read_transaction(platform.engine) as connection:
        row = _run_row(connection, run_id)
        names = queries.definition_names(connection, [row.definition_id])
    return reading.run_view(row, names.get(row.definition_id, ""))


def get_instance(platform: Platform, instance_id: str) -> views.InstanceDetail:
    """An instance with its attempts (progress, log, exit) and its history."""
    with dialects.read_transaction(platform.engine) as connection:
        row = _instance_row(connection, instance_id)
        attempts = queries.attempts_of(connection, instance_id)
        run = _run_row(connection, row.run_id)
        names = queries.definition_names(connection, [run.definition_id])
        events = queries.history(
            connection,
            subject_type=SubjectType.INSTANCE,
            subject_id=instance_id,
            limit=MAX_HISTORY + 1,
        )
        waiting = pools.waiting_reason(connection, instance_id, now=platform.now())
    return views.InstanceDetail(
        reading.instance_view(row, attempts, waiting=waiting),
        names.get(run.definition_id, ""),
        _history(SubjectType.INSTANCE, instance_id, events, MAX_HISTORY),
    )


def run_graph(platform: Platform, run_id: str) -> views.TaskGraph:
    """The run's task graph, from the definition version the run was made of."""
    with dialects.read_transaction(platform.engine) as connection:
        row = _run_row(connection, run_id)
        cached = _cached_graph(row.definition_id, row.definition_version)
        if cached is not None:
            return cached
        version = queries.get_definition_version(
            connection, definition_id=row.definition_id, version=row.definition_version
        )
    if version is None:
        return views.TaskGraph((), ())
    graph = views.TaskGraph.of(parse.definition_from_json(version.spec))
    with _GRAPHS_LOCK:  # pages render in a thread pool
        _GRAPHS[(row.definition_id, row.definition_version)] = graph
        while len(_GRAPHS) > _GRAPHS_KEPT:
            _GRAPHS.pop(next(iter(_GRAPHS)))
    return graph


#: Graphs by (definition id, version). A version never changes once stored, so its graph can
#: be kept: a run page of 1,000 tasks does not parse its definition again on every refresh.
_GRAPHS: dict[tuple[str, int], views.TaskGraph] = {}
_GRAPHS_KEPT: Final = 64
_GRAPHS_LOCK = threading.Lock()


def _cached_graph(definition_id: str, version: int) -> views.TaskGraph | None:
    with _GRAPHS_LOCK:
        return _GRAPHS.get((definition_id, version))


def history(
    platform: Platform,
    subject_type: SubjectType,
    subject: str,
    *,
    after: int | None = None,
    limit: int = 200,
) -> views.History:
    """An object's events in recorded order: a run's include its instances' events.

    ``subject`` is a run or instance id, or a definition's name.
    """
    if not 1 <= limit <= MAX_HISTORY:
        raise InvalidInput.about("limit", refusals.BETWEEN.format(low=1, high=MAX_HISTORY))
    with dialects.read_transaction(platform.engine) as connection:
        match subject_type:
            case SubjectType.RUN:
                subject_id = _run_row(connection, subject).id
            case SubjectType.INSTANCE:
                subject_id = _instance_row(connection, subject).id
            case SubjectType.DEFINITION:
                subject_id = reading.definition_named(connection, subject).id
        events = queries.history(
            connection,
            subject_type=subject_type,
            subject_id=subject_id,
            after_position=after,
            limit=limit + 1,
        )
    return _history(subject_type, subject, events, limit)


def instance_events(
    platform: Platform,
    instance_id: str,
    *,
    newest_first: bool = True,
    kind: str | None = None,
    outcome: str | None = None,
    limit: int = MAX_HISTORY,
) -> views.InstanceEvents:
    """The instance's recorded and refused events, newest (or oldest) first, of one event kind
    and one outcome (``applied``, ``duplicate``, ``stale``, ``conflict`` or ``rejected``) when
    asked; at most ``limit`` of each, the newest when newest first."""
    if not 1 <= limit <= MAX_HISTORY:
        raise InvalidInput.about("limit", refusals.BETWEEN.format(low=1, high=MAX_HISTORY))
    # "must be one of …": the phrase was first written for a backfill's choice.
    kinds_known = [k.value for k in EventKind]
    if kind is not None and kind not in kinds_known:
        choices = ", ".join(kinds_known)
        raise InvalidInput.about("kind", refusals.BACKFILL_EXISTING.format(choices=choices))
    known = [*(o.value for o in EventOutcome), REJECTED]
    if outcome is not None and outcome not in known:
        choices = ", ".join(known)
        raise InvalidInput.about("outcome", refusals.BACKFILL_EXISTING.format(choices=choices))
    kinds = None if kind is None else [kind]
    with dialects.read_transaction(platform.engine) as connection:
        _instance_row(connection, instance_id)
        events = (
            []
            if outcome == REJECTED
            else queries.history(
                connection,
                subject_type=SubjectType.INSTANCE,
                subject_id=instance_id,
                limit=limit + 1,
                newest_first=newest_first,
                kinds=kinds,
                outcomes=None if outcome is None else [outcome],
            )
        )
        refused = (
            rejections.of_instance(
                connection, instance_id, limit=limit + 1, newest_first=newest_first, kinds=kinds
            )
            if outcome in (None, REJECTED)
            else []
        )
    return views.InstanceEvents(
        tuple(reading.event_view(e) for e in events[:limit]),
        tuple(_rejected_view(row) for row in refused[:limit]),
        len(events) > limit or len(refused) > limit,
    )


def rejected_events(
    platform: Platform, instance_id: str, *, limit: int = 200
) -> tuple[views.RejectedEvent, ...]:
    """The events refused for this instance, oldest first (at most ``limit``)."""
    if not 1 <= limit <= MAX_HISTORY:
        raise InvalidInput.about("limit", refusals.BETWEEN.format(low=1, high=MAX_HISTORY))
    with dialects.read_transaction(platform.engine) as connection:
        _instance_row(connection, instance_id)
        rows = rejections.of_instance(connection, instance_id, limit=limit)
    return tuple(_rejected_view(row) for row in rows)


def _rejected_view(row: rejections.RejectedEventRow) -> views.RejectedEvent:
    return views.RejectedEvent(
        position=row.position,
        event_id=row.event_id,
        attempt_no=row.attempt_no,
        kind=row.kind,
        actor=row.actor,
        event_time=row.event_time,
        observed_at=row.observed_at,
        payload=dict(row.payload) if isinstance(row.payload, dict) else {"payload": row.payload},
        reason=row.reason,
    )


def _history(
    subject_type: SubjectType, subject: str, events: list[EventRow], limit: int
) -> views.History:
    more = len(events) > limit
    kept = events[:limit]
    return views.History(
        subject_type.value,
        subject,
        tuple(reading.event_view(e) for e in kept),
        kept[-1].position if more and kept else None,
    )


# -- cancel ------------------------------------------------------------------------------------


def cancel_run(
    platform: Platform, run_id: str, *, actor: str, reason: str
) -> views.CancelRequested:
    """Ask every unfinished instance of the run to stop; 409 if the run already finished.

    The run moves to CANCELLING (CANCELLED at once if it was only QUEUED), in one transaction,
    and the answer comes then. The first ``INLINE_STOPS`` unfinished instances are asked to
    stop here too, so that a small run shows them CANCELLING at once; the scheduler asks the
    rest of a CANCELLING run's instances on its next tick (a run of 20,000 tasks answers in
    well under a second, and its stops go on in the background). The run becomes CANCELLED
    once every instance is confirmed stopped.
    """
    reason = _reason(reason)
    with dialects.read_transaction(platform.engine) as connection:
        current = _run_row(connection, run_id).execution_state
    if current == RunExecutionState.CANCELLED:
        # A second cancel of a stopping run is the same request; of a stopped one, illegal.
        raise Conflict(
            refusals.RUN_ALREADY.format(run_id=run_id, state="CANCELLED"), current_state=current
        )
    try:
        state = triggers.request_run_cancel(platform.ledger, run_id, actor=actor, reason=reason)
    except triggers.Refused as exc:
        with dialects.read_transaction(platform.engine) as connection:
            current = _run_row(connection, run_id).execution_state
        raise Conflict(str(exc), current_state=current) from None
    # The scheduler stops the instances of a CANCELLING run on its next tick; recording a
    # few requests now shows a small run's instances CANCELLING at once, scheduler or not.
    with dialects.read_transaction(platform.engine) as connection:
        briefs = run_store.instances_brief(connection, run_id)
    unfinished = [b.id for b in briefs if not b.state.is_terminal]
    for instance_id in unfinished[:INLINE_STOPS]:
        _request_stop(platform, instance_id, actor=actor, reason=reason, strict=False)
    return views.CancelRequested("run", run_id, state.value, f"cancel requested by {actor}")


def cancel_instance(
    platform: Platform, instance_id: str, *, actor: str, reason: str
) -> views.CancelRequested:
    """Ask the engine to stop the instance's current attempt; 409 if there is nothing to stop."""
    state = _request_stop(platform, instance_id, actor=actor, reason=_reason(reason), strict=True)
    return views.CancelRequested(
        "instance", instance_id, state.value, f"cancel requested by {actor}"
    )


def _request_stop(
    platform: Platform, instance_id: str, *, actor: str, reason: str, strict: bool
) -> InstanceState:
    """Record a cancel on the snapshot it was decided on; re-decide if another writer won."""
    for _ in range(_DECISION_ROUNDS):
        loaded = platform.ledger.snapshot(instance_id)
        if loaded is None:
            raise NotFound(refusals.NO_RUN_OR_INSTANCE.format(instance_id=instance_id))
        snapshot, version = loaded
        event = decide.request_stop(
            snapshot, actor=actor, reason=reason, now=platform.now(), event_id=new_event_id()
        )
        if event is None:
            if strict:
                raise Conflict(
                    refusals.NOTHING_TO_STOP.format(instance_id=instance_id, state=snapshot.state),
                    current_state=snapshot.state.value,
                )
            return snapshot.state
        try:
            applied = platform.ledger.apply(event, expected_version=version)
        except StaleDecision:
            continue
        if applied.snapshot is None:
            raise Conflict(applied.reason, current_state=snapshot.state.value)
        if applied.outcome is Outcome.REJECTED:
            if strict:
                raise Conflict(applied.reason, current_state=snapshot.state.value)
            return snapshot.state
        return applied.snapshot.state
    raise Conflict(refusals.KEPT_CHANGING.format(instance_id=instance_id))


def _reason(reason: str) -> str:
    text = reason.strip()
    if not text:
        raise InvalidInput.about("reason", refusals.CANCEL_NEEDS_REASON.format())
    return text


# -- lookups -----------------------------------------------------------------------------------


def _run_row(connection: Connection, run_id: str) -> RunRow:
    row = queries.get_run(connection, run_id)
    if row is None:
        raise NotFound(refusals.NO_RUN.format(run_id=run_id))
    return row


def _instance_row(connection: Connection, instance_id: str) -> InstanceRow:
    row = queries.get_instance(connection, instance_id)
    if row is None:
        raise NotFound(refusals.NO_INSTANCE.format(instance_id=instance_id))
    return row
