"""Definitions applied, runs triggered: by schedule, by hand, by the API, or as a backfill.

Every run has an idempotency key; a scheduled or backfilled run's key is the definition and
its logical time, so two schedulers, a restart and a backfill over the same range create one
run. The definition's concurrency policy decides what a new run does while another is
active, and a refused overlap is a run recorded with its reason, never silently dropped.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from veritask.core import decide, problems, reasons, refusals
from veritask.core.errors import VeritaskError
from veritask.core.jsontypes import JSONValue
from veritask.core.states import (
    DefinitionLifecycle,
    InstanceState,
    PublicationState,
    RunExecutionState,
    TriggerKind,
)
from veritask.definitions import codec, schedule
from veritask.definitions.errors import DefinitionError, Problem
from veritask.definitions.model import ConcurrencyPolicy, Definition
from veritask.definitions.parameters import check_values, defaults
from veritask.definitions.parse import parse_definition
from veritask.ledger import backfills as backfill_store
from veritask.ledger import definitions as definition_store
from veritask.ledger import dialects, queries, run_store
from veritask.ledger.database import Connection
from veritask.ledger.ledger import Ledger
from veritask.ledger.vocabulary import SubjectType
from veritask.scheduling import publication, versions
from veritask.scheduling.dispatch import new_event_id


class NotFound(VeritaskError):
    """There is no such definition or run."""


class Refused(VeritaskError):
    """The request is not allowed in the object's current state."""


class KeyReused(Refused):
    """The idempotency key is an existing run's, triggered with other parameters."""


class Overlap(Refused):
    """``concurrency: forbid`` refused a new run while others are active (no run is made)."""

    def __init__(self, message: str, active_run_ids: list[str]) -> None:
        super().__init__(message)
        self.active_run_ids = active_run_ids


@dataclass(frozen=True)
class Applied:
    """The outcome of applying a definition."""

    definition_id: str
    name: str
    version: int
    created: bool


@dataclass(frozen=True)
class Triggered:
    """The outcome of a trigger: the run (new or existing) and its state."""

    run_id: str
    created: bool
    execution_state: RunExecutionState
    reason: str


def apply_definition(
    ledger: Ledger, text: str, *, actor: str = "api", parsed: Definition | None = None
) -> Applied:
    """Validate and store a definition version (the same content returns its version).

    ``parsed``: ``text`` already parsed by the caller, which a large definition's apply would
    otherwise pay for twice (reading YAML with its lines is most of an apply's time)."""
    definition = parsed if parsed is not None else parse_definition(text)
    spec = codec.definition_to_json(definition)
    digest = codec.content_hash(definition)
    now = ledger.clock()
    with ledger.engine.begin() as connection:
        existing = definition_store.definition_heading(connection, definition.name)
        # A deleted name is free again (a new definition, a new id); one still cancelling
        # its runs holds it until they stopped.
        if existing is not None and existing.lifecycle == DefinitionLifecycle.DELETING:
            raise Refused(
                refusals.DEFINITION_IS.format(name=definition.name, lifecycle=existing.lifecycle)
            )
        _refuse_endless_waits(connection, definition)
        definition_id, version, created = definition_store.save_definition_version(
            connection,
            name=definition.name,
            spec=spec,
            source=text,
            content_hash=digest,
            owner=definition.owner,
            now=now,
        )
        run_store.record_subject_event(
            connection,
            subject_type=SubjectType.DEFINITION,
            subject_id=definition_id,
            kind="definition_applied",
            actor=actor,
            event_id=new_event_id(),
            now=now,
            evidence={"version": version, "content_hash": digest, "new_version": created},
            reason=(reasons.VERSION_CREATED if created else reasons.VERSION_APPLIED_AGAIN).format(
                version=version
            ),
        )
    versions.remember(definition_id, version, definition)
    return Applied(definition_id, definition.name, version, created)


def _refuse_endless_waits(connection: Connection, definition: Definition) -> None:
    """Only a PUBLISHED run releases a ``wait_for`` or starts a run by ``trigger``: both ends
    must keep a publish section.

    A definition may not wait for (or be started by) one that exists without ``publish``, and
    a definition that others wait for (or are started by) may not drop its ``publish``: either
    way the downstream runs would never start. An upstream not applied yet is checked when it
    is applied.
    """
    specs = definition_store.live_specs_by_name(connection)
    found = []
    for i, wait in enumerate(definition.wait_for):
        upstream = specs.get(wait.definition)
        if isinstance(upstream, dict) and upstream.get("publish") is None:
            found.append(
                Problem(
                    f"wait_for[{i}].definition",
                    wait.line,
                    problems.WAITS_FOR_UNPUBLISHED.format(name=wait.definition),
                )
            )
    if definition.trigger is not None:
        for i, name in enumerate(definition.trigger.upstreams):
            upstream = specs.get(name)
            if isinstance(upstream, dict) and upstream.get("publish") is None:
                found.append(
                    Problem(
                        f"trigger.on_published[{i}]",
                        definition.trigger.line_of(i),
                        problems.TRIGGERED_BY_UNPUBLISHED.format(name=name),
                    )
                )
    if definition.publish is None:
        started = sorted(
            name
            for name, spec in specs.items()
            if name != definition.name and definition.name in started_by(spec)
        )
        if started:
            names = ", ".join(repr(name) for name in started)
            found.append(
                Problem("publish", None, problems.TRIGGERED_BY_THIS_PUBLICATION.format(names=names))
            )
        waiting = sorted(
            name
            for name, spec in specs.items()
            if name != definition.name and definition.name in _waited_for(spec)
        )
        if waiting:
            names = ", ".join(repr(name) for name in waiting)
            found.append(
                Problem("publish", None, problems.WAITED_FOR_UNPUBLISHED.format(names=names))
            )
    if found:
        raise DefinitionError(found)


def started_by(spec: JSONValue) -> set[str]:
    """The names a stored spec's ``trigger.on_published`` lists."""
    trigger = spec.get("trigger") if isinstance(spec, dict) else None
    listed = trigger.get("on_published") if isinstance(trigger, dict) else None
    if not isinstance(listed, list):
        return set()
    return {name for name in listed if isinstance(name, str)}


def _waited_for(spec: JSONValue) -> set[str]:
    """The names a stored spec's ``wait_for`` lists."""
    waits = spec.get("wait_for") if isinstance(spec, dict) else None
    if not isinstance(waits, list):
        return set()
    return {
        str(wait["definition"])
        for wait in waits
        if isinstance(wait, dict) and isinstance(wait.get("definition"), str)
    }


def trigger(
    ledger: Ledger,
    *,
    name: str,
    kind: TriggerKind,
    actor: str,
    key: str | None = None,
    parameters: Mapping[str, JSONValue] | None = None,
    logical_time: datetime | None = None,
    rerun_of: str | None = None,
    definition_version: int | None = None,
    data_interval: tuple[datetime | None, datetime | None] | None = None,
    upstream_run_ids: tuple[str, ...] = (),
) -> Triggered:
    """Create a run of the definition's current version (or return the one with this key).

    ``upstream_run_ids``: the PUBLISHED runs that started it (``TriggerKind.PUBLISHED``).

    Raises :class:`~veritask.definitions.parameters.InvalidParameters` for parameters the
    definition does not declare or values that do not fit their declaration.
    """
    with dialects.read_transaction(ledger.engine) as connection:
        row, version, definition = current_definition(connection, name)
        if definition_version is not None and definition_version != version:
            # A rerun of the old run's own version.
            version = definition_version
            definition = versions.read(connection, row.id, version)
        lifecycle = row.lifecycle
        if rerun_of is not None:
            # A run of a deleted definition whose name was applied again belongs to the old
            # one: it is not rerun as the new one.
            old = queries.get_run(connection, rerun_of)
            if old is not None and old.definition_id != row.id:
                found = definition_store.lifecycles_by_id(connection, [old.definition_id])
                lifecycle = found.get(old.definition_id, DefinitionLifecycle.DELETED.value)
        # A disabled definition starts nothing new, by any trigger; its active runs go on.
        if lifecycle != DefinitionLifecycle.ACTIVE:
            raise Refused(refusals.CANNOT_BE_TRIGGERED.format(name=name, lifecycle=lifecycle))
        active = run_store.active_run_ids(connection, row.id)
    # The run records what it runs with: the defaults with the given values over them.
    effective = {
        **defaults(definition.parameters),
        **check_values(definition.parameters, parameters or {}),
    }
    given = logical_time is not None
    if logical_time is None and kind in (TriggerKind.MANUAL, TriggerKind.API):
        # A run by hand happens at a moment: its templates' ``logical_date`` is that moment's.
        logical_time = ledger.clock()
    idempotency_key = _key(name, kind, key, logical_time)
    state, reason = _admission(definition, active, kind)
    # A publication is not asked for again, as a fire time or a request is: the run ``forbid``
    # refuses is recorded CANCELLED with its reason, which also answers the publication.
    if state is RunExecutionState.CANCELLED and kind is not TriggerKind.PUBLISHED:
        _refuse_overlap(ledger, idempotency_key, active, reason)
    interval = data_interval or (
        schedule.data_interval(definition.schedule, logical_time)
        if definition.schedule is not None and logical_time is not None
        else (None, None)
    )
    request = run_store.NewRun(
        definition_id=row.id,
        definition_version=version,
        idempotency_key=idempotency_key,
        trigger_kind=kind,
        tasks=[(key, task.policy) for key, task in publication.all_tasks(definition).items()],
        parameters=effective,
        execution_state=state,
        execution_reason=reason,
        publication_state=(
            PublicationState.PENDING
            if definition.publication_required
            else PublicationState.NOT_REQUIRED
        ),
        actor=actor,
        logical_time=logical_time,
        data_interval_start=interval[0],
        data_interval_end=interval[1],
        rerun_of=rerun_of,
        upstream_run_ids=upstream_run_ids,
        queued_behind=tuple(active) if state is RunExecutionState.QUEUED else (),
        logical_time_given=given and kind in (TriggerKind.MANUAL, TriggerKind.API),
    )
    run_id, created = run_store.create_run(ledger, request, new_id=new_event_id)
    if created and state is RunExecutionState.CANCELLED:
        close_unstarted(ledger, run_id, actor=actor, reason=reason)
    if not created and key is not None:
        _refuse_other_parameters(ledger, run_id, key, definition, effective)
    if created and definition.concurrency is ConcurrencyPolicy.REPLACE:
        for other in active:
            replaced = reasons.REPLACED_BY.format(run_id=run_id)
            request_run_cancel(ledger, other, actor="scheduler", reason=replaced)
    with dialects.read_transaction(ledger.engine) as connection:
        execution_state, execution_reason = run_store.execution_of(connection, run_id)
    return Triggered(run_id, created, execution_state, execution_reason)


def _refuse_other_parameters(
    ledger: Ledger,
    run_id: str,
    key: str,
    definition: Definition,
    asked: Mapping[str, JSONValue],
) -> None:
    """The same key is the same run only with the same parameters: otherwise the caller would
    believe the values it sent are running."""
    with dialects.read_transaction(ledger.engine) as connection:
        stored = run_store.parameters_of(connection, run_id)
    # A run recorded before runs kept their defaults compares as if it had.
    recorded = {**defaults(definition.parameters), **stored}
    differing = sorted(
        name
        for name in {*recorded, *asked}
        if name not in recorded
        or name not in asked
        or json.dumps(recorded[name], sort_keys=True) != json.dumps(asked[name], sort_keys=True)
    )
    if differing:
        raise KeyReused(
            refusals.KEY_REUSED.format(key=key, run_id=run_id, names=", ".join(differing))
        )


def backfill(
    ledger: Ledger, *, name: str, start: datetime, end: datetime, actor: str
) -> list[Triggered]:
    """Runs for every fire time of the schedule in ``[start, end]``, oldest first.

    Each has the key a scheduled run of that logical time would have, so a backfill never
    duplicates a scheduled run (nor a second backfill of the same range). Backfilled runs
    respect the definition's concurrency policy like any other run and wait for their
    cross-pipeline dependencies like scheduled runs do.
    """
    with dialects.read_transaction(ledger.engine) as connection:
        _, _, definition = current_definition(connection, name)
    if definition.schedule is None:
        raise Refused(refusals.NO_SCHEDULE.format(name=name))
    if end < start:
        raise Refused(refusals.END_BEFORE_START.format())
    times = schedule.fire_times(definition.schedule, after=start - _EPSILON, until=end)
    return [
        trigger(ledger, name=name, kind=TriggerKind.BACKFILL, actor=actor, logical_time=moment)
        for moment in times
    ]


_EPSILON = timedelta(microseconds=1)


def _refuse_overlap(ledger: Ledger, key: str, active: list[str], reason: str) -> None:
    """Refuse a run ``forbid`` does not admit, unless it is the one this key made already
    (asking again for an existing run is not a new run)."""
    with dialects.read_transaction(ledger.engine) as connection:
        if run_store.run_with_key(connection, key) is not None:
            return
    raise Overlap(reason, active)


def _key(name: str, kind: TriggerKind, key: str | None, logical_time: datetime | None) -> str:
    if kind in (TriggerKind.SCHEDULE, TriggerKind.BACKFILL):
        if logical_time is None:
            raise Refused(refusals.NEEDS_LOGICAL_TIME.format())
        return f"{name}@{logical_time.isoformat()}"
    if kind is TriggerKind.PUBLISHED and key:
        # Apart from a caller's keys: ``key`` is the upstream run or the logical time.
        return f"{name}@published:{key}"
    return f"{name}:{key}" if key else f"{name}:{uuid.uuid4()}"


def _admission(
    definition: Definition, active: list[str], kind: TriggerKind
) -> tuple[RunExecutionState, str]:
    """What a new run does given the runs of its definition that are still active."""
    if not active:
        return RunExecutionState.RUNNING, reasons.STARTED.format()
    others = ", ".join(active)
    if kind is TriggerKind.BACKFILL and definition.concurrency is not ConcurrencyPolicy.ALLOW:
        # A backfill asks for every interval: it waits its turn rather than being refused
        # or replacing the runs ahead of it.
        return RunExecutionState.QUEUED, reasons.BACKFILL_QUEUED.format(runs=others)
    match definition.concurrency:
        case ConcurrencyPolicy.ALLOW:
            return RunExecutionState.RUNNING, reasons.STARTED_BESIDE.format(runs=others)
        case ConcurrencyPolicy.FORBID:
            return RunExecutionState.CANCELLED, reasons.FORBIDDEN_OVERLAP.format(runs=others)
        case ConcurrencyPolicy.QUEUE:
            return RunExecutionState.QUEUED, reasons.QUEUED_BEHIND.format(runs=others)
        case ConcurrencyPolicy.REPLACE:
            return RunExecutionState.QUEUED, reasons.REPLACING.format(runs=others)


def start_queued_runs(ledger: Ledger) -> int:
    """Start the oldest QUEUED run of each definition that has no active run left."""
    started = 0
    with dialects.read_transaction(ledger.engine) as connection:
        queued = run_store.queued_runs(connection)
    seen: set[str] = set()
    for row in queued:
        if row.definition_id in seen:
            continue
        seen.add(row.definition_id)
        with ledger.engine.begin() as connection:
            if run_store.active_run_ids(connection, row.definition_id):
                continue
            # The runs it queued behind, as its creation named them, and how they ended.
            behind = run_store.creation_evidence(connection, row.id).get("queued_behind")
            ahead = [str(run_id) for run_id in behind] if isinstance(behind, list) else []
            ended = run_store.execution_states(connection, ahead)
            run_store.set_execution_state(
                connection,
                run_id=row.id,
                expected_version=row.version,
                state=RunExecutionState.RUNNING,
                reason=reasons.STARTED_AFTER_QUEUE.format(),
                previous=RunExecutionState.QUEUED,
                actor="scheduler",
                event_id=new_event_id(),
                now=ledger.clock(),
                evidence={
                    "waited_behind": {run_id: ended.get(run_id) for run_id in ahead},
                    "active_runs": [],
                },
            )
            started += 1
    return started


def request_run_cancel(
    ledger: Ledger, run_id: str, *, actor: str, reason: str
) -> RunExecutionState:
    """Move a run to CANCELLING (its instances are stopped by the scheduler); idempotent."""
    target = _request_cancel(ledger, run_id, actor=actor, reason=reason)
    if target is RunExecutionState.CANCELLED:
        close_unstarted(ledger, run_id, actor=actor, reason=reason)
    return target


def close_unstarted(ledger: Ledger, run_id: str, *, actor: str, reason: str) -> int:
    """Cancel every instance of a run that will never start (nothing runs: no engine to ask).

    A run refused by its concurrency policy, or cancelled while QUEUED, is final; no scheduler
    advances a finished run, so its CREATED instances are closed here with the reason.
    """
    with dialects.read_transaction(ledger.engine) as connection:
        briefs = run_store.instances_brief(connection, run_id)
    closed = 0
    for brief in briefs:
        if brief.state is not InstanceState.CREATED:
            continue
        loaded = ledger.snapshot(brief.id)
        if loaded is None:
            continue
        snapshot, version = loaded
        event = decide.request_stop(
            snapshot, actor=actor, reason=reason, now=ledger.clock(), event_id=new_event_id()
        )
        if event is not None:
            ledger.apply(event, expected_version=version)
            closed += 1
    return closed


def _request_cancel(ledger: Ledger, run_id: str, *, actor: str, reason: str) -> RunExecutionState:
    with ledger.engine.begin() as connection:
        version, state = run_store.run_version(connection, run_id)
        if state in (RunExecutionState.CANCELLING, RunExecutionState.CANCELLED):
            return state
        if state in (RunExecutionState.SUCCESS, RunExecutionState.FAILED):
            raise Refused(refusals.RUN_ALREADY.format(run_id=run_id, state=state))
        target = (
            RunExecutionState.CANCELLED
            if state is RunExecutionState.QUEUED
            else RunExecutionState.CANCELLING
        )
        run_store.set_execution_state(
            connection,
            run_id=run_id,
            expected_version=version,
            state=target,
            reason=reasons.RUN_CANCEL_REQUESTED.format(actor=actor, reason=reason),
            previous=state,
            actor=actor,
            event_id=new_event_id(),
            now=ledger.clock(),
            evidence={"reason": reason},
        )
    return target


def fire_schedules(ledger: Ledger, now: datetime) -> int:
    """Create the runs that the active definitions' schedules say are due."""
    fired = 0
    with dialects.read_transaction(ledger.engine) as connection:
        # Only the schedule is read for every active definition, every second: a whole spec
        # is read and parsed once per process (``versions``), and only if it has one.
        rows = definition_store.active_schedules(connection)
        scheduled = [
            (row, versions.read(connection, row.id, row.current_version))
            for row in rows
            if row.schedule
        ]
        latest = run_store.latest_logical_times(
            connection, {row.id: row.created_at for row, _ in scheduled}
        )
        skipped = backfill_store.latest_skipped_times(connection)
    for row, definition in scheduled:
        if definition.schedule is None:
            continue
        # Catch-up starts at the definition's first apply or its newest fire time, never
        # at a backfilled (or rerun) run: a backfill of an old day is not a missed past.
        known = [t for t in (latest.get(row.id), skipped.get(row.id)) if t is not None]
        last = max([row.created_at, *known])
        for logical_time in schedule.due_logical_times(
            definition.schedule, last_logical_time=last, now=now
        ):
            try:
                result = trigger(
                    ledger,
                    name=row.name,
                    kind=TriggerKind.SCHEDULE,
                    actor="scheduler",
                    logical_time=logical_time,
                )
            except Overlap as refused:
                _record_skip(ledger, row.id, logical_time, refused)
                continue
            fired += int(result.created)
    return fired


def _record_skip(
    ledger: Ledger, definition_id: str, logical_time: datetime, refused: Overlap
) -> None:
    """A scheduled fire time ``forbid`` refused: no run (its key stays free for a backfill),
    a row that keeps the schedule from firing it again, and an event on the definition."""
    now = ledger.clock()
    with ledger.engine.begin() as connection:
        first = backfill_store.record_schedule_skip(
            connection,
            definition_id=definition_id,
            logical_time=logical_time,
            active_run_id=refused.active_run_ids[0],
            now=now,
        )
        if not first:
            return
        run_store.record_subject_event(
            connection,
            subject_type=SubjectType.DEFINITION,
            subject_id=definition_id,
            kind="schedule_skipped",
            actor="scheduler",
            event_id=new_event_id(),
            now=now,
            evidence={
                "logical_time": logical_time.isoformat(),
                "active_runs": list(refused.active_run_ids),
            },
            reason=reasons.SCHEDULE_SKIPPED.format(
                logical_time=logical_time.isoformat(), runs=", ".join(refused.active_run_ids)
            ),
        )


def current_definition(
    connection: Connection, name: str
) -> tuple[definition_store.DefinitionHeading, int, Definition]:
    """The definition's row, its current version's number and the version (parsed once per
    process, ``versions``); NotFound, or Refused when it has no version yet."""
    row = definition_store.definition_heading(connection, name)
    if row is None:
        raise NotFound(refusals.NO_DEFINITION.format(name=name))
    version = row.current_version
    if version is None:
        raise Refused(refusals.HAS_NO_VERSION.format(name=name))
    return row, version, versions.read(connection, row.id, version)
