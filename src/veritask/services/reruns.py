"""Clear and rerun: the two ways an operator runs a finished run's work again (docs/scheduling.md,
'Clear and rerun').

**Same inputs, same run.** A clear records a ``cleared`` decision on each instance in scope: the
instance enters a new epoch with no attempt and waits; its trigger rule decides it again and the
scheduler opens the next attempt number as a rerun (counters reset). Earlier attempts keep their
records. The run goes back to RUNNING through a run-level event that carries the actor, the
reason and the scope. A scope holding an active instance is refused, naming it, and nothing is
recorded. A run whose publication had moved on (PUBLISHED, CHECK_FAILED, PUBLISH_FAILED) goes
back to PENDING and its publication steps are cleared too: what it published is redone once
execution succeeds again, so the run never claims a publication of output it is rewriting.

**Changed inputs, a new run.** A rerun goes through the one trigger path
(``scheduling.triggers.trigger``) with ``trigger_kind = rerun``, ``rerun_of`` = the old run, its
logical time and data interval, and the old parameters with the given ones merged over them.
"""

from __future__ import annotations

import hashlib
import json
from collections import deque
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from veritask.core import judge, new_events, refusals, run_state
from veritask.core import reasons as phrases
from veritask.core.events import ClearScope, Event
from veritask.core.fold import InstanceSnapshot
from veritask.core.jsontypes import JSONObject, JSONValue
from veritask.core.states import (
    InstanceState,
    PublicationState,
    RunExecutionState,
    TriggerKind,
)
from veritask.definitions import parse
from veritask.definitions.parameters import InvalidParameters, check_values, defaults
from veritask.ledger import definitions as definition_store
from veritask.ledger import dialects, errors, queries, run_store
from veritask.ledger.ledger import StaleDecision
from veritask.ledger.rows import RunRow
from veritask.ledger.vocabulary import SubjectType
from veritask.scheduling import publication, triggers, versions
from veritask.scheduling.dispatch import new_event_id
from veritask.services import views
from veritask.services.errors import Conflict, FieldProblem, InvalidInput, NotFound
from veritask.services.platform import Platform

#: What ``failed: true`` clears: every way an instance can end without success.
FAILED_TO_CLEAR = frozenset(
    {
        InstanceState.FAILED,
        InstanceState.UPSTREAM_FAILED,
        InstanceState.TIMEOUT,
        InstanceState.START_FAILED,
        InstanceState.CANCELLED,
        InstanceState.CANCEL_FAILED,
    }
)
_CLEARABLE_RUNS = frozenset(
    {
        RunExecutionState.RUNNING,
        RunExecutionState.SUCCESS,
        RunExecutionState.FAILED,
        RunExecutionState.CANCELLED,
    }
)
_MOVED_PUBLICATION = frozenset(
    {PublicationState.PUBLISHED, PublicationState.CHECK_FAILED, PublicationState.PUBLISH_FAILED}
)
_ROUNDS = 5
RUN_CLEARED_KIND = "run_cleared"
RERUN_REQUESTED_KIND = "rerun_requested"
#: Who a preview's decisions name: they are judged as a clear's would be, never recorded.
_PREVIEW_ACTOR = "operator:preview"


class RerunVersion(StrEnum):
    """Which definition version a rerun runs."""

    SAME = "same"
    """The old run's version."""
    LATEST = "latest"
    """The definition's current version."""


@dataclass(frozen=True)
class ClearedInstance:
    """One instance a clear sent back to waiting, and the attempt number it opens next."""

    instance_id: str
    task: str
    previous_state: InstanceState
    next_attempt: int


@dataclass(frozen=True)
class Cleared:
    """What a clear recorded."""

    run_id: str
    scope: str
    downstream: bool
    reason: str
    instances: tuple[ClearedInstance, ...]
    execution_state: RunExecutionState
    publication_state: PublicationState


@dataclass(frozen=True)
class ClearPreview:
    """What a clear would send back to waiting now (:func:`clear_scope`); nothing recorded."""

    run_id: str
    scope: str
    downstream: bool
    instances: tuple[ClearedInstance, ...]


@dataclass(frozen=True)
class RerunPreview:
    """What a rerun would start now (:func:`rerun_preview`); nothing created."""

    run_id: str
    definition: str
    version: str
    """``same`` or ``latest``, as asked."""
    definition_version: int
    """The version number that choice names now."""
    parameters: JSONObject
    """What the new run records: the definition's defaults, the old run's values, the given
    values over them."""


@dataclass(frozen=True)
class Rerun:
    """The new run a rerun created (or the one its key already named)."""

    run_id: str
    created: bool
    rerun_of: str
    idempotency_key: str
    definition_version: int
    parameters: JSONObject
    execution_state: RunExecutionState
    reason: str


@dataclass(frozen=True)
class ClearChoices:
    """Which clears a run's page offers: the run's state allows one, it has failed instances
    (*Clear failed*), and which tasks a person may clear one by one (finished, not a
    publication step)."""

    allowed: bool
    failed: bool
    tasks: frozenset[str]


# -- clear --------------------------------------------------------------------------------------


def clear_choices(detail: views.RunDetail) -> ClearChoices:
    """What a page offers to clear (the clear itself decides again, see :func:`clear`)."""
    if RunExecutionState(detail.run.execution_state) not in _CLEARABLE_RUNS:
        return ClearChoices(False, False, frozenset())
    tasks = frozenset(
        i.task
        for i in detail.instances
        if i.state.is_terminal and not publication.is_publication_key(i.task)
    )
    failed = any(i.state in FAILED_TO_CLEAR for i in detail.instances)
    return ClearChoices(True, failed, tasks)


def clear_scope(
    platform: Platform,
    run_id: str,
    *,
    failed: bool = False,
    tasks: Sequence[str] = (),
    downstream: bool = True,
) -> ClearPreview:
    """What :func:`clear` would send back to waiting now, recording nothing: the same checks,
    the same refusals (404, 409 naming an active instance) and the same instances, because
    :func:`clear` plans with the very same function."""
    run, graph, ids, scope = _checked_scope(platform, run_id, failed, tasks)
    # The decisions are built and judged as the clear would, then dropped: never applied.
    planned = _planned(
        platform, run, graph, ids, failed, tasks, downstream, _PREVIEW_ACTOR, "preview", scope
    )
    return ClearPreview(run_id, scope.value, downstream, tuple(item for _, _, item in planned))


def clear(
    platform: Platform,
    run_id: str,
    *,
    failed: bool = False,
    tasks: Sequence[str] = (),
    downstream: bool = True,
    reason: str,
    actor: str,
    expected: Collection[str] | None = None,
) -> Cleared:
    """Send the instances in scope back to waiting (see the module docstring).

    ``expected`` (instance ids, as :func:`clear_scope` listed them) refuses the clear (409)
    when the scope is no longer those instances: a person confirms what they were shown."""
    why = reason.strip()
    if not why:
        raise InvalidInput.about("reason", refusals.CLEAR_NEEDS_REASON.format())
    run, graph, ids, scope = _checked_scope(platform, run_id, failed, tasks)
    for _ in range(_ROUNDS):
        events = _planned(platform, run, graph, ids, failed, tasks, downstream, actor, why, scope)
        if expected is not None and {i.instance_id for _, _, i in events} != set(expected):
            names = ", ".join(item.task for _, _, item in events) or "-"
            raise Conflict(refusals.CLEAR_SCOPE_CHANGED.format(tasks=names))
        try:
            for event, version, _ in events:
                platform.ledger.apply(event, expected_version=version)
        except StaleDecision:
            continue  # one moved meanwhile: judge them all again on what is there now
        break
    else:
        raise Conflict(refusals.KEPT_CHANGING.format(instance_id=run_id))
    cleared = tuple(item for _, _, item in events)
    execution, published = _reopen_run(platform, run_id, actor, why, scope, downstream, cleared)
    return Cleared(run_id, scope.value, downstream, why, cleared, execution, published)


def _checked_scope(
    platform: Platform, run_id: str, failed: bool, tasks: Sequence[str]
) -> tuple[RunRow, run_state.RunGraph, dict[str, str], ClearScope]:
    """The run, its graph and instance ids, once the request names one scope of a clearable
    run; 422, 404 or 409 otherwise."""
    if failed == bool(tasks):
        raise InvalidInput.about("tasks" if tasks else "failed", refusals.CLEAR_ONE_SCOPE.format())
    run, graph, ids = _run_graph(platform, run_id)
    for task in tasks:
        if task not in ids or task not in graph.keys:
            raise NotFound(refusals.NO_TASK_IN_RUN.format(run_id=run_id, task=task))
    state = RunExecutionState(run.execution_state)
    if state not in _CLEARABLE_RUNS:
        raise Conflict(
            refusals.CLEAR_RUN_STATE.format(run_id=run_id, state=state), current_state=state.value
        )
    return run, graph, ids, ClearScope.FAILED if failed else ClearScope.TASKS


def _planned(
    platform: Platform,
    run: RunRow,
    graph: run_state.RunGraph,
    ids: dict[str, str],
    failed: bool,
    tasks: Sequence[str],
    downstream: bool,
    actor: str,
    why: str,
    scope: ClearScope,
) -> list[tuple[Event, int, ClearedInstance]]:
    """The ``cleared`` decisions of the scope as it stands now (the preview's and the act's)."""
    targets = _targets(platform, run, graph, ids, failed, tasks, downstream)
    if failed and not any(origin for _, _, origin in targets):
        state = run.execution_state
        raise Conflict(refusals.NOTHING_FAILED.format(run_id=run.id), current_state=state)
    return _clearing_events(platform, targets, actor, why, scope)


def _run_graph(
    platform: Platform, run_id: str
) -> tuple[RunRow, run_state.RunGraph, dict[str, str]]:
    with dialects.read_transaction(platform.engine) as connection:
        run = queries.get_run(connection, run_id)
        if run is None:
            raise NotFound(refusals.NO_RUN.format(run_id=run_id))
        version = queries.get_definition_version(
            connection, definition_id=run.definition_id, version=run.definition_version
        )
        if version is None:
            raise NotFound(refusals.VERSION_GONE.format(run_id=run_id))
        ids = {row.task_key: row.id for row in queries.instances_of_run(connection, run_id)}
    graph = parse.definition_from_json(version.spec).run_graph()
    return run, graph, ids


def _targets(
    platform: Platform,
    run: RunRow,
    graph: run_state.RunGraph,
    ids: dict[str, str],
    failed: bool,
    tasks: Sequence[str],
    downstream: bool,
) -> list[tuple[str, InstanceSnapshot, bool]]:
    """(task, snapshot, named by the request) for every instance in scope, in graph order."""
    snapshots: dict[str, InstanceSnapshot] = {}
    for key, instance_id in ids.items():
        loaded = platform.ledger.snapshot(instance_id)
        if loaded is not None:
            snapshots[key] = loaded[0]
    if failed:
        origins = [
            key
            for key in graph.keys
            if key in snapshots and snapshots[key].state in FAILED_TO_CLEAR
        ]
    else:
        origins = list(dict.fromkeys(tasks))
    reached = set(origins)
    if downstream:
        queue = deque(origins)
        while queue:
            for below in graph.downstream(queue.popleft()):
                if below not in reached:
                    reached.add(below)
                    queue.append(below)
    if PublicationState(run.publication_state) in _MOVED_PUBLICATION:
        reached.update(key for key in ids if publication.is_publication_key(key))
    ordered = [key for key in (*graph.keys, *sorted(ids)) if key in reached and key in snapshots]
    named = set(origins)
    return [(key, snapshots[key], key in named) for key in dict.fromkeys(ordered)]


def _clearing_events(
    platform: Platform,
    targets: list[tuple[str, InstanceSnapshot, bool]],
    actor: str,
    why: str,
    scope: ClearScope,
) -> list[tuple[Event, int, ClearedInstance]]:
    """The ``cleared`` decision of each finished target; 409 naming any active one.

    Instances still waiting (CREATED) are already where a clear would put them.
    """
    events: list[tuple[Event, int, ClearedInstance]] = []
    for task, snapshot, named in targets:
        if snapshot.state is InstanceState.CREATED:
            continue
        if not snapshot.state.is_terminal:
            raise Conflict(
                refusals.CLEAR_ACTIVE.format(
                    task=task, instance_id=snapshot.instance_id, state=snapshot.state
                ),
                current_state=snapshot.state.value,
            )
        loaded = platform.ledger.snapshot(snapshot.instance_id)
        policy = platform.ledger.policy_of(snapshot.instance_id)
        if loaded is None or policy is None:
            raise NotFound(refusals.NO_INSTANCE.format(instance_id=snapshot.instance_id))
        current, version = loaded
        event = new_events.cleared(
            event_id=new_event_id(),
            instance_id=snapshot.instance_id,
            attempt_no=current.epoch + 1,
            event_time=platform.now(),
            operator=actor,
            reason=why,
            scope=scope if named else ClearScope.DOWNSTREAM,
        )
        verdict = judge.judge(current, event, policy)
        if verdict.outcome is judge.Outcome.REJECTED:
            raise Conflict(
                refusals.CLEAR_ACTIVE.format(
                    task=task, instance_id=snapshot.instance_id, state=current.state
                ),
                current_state=current.state.value,
            )
        item = ClearedInstance(snapshot.instance_id, task, current.state, current.epoch + 1)
        events.append((event, version, item))
    return events


def _reopen_run(
    platform: Platform,
    run_id: str,
    actor: str,
    why: str,
    scope: ClearScope,
    downstream: bool,
    cleared: tuple[ClearedInstance, ...],
) -> tuple[RunExecutionState, PublicationState]:
    """Record the clear on the run and move it back to RUNNING (and PENDING, see above)."""
    evidence: JSONObject = {
        "reason": why,
        "scope": scope.value,
        "downstream": downstream,
        "operator": actor,
        "instances": {item.task: item.instance_id for item in cleared},
    }
    names = ", ".join(item.task for item in cleared) or "-"
    for _ in range(_ROUNDS):
        with dialects.read_transaction(platform.engine) as connection:
            run = queries.get_run(connection, run_id)
        if run is None:
            raise NotFound(refusals.NO_RUN.format(run_id=run_id))
        execution = RunExecutionState(run.execution_state)
        published = PublicationState(run.publication_state)
        now = platform.now()
        try:
            with platform.engine.begin() as connection:
                version = run.version
                moved = cleared and execution is not RunExecutionState.RUNNING
                if moved:
                    version = run_store.set_execution_state(
                        connection,
                        run_id=run_id,
                        expected_version=version,
                        state=RunExecutionState.RUNNING,
                        reason=phrases.RUN_CLEARED.format(actor=actor, why=why, tasks=names),
                        previous=execution,
                        actor=actor,
                        event_id=new_event_id(),
                        now=now,
                        evidence=evidence,
                    )
                    execution = RunExecutionState.RUNNING
                if published in _MOVED_PUBLICATION:
                    run_store.set_publication_state(
                        connection,
                        run_id=run_id,
                        expected_version=version,
                        state=PublicationState.PENDING,
                        reason=phrases.PUBLICATION_CLEARED.format(actor=actor, why=why),
                        previous=published,
                        actor=actor,
                        event_id=new_event_id(),
                        now=now,
                        evidence=evidence,
                    )
                    published = PublicationState.PENDING
                if not moved:  # the move's own event carries the clear otherwise
                    run_store.record_subject_event(
                        connection,
                        subject_type=SubjectType.RUN,
                        subject_id=run_id,
                        run_id=run_id,
                        kind=RUN_CLEARED_KIND,
                        actor=actor,
                        event_id=new_event_id(),
                        now=now,
                        evidence=evidence,
                        reason=phrases.RUN_CLEARED.format(actor=actor, why=why, tasks=names),
                    )
        except errors.LedgerConflict:
            continue  # the scheduler moved the run meanwhile: read it again
        return execution, published
    raise Conflict(refusals.KEPT_CHANGING.format(instance_id=run_id))


# -- rerun --------------------------------------------------------------------------------------


def rerun_preview(
    platform: Platform,
    run_id: str,
    *,
    parameters: Mapping[str, JSONValue] | None = None,
    version: str = RerunVersion.SAME.value,
) -> RerunPreview:
    """What :func:`rerun` would start now, creating nothing: the version it runs and the
    parameters the new run records; the same refusals (404, 422 naming a parameter)."""
    plan, _ = _rerun_plan(platform, run_id, parameters, version)
    return plan


def rerun(
    platform: Platform,
    run_id: str,
    *,
    parameters: Mapping[str, JSONValue] | None = None,
    version: str = RerunVersion.SAME.value,
    key: str | None = None,
    reason: str | None = None,
    actor: str,
    expected_version: int | None = None,
) -> Rerun:
    """A new run of the old run's inputs, with ``parameters`` merged over its parameters.

    ``expected_version`` (the number :func:`rerun_preview` showed) refuses the rerun (409)
    when the version it would run is another one by now."""
    plan, old = _rerun_plan(platform, run_id, parameters, version)
    if expected_version is not None and plan.definition_version != expected_version:
        raise Conflict(
            refusals.RERUN_VERSION_MOVED.format(
                name=plan.definition, version=plan.definition_version, shown=expected_version
            )
        )
    choice = RerunVersion(plan.version)
    merged: JSONObject = {**old.parameters, **(parameters or {})}
    why = (reason or "").strip() or phrases.RERUN_REQUESTED.format(
        run_id=run_id, actor=actor, why="-"
    )
    idempotency = key or _derived_key(run_id, merged, choice)
    try:
        result = triggers.trigger(
            platform.ledger,
            name=plan.definition,
            kind=TriggerKind.RERUN,
            actor=actor,
            key=idempotency,
            parameters=merged,
            logical_time=old.logical_time,
            rerun_of=run_id,
            definition_version=plan.definition_version,
            data_interval=(old.data_interval_start, old.data_interval_end),
        )
    except triggers.NotFound as exc:
        raise NotFound(str(exc)) from None
    except InvalidParameters as exc:
        raise _invalid_parameters(exc) from None
    except triggers.Refused as exc:
        raise Conflict(str(exc)) from None
    with dialects.read_transaction(platform.engine) as connection:
        new = queries.get_run(connection, result.run_id)
    if new is None:
        raise NotFound(refusals.NO_RUN.format(run_id=result.run_id))
    if result.created:
        with platform.engine.begin() as connection:
            run_store.record_subject_event(
                connection,
                subject_type=SubjectType.RUN,
                subject_id=new.id,
                run_id=new.id,
                kind=RERUN_REQUESTED_KIND,
                actor=actor,
                event_id=new_event_id(),
                now=platform.now(),
                evidence={
                    "reason": why,
                    "scope": "run",
                    "operator": actor,
                    "rerun_of": run_id,
                    "version": choice.value,
                    "parameters": dict(parameters or {}),
                },
                reason=phrases.RERUN_REQUESTED.format(run_id=run_id, actor=actor, why=why),
            )
    return Rerun(
        new.id,
        result.created,
        run_id,
        new.idempotency_key,
        new.definition_version,
        new.parameters,
        result.execution_state,
        result.reason,
    )


def _rerun_plan(
    platform: Platform,
    run_id: str,
    parameters: Mapping[str, JSONValue] | None,
    version: str,
) -> tuple[RerunPreview, RunRow]:
    """The version a rerun runs and the parameters it records, checked as the trigger will."""
    try:
        choice = RerunVersion(version)
    except ValueError:
        raise InvalidInput.about(
            "version", refusals.RERUN_VERSION.format(version=version)
        ) from None
    with dialects.read_transaction(platform.engine) as connection:
        old = queries.get_run(connection, run_id)
        if old is None:
            raise NotFound(refusals.NO_RUN.format(run_id=run_id))
        name = queries.definition_names(connection, [old.definition_id]).get(old.definition_id)
        heading = None if name is None else definition_store.definition_heading(connection, name)
        if name is None or heading is None:
            raise NotFound(refusals.VERSION_GONE.format(run_id=run_id))
        number = old.definition_version
        if choice is RerunVersion.LATEST and heading.current_version is not None:
            number = heading.current_version
        definition = versions.read(connection, old.definition_id, number)
    merged: JSONObject = {**old.parameters, **(parameters or {})}
    try:
        effective: JSONObject = {
            **defaults(definition.parameters),
            **check_values(definition.parameters, merged),
        }
    except InvalidParameters as exc:
        raise _invalid_parameters(exc) from None
    return RerunPreview(run_id, name, choice.value, number, effective), old


def _invalid_parameters(exc: InvalidParameters) -> InvalidInput:
    found = [FieldProblem(f"parameters.{p.field}", None, p.message) for p in exc.problems]
    return InvalidInput(str(exc), found)


def _derived_key(run_id: str, parameters: JSONObject, choice: RerunVersion) -> str:
    """The same request twice names the same new run (a retry after a lost answer)."""
    content = json.dumps([run_id, parameters, choice.value], sort_keys=True, default=str)
    return f"rerun-{run_id}-{hashlib.sha256(content.encode()).hexdigest()[:16]}"
