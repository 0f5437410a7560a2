"""Clear and rerun: the two ways an operator runs a finished run's work again (docs/scheduling.md,
'Clear and rerun').

**Same inputs, same run.** A clear sends the instances in scope back to waiting in the same run
(scheduling/clearing.py does it, and a backfill's ``existing: failed`` clears through it too);
this module checks the request and turns the clear's refusals into the services' errors.

**Changed inputs, a new run.** A rerun goes through the one trigger path
(``scheduling.triggers.trigger``) with ``trigger_kind = rerun``, ``rerun_of`` = the old run, its
logical time and data interval, and the old parameters with the given ones merged over them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from veritask.core import reasons as phrases
from veritask.core import refusals
from veritask.core.jsontypes import JSONObject, JSONValue
from veritask.core.states import (
    RunExecutionState,
    TriggerKind,
)
from veritask.definitions.parameters import InvalidParameters, check_values, defaults
from veritask.ledger import dialects, queries, run_store
from veritask.ledger.rows import RunRow
from veritask.ledger.vocabulary import SubjectType
from veritask.scheduling import clearing, publication, triggers, versions
from veritask.scheduling.dispatch import new_event_id
from veritask.services import views
from veritask.services.errors import Conflict, FieldProblem, InvalidInput, NotFound
from veritask.services.platform import Platform

#: What ``failed: true`` clears; the clear itself is scheduling/clearing.py, which a backfill's
#: ``existing: failed`` uses too.
FAILED_TO_CLEAR = clearing.FAILED_TO_CLEAR
_ROUNDS = 5
RUN_CLEARED_KIND = clearing.RUN_CLEARED_KIND
RERUN_REQUESTED_KIND = "rerun_requested"


ClearedInstance = clearing.ClearedInstance
Cleared = clearing.Cleared
ClearPreview = clearing.ClearPreview


class RerunVersion(StrEnum):
    """Which definition version a rerun runs."""

    SAME = "same"
    """The old run's version."""
    LATEST = "latest"
    """The definition's current version."""


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
    if RunExecutionState(detail.run.execution_state) not in clearing.CLEARABLE_RUNS:
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
    the clear plans with the very same function (scheduling/clearing.py)."""
    _one_scope(failed, tasks)
    with _cleared_errors():
        return clearing.clear_scope(
            platform.ledger, run_id, failed=failed, tasks=tasks, downstream=downstream
        )


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
    _one_scope(failed, tasks)
    with _cleared_errors():
        return clearing.clear(
            platform.ledger,
            run_id,
            failed=failed,
            tasks=tasks,
            downstream=downstream,
            reason=why,
            actor=actor,
            expected=expected,
        )


def _one_scope(failed: bool, tasks: Sequence[str]) -> None:
    if failed == bool(tasks):
        raise InvalidInput.about("tasks" if tasks else "failed", refusals.CLEAR_ONE_SCOPE.format())


@contextlib.contextmanager
def _cleared_errors() -> Iterator[None]:
    """The clear's refusals as the services' errors (404, 409 with the state in the way)."""
    try:
        yield
    except triggers.NotFound as exc:
        raise NotFound(str(exc)) from None
    except clearing.ClearRefused as exc:
        raise Conflict(str(exc), current_state=exc.current_state) from None


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
        with dialects.read_transaction(platform.engine) as connection:
            own = queries.get_definition_by_id(connection, old.definition_id)
        # ``concurrency: forbid`` names the active runs it waits for: a page links them.
        active = exc.active_run_ids if isinstance(exc, triggers.Overlap) else ()
        raise Conflict(
            str(exc), current_state=own.lifecycle if own else None, run_ids=active
        ) from None
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
        # The run's own definition, by id: its name may belong to a new one by now.
        heading = queries.get_definition_by_id(connection, old.definition_id)
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
    # The check names each field already (``parameters.region``), as a trigger's refusal does.
    found = [FieldProblem(p.field, None, p.message) for p in exc.problems]
    return InvalidInput(str(exc), found)


def _derived_key(run_id: str, parameters: JSONObject, choice: RerunVersion) -> str:
    """The same request twice names the same new run (a retry after a lost answer)."""
    content = json.dumps([run_id, parameters, choice.value], sort_keys=True, default=str)
    return f"rerun-{run_id}-{hashlib.sha256(content.encode()).hexdigest()[:16]}"
