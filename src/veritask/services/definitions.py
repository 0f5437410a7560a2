"""Definitions: apply a version, read them, enable or disable them, and delete them.

Deleting is a lifecycle, not a DELETE (docs/operations.md, 'Deleting a definition'):
``deleting`` (it starts nothing new and its active runs are cancelled), ``deleted`` once the
engines confirmed every stop (history stays readable; the name may be applied again as a new
definition), ``purging`` after the retention window or at once when asked (each executor
removes its attempts' folders, logs and results), then ``purged``. Each step is a definition
event; :func:`advance_deletions` takes the next steps and is safe to call again after a crash.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Final

from veritask.core import problems, refusals
from veritask.core.jsontypes import JSONObject, JSONValue, nul_paths
from veritask.core.states import DefinitionLifecycle, RunExecutionState
from veritask.definitions import codec as definition_codec
from veritask.definitions import model as definition_model
from veritask.definitions import parse, schedule
from veritask.definitions.errors import DefinitionError
from veritask.execution import engines, port, task_env
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
_GONE = (
    DefinitionLifecycle.DELETING,
    DefinitionLifecycle.DELETED,
    DefinitionLifecycle.PURGING,
    DefinitionLifecycle.PURGED,
)
_PURGE_ASKED = "definition_purge_requested"
#: One executor removed the resources of every attempt of a purging definition it ran.
_CLEANED = "definition_resources_cleaned"
#: How long a deleted definition's attempts are kept before the purge, unless it is asked
#: for at once (``VERITASK_DELETED_RETENTION``, services/runtime.py).
DEFAULT_DELETED_RETENTION: Final = timedelta(days=7)

log = logging.getLogger(__name__)


def apply_definition(platform: Platform, text: str, *, actor: str) -> views.AppliedDefinition:
    """Validate the YAML or JSON ``text`` and save it as a version (same content, same version).

    Each task's executor must be one this platform has and that this process's environment
    configures: the schedulers are started with the same settings."""
    check = functools.partial(engines.executor_problem, environ=os.environ)
    mounts = functools.partial(engines.volume_problem, environ=os.environ)
    try:
        parsed = parse.parse_definition(text, executors=check, volumes=mounts)
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
        applied.name,
        applied.version,
        applied.created,
        DefinitionLifecycle.ACTIVE,
        _import_warnings(parsed, os.environ),
    )


def _import_warnings(
    definition: definition_model.Definition, environ: Mapping[str, str]
) -> tuple[views.ApplyWarning, ...]:
    """A warning for each ``call:`` of a local task whose module the local workers, which
    inherit this process's PYTHONPATH, would not find: the task would fail at each attempt."""
    calls: list[tuple[str, str | None]] = [
        (f"tasks.{key}.call", task.call)
        for key, task in definition.tasks.items()
        if task.call is not None and task.executor == engines.LOCAL_EXECUTOR
    ]
    if definition.publish is not None:
        calls.extend((f"publish.checks.{c.name}.call", c.call) for c in definition.publish.checks)
        calls.append(("publish.commit.call", definition.publish.commit.call))
    path = environ.get("PYTHONPATH") or "empty"
    found: list[views.ApplyWarning] = []
    for field, call in calls:
        module = (call or "").partition(":")[0]
        if module and not task_env.finds_module(module, environ):
            message = problems.MODULE_NOT_FOUND_BY_WORKERS.format(module=module, path=path)
            found.append(views.ApplyWarning(field, message))
    return tuple(found)


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
        live = stored_definitions.live_specs_by_name(connection)
    current = next(
        (version for version in versions if version.version == row.current_version), None
    )
    definition = _view(row, current.spec if current else None, platform.now())
    graph = None
    links = views.PublicationLinks(
        starts=tuple(sorted(n for n, spec in live.items() if name in triggers.started_by(spec)))
    )
    if current is not None and isinstance(current.spec, dict):
        model = parse.definition_from_json(current.spec)
        graph = views.TaskGraph.of(model)
        if model.trigger is not None:
            links = dataclasses.replace(
                links,
                started_by=model.trigger.upstreams,
                started_when=model.trigger.when.value,
            )
    return views.DefinitionDetail(
        definition,
        tuple(views.DefinitionVersion(v.version, v.content_hash, v.created_at) for v in versions),
        current.source if current else None,
        graph,
        links,
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
    """Let the definition start runs (``active``) or not (``disabled``: no schedule, trigger
    or backfill starts one; the runs already active go on)."""
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

    The definition moves to ``deleting`` (it starts nothing new) and its active runs are
    cancelled; once the engines confirmed every stop it is ``deleted`` (soft: its history
    stays readable and its name may be applied again). Its attempts are purged
    :data:`DEFAULT_DELETED_RETENTION` later, or at once with ``purge`` (the event history is
    kept either way).
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
        elif (
            purge
            and current is not DefinitionLifecycle.PURGED
            and not _purge_asked(connection, row.id)
        ):
            _record(
                connection, row.id, _PURGE_ASKED, actor, now, {"purge": True}, "purge asked for"
            )
    # Each call takes one step; those this process can take now are a few at most.
    while _settle_one(platform, row.id, actor=actor, executors=None, retention=None):
        continue
    with dialects.read_transaction(platform.engine) as connection:
        row = _definition_by_id(connection, row.id)
        return views.Deletion(
            name,
            DefinitionLifecycle(row.lifecycle),
            tuple(_active_runs(connection, row.id)),
            _purge_asked(connection, row.id),
        )


def advance_deletions(
    platform: Platform,
    *,
    executors: Mapping[str, port.Executor] | None,
    retention: timedelta | None = DEFAULT_DELETED_RETENTION,
) -> int:
    """Take the next step of every unfinished deletion; the number of steps taken.

    A deleted definition becomes ``purging`` once its purge was asked for, or ``retention``
    after its delete (None: never by itself). With ``executors`` (the scheduler process has
    them) each executor removes its attempts' resources and the definition becomes ``purged``
    once every executor that ran one of them has; an executor this process does not serve
    keeps it ``purging`` until a process that serves it passes. Without them (the API) the
    purge waits for a scheduler.
    """
    with dialects.read_transaction(platform.engine) as connection:
        ids = [
            row.id
            for row in queries.list_definitions(
                connection,
                lifecycles=[
                    DefinitionLifecycle.DELETING,
                    DefinitionLifecycle.DELETED,
                    DefinitionLifecycle.PURGING,
                ],
            )
        ]
    taken = 0
    for definition_id in ids:
        # Every step it can take now: each moves the lifecycle on, so this ends.
        while step := _settle_one(
            platform, definition_id, actor="scheduler", executors=executors, retention=retention
        ):
            taken += step
    return taken


def _settle_one(
    platform: Platform,
    definition_id: str,
    *,
    actor: str,
    executors: Mapping[str, port.Executor] | None,
    retention: timedelta | None,
) -> int:
    with dialects.read_transaction(platform.engine) as connection:
        row = _definition_by_id(connection, definition_id)
        active = _active_runs(connection, row.id)
        purge = _purge_asked(connection, row.id)
    lifecycle = DefinitionLifecycle(row.lifecycle)
    if lifecycle is DefinitionLifecycle.DELETING:
        for run_id in active:
            try:
                runs.cancel_run(
                    platform, run_id, actor=actor, reason=f"definition {row.name} is deleted"
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
    if lifecycle is DefinitionLifecycle.DELETED:
        now = platform.now()
        # ``updated_at`` is the delete's time: a deleted definition changes no more.
        due = retention is not None and now - row.updated_at >= retention
        if not (purge or due):
            return 0
        with platform.engine.begin() as connection:
            _move(
                connection,
                row,
                lifecycle,
                DefinitionLifecycle.PURGING,
                actor=actor,
                now=now,
                evidence={"why": "asked" if purge else "retention"},
            )
        return 1 + (_purge(platform, row, executors, actor=actor) if executors is not None else 0)
    if lifecycle is DefinitionLifecycle.PURGING and executors is not None:
        return _purge(platform, row, executors, actor=actor)
    return 0


def _purge(
    platform: Platform, row: DefinitionRow, executors: Mapping[str, port.Executor], *, actor: str
) -> int:
    """Each served executor that has not yet removes its attempts' resources (recorded once
    it did them all); ``purged`` when no executor is left. The steps taken."""
    with dialects.read_transaction(platform.engine) as connection:
        resources = stored_definitions.engine_resources(connection, row.id)
        cleaned = _cleaned_executors(connection, row.id)
    by_executor: dict[str, list[str]] = {}
    for engine_name, external_id in resources:
        if engine_name is not None:
            by_executor.setdefault(engine_name, []).append(external_id)
    left = 0
    steps = 0
    for engine_name, external_ids in sorted(by_executor.items()):
        if engine_name in cleaned:
            continue
        executor = executors.get(engine_name)
        if executor is None or not _cleaned_up(executor, external_ids):
            left += 1  # not served here, or an attempt could not be cleaned yet: a later pass
            continue
        with platform.engine.begin() as connection:
            _record(
                connection,
                row.id,
                _CLEANED,
                actor,
                platform.now(),
                {"executor": engine_name, "attempts": len(external_ids)},
                f"{engine_name} removed the resources of {len(external_ids)} attempts",
            )
        steps += 1
    if left:
        return steps
    with platform.engine.begin() as connection:
        _move(
            connection,
            row,
            DefinitionLifecycle.PURGING,
            DefinitionLifecycle.PURGED,
            actor=actor,
            now=platform.now(),
            evidence={
                "executors": list[JSONValue](sorted(by_executor)),
                "attempts_cleaned": len(resources),
                "history": "kept",
            },
        )
    return steps + 1


def _cleaned_up(executor: port.Executor, external_ids: list[str]) -> bool:
    """Whether the executor removed every one of these attempts' resources (it is idempotent:
    the ones it removed on an earlier pass cost nothing)."""
    failed = 0
    for external_id in external_ids:
        try:
            executor.cleanup(external_id=external_id)
        except Exception:  # an engine's error is its own: the others are cleaned all the same
            log.warning("could not clean up %s yet", external_id, exc_info=True)
            failed += 1
    return failed == 0


# -- helpers ---------------------------------------------------------------------------------


def _lifecycle_of(platform: Platform, name: str) -> str | None:
    with dialects.read_transaction(platform.engine) as connection:
        row = queries.get_definition(connection, name=name)
    return row.lifecycle if row else None


def _definition_by_id(connection: Connection, definition_id: str) -> DefinitionRow:
    row = queries.get_definition_by_id(connection, definition_id)
    if row is None:
        raise NotFound(refusals.NO_DEFINITION.format(name=definition_id))
    return row


def _cleaned_executors(connection: Connection, definition_id: str) -> set[str]:
    return {
        str(event.evidence.get("executor"))
        for event in queries.history(
            connection, subject_type=SubjectType.DEFINITION, subject_id=definition_id
        )
        if event.kind == _CLEANED
    }


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
    evidence: JSONObject,
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
