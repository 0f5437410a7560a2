"""Definitions: apply a version, read them, enable or disable the schedule, and delete them.

Deleting is a lifecycle, not a DELETE (docs/api.md): ``deleting`` (the schedule stops and the
active runs are asked to stop), then ``deleted`` once every run is terminal (history stays
readable), then, only when a purge was asked for, ``purged`` (the attempts' directories and
logs are removed by the executor). Each step is a definition event; :func:`advance_deletions`
takes the next steps and is safe to call again after a crash.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from veritask.core import refusals
from veritask.core.jsontypes import JSONObject, JSONValue, nul_paths
from veritask.core.states import DefinitionLifecycle, RunExecutionState
from veritask.definitions import codec as definition_codec
from veritask.definitions import model as definition_model
from veritask.definitions import parse, schedule
from veritask.definitions.errors import DefinitionError
from veritask.execution import port
from veritask.ledger import definitions as stored_definitions
from veritask.ledger import dialects, queries, run_store
from veritask.ledger.database import Connection
from veritask.ledger.rows import DefinitionRow
from veritask.ledger.vocabulary import SubjectType
from veritask.scheduling import triggers
from veritask.scheduling.dispatch import new_event_id
from veritask.services import reading, runs, views
from veritask.services.errors import Conflict, FieldProblem, InvalidInput, NotFound
from veritask.services.platform import Platform

#: Runs that still hold engine work: a deleting definition waits for them.
ACTIVE_RUN_STATES = (
    RunExecutionState.QUEUED,
    RunExecutionState.RUNNING,
    RunExecutionState.CANCELLING,
)
_GONE = (DefinitionLifecycle.DELETING, DefinitionLifecycle.DELETED, DefinitionLifecycle.PURGED)
_PURGE_ASKED = "definition_purge_requested"


def apply_definition(platform: Platform, text: str, *, actor: str) -> views.AppliedDefinition:
    """Validate the YAML or JSON ``text`` and save it as a version (same content, same version)."""
    try:
        parsed = parse.parse_definition(text)
        name = parsed.name
        # A YAML escape (``"\0"``) makes a NUL the request's text did not hold.
        where = next(nul_paths(definition_codec.definition_to_json(parsed), ""), None)
        if where is not None:
            raise InvalidInput.about(where.lstrip("."), refusals.NO_NUL.format())
        applied = triggers.apply_definition(platform.ledger, text, actor=actor, parsed=parsed)
    except DefinitionError as exc:
        problems = [FieldProblem(p.field, p.line, p.message) for p in exc.problems]
        raise InvalidInput(str(exc), problems) from None
    except triggers.Refused as exc:
        raise Conflict(str(exc), current_state=_lifecycle_of(platform, name)) from None
    return views.AppliedDefinition(
        applied.name, applied.version, applied.created, DefinitionLifecycle.ACTIVE
    )


def list_definitions(platform: Platform) -> list[views.Definition]:
    """Every definition by name, purged ones included (their history may still be read)."""
    now = platform.now()
    with dialects.read_transaction(platform.engine) as connection:
        rows = queries.list_definitions(connection)
        specs = stored_definitions.current_specs(connection)
    return [_view(row, specs.get(row.id), now) for row in rows]


def get_definition(platform: Platform, name: str) -> views.DefinitionDetail:
    """A definition with its versions and the source of its current version."""
    with dialects.read_transaction(platform.engine) as connection:
        row = reading.definition_named(connection, name)
        versions = stored_definitions.versions_of(connection, row.id)
    current = next(
        (version for version in versions if version.version == row.current_version), None
    )
    definition = _view(row, current.spec if current else None, platform.now())
    return views.DefinitionDetail(
        definition,
        tuple(views.DefinitionVersion(v.version, v.content_hash, v.created_at) for v in versions),
        current.source if current else None,
    )


def version_source(platform: Platform, name: str, version: int) -> str:
    """The stored source (YAML or JSON, as applied) of one version of a definition."""
    with dialects.read_transaction(platform.engine) as connection:
        row = reading.definition_named(connection, name)
        found = queries.get_definition_version(connection, definition_id=row.id, version=version)
    if found is None:
        raise NotFound(refusals.NO_VERSION.format(name=name, version=version))
    return found.source


def deletion_preview(platform: Platform, name: str) -> views.DeletionPreview:
    """What :func:`delete_definition` would do now; it changes nothing."""
    with dialects.read_transaction(platform.engine) as connection:
        row = reading.definition_named(connection, name)
        active = _active_runs(connection, row.id)
        total = stored_definitions.count_runs(connection, row.id)
        specs = stored_definitions.current_specs(connection)
    lifecycle = DefinitionLifecycle(row.lifecycle)
    view = _view(row, specs.get(row.id), platform.now())
    return views.DeletionPreview(
        name=name,
        lifecycle=lifecycle,
        stops_schedule=view.cron is not None and lifecycle is DefinitionLifecycle.ACTIVE,
        runs_to_cancel=tuple(active),
        runs_kept=int(total),
        already_deleting=lifecycle in _GONE,
    )


def set_enabled(platform: Platform, name: str, *, enabled: bool, actor: str) -> views.Definition:
    """Let the schedule fire (``active``) or not (``disabled``); manual triggers still work."""
    target = DefinitionLifecycle.ACTIVE if enabled else DefinitionLifecycle.DISABLED
    with platform.engine.begin() as connection:
        row = reading.definition_named(connection, name)
        current = DefinitionLifecycle(row.lifecycle)
        if current in _GONE:
            cannot = refusals.CANNOT_BE_ENABLED if enabled else refusals.CANNOT_BE_DISABLED
            raise Conflict(cannot.format(name=name, lifecycle=current), current_state=current)
        if current is not target:
            _move(connection, row, current, target, actor=actor, now=platform.now(), evidence={})
    return get_definition(platform, name).definition


def delete_definition(platform: Platform, name: str, *, actor: str, purge: bool) -> views.Deletion:
    """Start (or resume) the delete lifecycle; returns at once, the rest is in the background.

    The definition moves to ``deleting`` and its active runs are asked to stop; when none is
    left it becomes ``deleted`` right away. ``purge`` asks for the attempts' directories and
    logs to be removed afterwards (the event history is kept).
    """
    now = platform.now()
    with platform.engine.begin() as connection:
        row = reading.definition_named(connection, name)
        current = DefinitionLifecycle(row.lifecycle)
        if current in (DefinitionLifecycle.ACTIVE, DefinitionLifecycle.DISABLED):
            active: list[JSONValue] = list(_active_runs(connection, row.id))
            _move(
                connection,
                row,
                current,
                DefinitionLifecycle.DELETING,
                actor=actor,
                now=now,
                evidence={"purge": purge, "active_runs": active},
            )
        elif purge and not _purge_asked(connection, row.id):
            _record(
                connection, row.id, _PURGE_ASKED, actor, now, {"purge": True}, "purge asked for"
            )
    _settle_one(platform, name, actor=actor, executors=None)
    with dialects.read_transaction(platform.engine) as connection:
        row = reading.definition_named(connection, name)
        return views.Deletion(
            name,
            DefinitionLifecycle(row.lifecycle),
            tuple(_active_runs(connection, row.id)),
            _purge_asked(connection, row.id),
        )


def advance_deletions(platform: Platform, *, executors: Mapping[str, port.Executor] | None) -> int:
    """Take the next step of every unfinished deletion; the number of steps taken.

    With ``executors`` (the scheduler process has them) a deleted definition whose purge was
    asked for has its attempts cleaned up and becomes ``purged``; without them (the API) the
    purge waits for the scheduler.
    """
    with dialects.read_transaction(platform.engine) as connection:
        names = [
            row.name
            for row in queries.list_definitions(
                connection,
                lifecycles=[DefinitionLifecycle.DELETING, DefinitionLifecycle.DELETED],
            )
        ]
    return sum(
        _settle_one(platform, name, actor="scheduler", executors=executors) for name in names
    )


def _settle_one(
    platform: Platform,
    name: str,
    *,
    actor: str,
    executors: Mapping[str, port.Executor] | None,
) -> int:
    with dialects.read_transaction(platform.engine) as connection:
        row = reading.definition_named(connection, name)
        active = _active_runs(connection, row.id)
        purge = _purge_asked(connection, row.id)
    lifecycle = DefinitionLifecycle(row.lifecycle)
    if lifecycle is DefinitionLifecycle.DELETING:
        for run_id in active:
            try:
                runs.cancel_run(
                    platform, run_id, actor=actor, reason=f"definition {name} is deleted"
                )
            except Conflict:
                continue  # it finished meanwhile
        if active:
            return 0
        with platform.engine.begin() as connection:
            _move(
                connection,
                row,
                lifecycle,
                DefinitionLifecycle.DELETED,
                actor=actor,
                now=platform.now(),
                evidence={"purge": purge},
            )
        return 1
    if lifecycle is DefinitionLifecycle.DELETED and purge and executors is not None:
        cleaned, failed = _clean_attempts(platform, row.id, executors)
        if failed:
            return 0  # an attempt could not be cleaned yet: the next pass tries again
        with platform.engine.begin() as connection:
            _move(
                connection,
                row,
                lifecycle,
                DefinitionLifecycle.PURGED,
                actor=actor,
                now=platform.now(),
                evidence={"attempts_cleaned": cleaned, "history": "kept"},
            )
        return 1
    return 0


def _clean_attempts(
    platform: Platform, definition_id: str, executors: Mapping[str, port.Executor]
) -> tuple[int, int]:
    with dialects.read_transaction(platform.engine) as connection:
        resources = stored_definitions.engine_resources(connection, definition_id)
    cleaned = failed = 0
    for engine_name, external_id in resources:
        executor = executors.get(engine_name or "")
        if executor is None:
            continue  # an engine this process does not serve keeps its resources
        try:
            executor.cleanup(external_id=external_id)
        except Exception:
            failed += 1
            continue
        cleaned += 1
    return cleaned, failed


# -- helpers ---------------------------------------------------------------------------------


def _lifecycle_of(platform: Platform, name: str) -> str | None:
    with dialects.read_transaction(platform.engine) as connection:
        row = queries.get_definition(connection, name=name)
    return row.lifecycle if row else None


def _active_runs(connection: Connection, definition_id: str) -> list[str]:
    return stored_definitions.runs_in(
        connection, definition_id, [state.value for state in ACTIVE_RUN_STATES]
    )


def _purge_asked(connection: Connection, definition_id: str) -> bool:
    for event in queries.history(
        connection, subject_type=SubjectType.DEFINITION, subject_id=definition_id
    ):
        if event.kind == _PURGE_ASKED or (
            event.kind == "definition_deleting" and event.evidence.get("purge") is True
        ):
            return True
    return False


def _move(
    connection: Connection,
    row: DefinitionRow,
    current: DefinitionLifecycle,
    target: DefinitionLifecycle,
    *,
    actor: str,
    now: datetime,
    evidence: JSONObject,
) -> None:
    """Compare-and-set the lifecycle (on its current value) and record the step as an event."""
    if not stored_definitions.move_lifecycle(
        connection, row.id, current=current.value, target=target.value, now=now
    ):
        raise Conflict(
            refusals.CHANGED_MEANWHILE.format(name=row.name, lifecycle=current),
            current_state=current,
        )
    run_store.record_subject_event(
        connection,
        subject_type=SubjectType.DEFINITION,
        subject_id=row.id,
        kind=f"definition_{target.value}",
        actor=actor,
        event_id=new_event_id(),
        now=now,
        evidence={"name": row.name, **evidence},
        reason=f"{current} -> {target} by {actor}",
        from_state=current.value,
        to_state=target.value,
    )


def _record(
    connection: Connection,
    definition_id: str,
    kind: str,
    actor: str,
    now: datetime,
    evidence: dict[str, bool],
    reason: str,
) -> None:
    run_store.record_subject_event(
        connection,
        subject_type=SubjectType.DEFINITION,
        subject_id=definition_id,
        kind=kind,
        actor=actor,
        event_id=new_event_id(),
        now=now,
        evidence=dict(evidence),
        reason=reason,
    )


def _view(row: DefinitionRow, spec: object, now: datetime) -> views.Definition:
    lifecycle = DefinitionLifecycle(row.lifecycle)
    model = parse.definition_from_json(spec) if isinstance(spec, dict) else None
    words = cron = None
    structured: schedule.ScheduleWords | None = None
    next_fire: datetime | None = None
    if model is not None and model.schedule is not None:
        structured = schedule.schedule_words(model.schedule)
        words, cron = schedule.english(structured), model.schedule.cron
        if lifecycle is DefinitionLifecycle.ACTIVE:
            next_fire = schedule.next_fire_time(model.schedule, now)
    return views.Definition(
        name=row.name,
        description=model.description if model else "",
        owner=row.owner,
        lifecycle=lifecycle,
        current_version=row.current_version,
        tasks=tuple(model.tasks) if model else (),
        concurrency=(
            model.concurrency if model else definition_model.ConcurrencyPolicy.FORBID
        ).value,
        schedule=words,
        schedule_words=structured,
        cron=cron,
        next_fire_time=next_fire,
        publication_required=model.publication_required if model else False,
        # Name -> default; null for a parameter every trigger must give.
        parameters={k: p.default for k, p in model.parameters.items()} if model else {},
        created_at=row.created_at,
        updated_at=row.updated_at,
    )
