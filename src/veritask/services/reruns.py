"""Clear and rerun: the two ways an operator runs a finished run's work again (docs/scheduling.md,
'Clear and rerun').

**Same inputs, same run.** A clear sends the instances in scope back to waiting in the same run
(scheduling/clearing.py does it: a backfill's ``existing: failed`` clears through it too); this
module checks the request and turns the refusals into the services' errors.

**Changed inputs, a new run.** A rerun goes through the one trigger path
(``scheduling.triggers.trigger``) with ``trigger_kind = rerun``, ``rerun_of`` = the old run, its
logical time and data interval, and the old parameters with the given ones merged over them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from veritask.core import reasons as phrases
from veritask.core import refusals
from veritask.core.jsontypes import JSONObject, JSONValue
from veritask.core.states import RunExecutionState, TriggerKind
from veritask.definitions.parameters import InvalidParameters
from veritask.ledger import dialects, queries, run_store
from veritask.ledger.vocabulary import SubjectType
from veritask.scheduling import clearing, triggers
from veritask.scheduling.dispatch import new_event_id
from veritask.services.errors import Conflict, FieldProblem, InvalidInput, NotFound
from veritask.services.platform import Platform

#: What ``failed: true`` clears (the clear itself is scheduling/clearing.py).
FAILED_TO_CLEAR = clearing.FAILED_TO_CLEAR
RUN_CLEARED_KIND = clearing.RUN_CLEARED_KIND
ClearedInstance = clearing.ClearedInstance
Cleared = clearing.Cleared
RERUN_REQUESTED_KIND = "rerun_requested"


class RerunVersion(StrEnum):
    """Which definition version a rerun runs."""

    SAME = "same"
    """The old run's version."""
    LATEST = "latest"
    """The definition's current version."""


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


# -- clear --------------------------------------------------------------------------------------


def clear(
    platform: Platform,
    run_id: str,
    *,
    failed: bool = False,
    tasks: Sequence[str] = (),
    downstream: bool = True,
    reason: str,
    actor: str,
) -> Cleared:
    """Send the instances in scope back to waiting (see the module docstring)."""
    why = reason.strip()
    if not why:
        raise InvalidInput.about("reason", refusals.CLEAR_NEEDS_REASON.format())
    if failed == bool(tasks):
        raise InvalidInput.about("tasks" if tasks else "failed", refusals.CLEAR_ONE_SCOPE.format())
    try:
        return clearing.clear(
            platform.ledger,
            run_id,
            failed=failed,
            tasks=tasks,
            downstream=downstream,
            reason=why,
            actor=actor,
        )
    except triggers.NotFound as exc:
        raise NotFound(str(exc)) from None
    except clearing.ClearRefused as exc:
        raise Conflict(str(exc), current_state=exc.current_state) from None


# -- rerun --------------------------------------------------------------------------------------


def rerun(
    platform: Platform,
    run_id: str,
    *,
    parameters: Mapping[str, JSONValue] | None = None,
    version: str = RerunVersion.SAME.value,
    key: str | None = None,
    reason: str | None = None,
    actor: str,
) -> Rerun:
    """A new run of the old run's inputs, with ``parameters`` merged over its parameters."""
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
    if name is None:
        raise NotFound(refusals.VERSION_GONE.format(run_id=run_id))
    merged: JSONObject = {**old.parameters, **(parameters or {})}
    why = (reason or "").strip() or phrases.RERUN_REQUESTED.format(
        run_id=run_id, actor=actor, why="-"
    )
    chosen = old.definition_version if choice is RerunVersion.SAME else None
    idempotency = key or _derived_key(run_id, merged, choice)
    try:
        result = triggers.trigger(
            platform.ledger,
            name=name,
            kind=TriggerKind.RERUN,
            actor=actor,
            key=idempotency,
            parameters=merged,
            logical_time=old.logical_time,
            rerun_of=run_id,
            definition_version=chosen,
            data_interval=(old.data_interval_start, old.data_interval_end),
        )
    except triggers.NotFound as exc:
        raise NotFound(str(exc)) from None
    except InvalidParameters as exc:
        found = [FieldProblem(f"parameters.{p.field}", None, p.message) for p in exc.problems]
        raise InvalidInput(str(exc), found) from None
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


def _derived_key(run_id: str, parameters: JSONObject, choice: RerunVersion) -> str:
    """The same request twice names the same new run (a retry after a lost answer)."""
    content = json.dumps([run_id, parameters, choice.value], sort_keys=True, default=str)
    return f"rerun-{run_id}-{hashlib.sha256(content.encode()).hexdigest()[:16]}"
