"""Backfills: every fire time of a schedule in a half-open range ``[start, end)``, as runs.

A backfill is planned at the request (each interval with what happens to it) and recorded
with its actor, reason and scope on the definition's history. Its runs are created at most
``max_active_runs`` active at a time (a FAILED run that ``existing: failed`` clears counts as
one of them): the first ones at the request, the rest by the scheduler's pass
(:func:`advance_backfills`) as earlier ones end. Each created run has the
key a scheduled run of that logical time would have, so a second identical backfill, or the
schedule, never makes a second run of an interval.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from veritask import ids
from veritask.core import reasons, refusals
from veritask.core.jsontypes import JSONObject, JSONValue
from veritask.core.states import DefinitionLifecycle, RunExecutionState, TriggerKind
from veritask.definitions import schedule
from veritask.definitions.parameters import check_values
from veritask.ledger import backfills as store
from veritask.ledger import definitions as definition_store
from veritask.ledger import dialects, queries, run_store
from veritask.ledger.ledger import Ledger
from veritask.ledger.vocabulary import SubjectType
from veritask.scheduling import clearing, triggers
from veritask.scheduling.dispatch import new_event_id

SKIP: Final = "skip"
FAILED: Final = "failed"
ALL: Final = "all"
EXISTING_CHOICES: Final = (SKIP, FAILED, ALL)

#: Run states ``existing: failed`` clears (their failed instances, with what runs after them).
CLEARABLE_RUN_STATES: Final = frozenset({RunExecutionState.FAILED, RunExecutionState.CANCELLED})
_ACTIVE_RUN_STATES: Final = frozenset(store.ACTIVE_RUN_STATES)
_EPSILON: Final = timedelta(microseconds=1)


#: A backfill holds at most this many intervals (ten years of daily runs and more).
MAX_INTERVALS: Final = 5000


class NoSchedule(triggers.Refused):
    """The definition has no schedule: there are no fire times to backfill."""


class TooManyIntervals(triggers.Refused):
    """The range holds more fire times than one backfill may."""

    def __init__(self, count: int) -> None:
        super().__init__(refusals.TOO_MANY_INTERVALS.format(count=count, limit=MAX_INTERVALS))


@dataclass(frozen=True)
class Request:
    """What a backfill asks for."""

    name: str
    start: datetime
    end: datetime
    actor: str
    parameters: Mapping[str, JSONValue]
    max_active_runs: int = 1
    existing: str = SKIP
    reason: str | None = None


@dataclass(frozen=True)
class Started:
    """A backfill asked for: its id (None for a dry run), whether the request made it, and
    its plan."""

    backfill_id: str | None
    created: bool
    definition_id: str
    intervals: tuple[store.PlannedInterval, ...]


def plan(ledger: Ledger, request: Request) -> tuple[str, JSONObject, list[store.PlannedInterval]]:
    """The definition's id, the checked parameters, and each interval with its action.

    Raises NotFound, Refused (no schedule, a range that ends before it starts) and
    InvalidParameters like a trigger does.
    """
    if request.end < request.start:
        raise triggers.Refused(refusals.END_BEFORE_START.format())
    with dialects.read_transaction(ledger.engine) as connection:
        row, _, definition = triggers.current_definition(connection, request.name)
        if row.lifecycle != DefinitionLifecycle.ACTIVE:
            raise triggers.Refused(
                refusals.CANNOT_BE_TRIGGERED.format(name=request.name, lifecycle=row.lifecycle)
            )
        if definition.schedule is None:
            raise NoSchedule(refusals.NO_SCHEDULE.format(name=request.name))
        existing_runs = store.newest_runs_between(connection, row.id, request.start, request.end)
    checked = check_values(definition.parameters, request.parameters)
    times = schedule.fire_times(
        definition.schedule, after=request.start - _EPSILON, until=request.end - _EPSILON
    )
    if len(times) > MAX_INTERVALS:
        raise TooManyIntervals(len(times))
    planned: list[store.PlannedInterval] = []
    for moment in times:
        start, end = schedule.data_interval(definition.schedule, moment)
        found = existing_runs.get(moment)  # aware datetimes: equal instants, equal keys
        action = _action(request.existing, found)
        planned.append(
            store.PlannedInterval(
                moment,
                start,
                end,
                action,
                found.id if found else None,
                found.execution_state if found else None,
            )
        )
    return row.id, checked, planned


def _action(existing: str, found: store.ExistingRun | None) -> str:
    if found is None:
        return "create"
    state = RunExecutionState(found.execution_state)
    if existing == FAILED and state in CLEARABLE_RUN_STATES:
        return "clear"
    if existing == ALL and found.execution_state not in _ACTIVE_RUN_STATES:
        return "rerun"
    return "skip"


def start_backfill(ledger: Ledger, request: Request) -> Started:
    """Record the backfill (or return the active one asked for identically) and create its
    first runs."""
    definition_id, checked, planned = plan(ledger, request)
    now = ledger.clock()
    backfill_id = ids.time_ordered_id()
    with ledger.engine.begin() as connection:
        same = store.same_active_backfill(
            connection,
            definition_id=definition_id,
            start=request.start,
            end=request.end,
            parameters=checked,
            existing=request.existing,
        )
        if same is not None:
            return Started(same, False, definition_id, tuple(planned))
        store.insert_backfill(
            connection,
            backfill_id=backfill_id,
            definition_id=definition_id,
            start=request.start,
            end=request.end,
            parameters=checked,
            max_active_runs=request.max_active_runs,
            existing=request.existing,
            actor=request.actor,
            reason=request.reason,
            now=now,
            intervals=planned,
        )
        counts = {action: sum(i.action == action for i in planned) for action in store.ACTIONS}
        run_store.record_subject_event(
            connection,
            subject_type=SubjectType.DEFINITION,
            subject_id=definition_id,
            kind="backfill_requested",
            actor=request.actor,
            event_id=new_event_id(),
            now=now,
            evidence={
                "backfill_id": backfill_id,
                "from": request.start.isoformat(),
                "to": request.end.isoformat(),
                "parameters": dict(checked),
                "existing": request.existing,
                "max_active_runs": request.max_active_runs,
                "intervals": len(planned),
                **{f"to_{action}": count for action, count in counts.items()},
            },
            reason=reasons.BACKFILL_REQUESTED.format(
                start=request.start.isoformat(),
                end=request.end.isoformat(),
                intervals=len(planned),
                reason=request.reason or "-",
            ),
        )
    row = _get(ledger, backfill_id)
    if row is not None:
        advance(ledger, request.name, row)
    return Started(backfill_id, True, definition_id, tuple(planned))


def advance_backfills(ledger: Ledger) -> int:
    """The scheduler's pass: create the next runs of every active backfill; the runs made.

    Reads only the active backfills (an index on their state); a pass with none costs one
    small query.
    """
    with dialects.read_transaction(ledger.engine) as connection:
        active = store.active_backfills(connection)
        ids = {row.definition_id for row in active}
        names = queries.definition_names(connection, ids)
        lifecycles = definition_store.lifecycles_by_id(connection, ids)
    made = 0
    for row in active:
        name = names.get(row.definition_id)
        # A disabled definition's backfill waits (its runs go on); a deleted one's never goes
        # on, even when its name belongs to a new definition by now.
        if name is not None and lifecycles.get(row.definition_id) == DefinitionLifecycle.ACTIVE:
            made += advance(ledger, name, row)
    return made


def advance(ledger: Ledger, name: str, row: store.BackfillRow) -> int:
    """Create runs for the backfill's next intervals while fewer than ``max_active_runs`` of
    its runs are active; close it once nothing is left to create and none is active."""
    with dialects.read_transaction(ledger.engine) as connection:
        active = store.active_run_count(connection, row.id)
        room = row.max_active_runs - active
        pending = store.pending_intervals(connection, row.id, max(room, 1))
    made = 0
    if room > 0:
        for interval in pending[:room]:
            run_id = _make_run(ledger, name, row, interval)
            if run_id is None:
                break  # refused for now (forbid): the next pass tries again
            with ledger.engine.begin() as connection:
                store.set_interval_run(connection, row.id, interval.logical_time, run_id)
            made += 1
    if not pending and active == 0:
        with ledger.engine.begin() as connection:
            store.finish(connection, row.id, state=store.DONE, now=ledger.clock())
    return made


def _make_run(
    ledger: Ledger, name: str, row: store.BackfillRow, interval: store.IntervalRow
) -> str | None:
    if interval.action == "clear" and interval.existing_run_id is not None:
        return _clear_run(ledger, row, interval.existing_run_id)
    if interval.action == "rerun" and interval.existing_run_id is not None:
        with dialects.read_transaction(ledger.engine) as connection:
            old = queries.get_run(connection, interval.existing_run_id)
        parameters = {**(old.parameters if old else {}), **row.parameters}
        try:
            result = triggers.trigger(
                ledger,
                name=name,
                kind=TriggerKind.RERUN,
                actor=row.actor,
                # Its own key, the same on every pass: a pass cut short does not rerun twice.
                key=f"backfill-{row.id}@{interval.logical_time.isoformat()}",
                parameters=parameters,
                logical_time=interval.logical_time,
                rerun_of=interval.existing_run_id,
            )
        except triggers.Overlap:
            return None
        return result.run_id
    result = triggers.trigger(
        ledger,
        name=name,
        kind=TriggerKind.BACKFILL,
        actor=row.actor,
        parameters=row.parameters,
        logical_time=interval.logical_time,
    )
    return result.run_id


def _clear_run(ledger: Ledger, row: store.BackfillRow, run_id: str) -> str:
    """Clear the failed instances of the interval's run (with what runs after them); the run
    stands for the interval whether or not anything was left to clear.

    The run is read again at its turn: one that has become active meanwhile, or succeeded, or
    holds nothing failed any more (someone cleared it) is left as it is.
    """
    with dialects.read_transaction(ledger.engine) as connection:
        run = queries.get_run(connection, run_id)
    if run is None or RunExecutionState(run.execution_state) not in CLEARABLE_RUN_STATES:
        return run_id
    # Refused if it moved on meanwhile (or holds nothing failed): it stands as it is.
    with contextlib.suppress(clearing.ClearRefused, triggers.NotFound):
        clearing.clear(
            ledger,
            run_id,
            failed=True,
            reason=reasons.BACKFILL_CLEARING.format(backfill_id=row.id, reason=row.reason or "-"),
            actor=row.actor,
        )
    return run_id


def cancel(ledger: Ledger, backfill_id: str, *, actor: str, reason: str) -> store.BackfillRow:
    """Stop creating runs and cancel the backfill's runs that are still queued or running.

    Raises NotFound for an unknown backfill, Refused for one that is no longer active.
    """
    row = _get(ledger, backfill_id)
    if row is None:
        raise triggers.NotFound(refusals.NO_BACKFILL.format(backfill_id=backfill_id))
    now = ledger.clock()
    with ledger.engine.begin() as connection:
        if not store.finish(connection, backfill_id, state=store.CANCELLED, now=now):
            raise triggers.Refused(
                refusals.BACKFILL_ALREADY.format(backfill_id=backfill_id, state=row.state)
            )
        run_store.record_subject_event(
            connection,
            subject_type=SubjectType.DEFINITION,
            subject_id=row.definition_id,
            kind="backfill_cancelled",
            actor=actor,
            event_id=new_event_id(),
            now=now,
            evidence={"backfill_id": backfill_id, "reason": reason},
            reason=reasons.BACKFILL_CANCELLED.format(actor=actor, reason=reason),
        )
        runs = store.owned_active_runs(connection, backfill_id)
    stopped = reasons.BACKFILL_CANCELLED.format(actor=actor, reason=reason)
    for run_id in runs:
        try:
            triggers.request_run_cancel(ledger, run_id, actor=actor, reason=stopped)
        except triggers.Refused:
            continue  # it finished meanwhile
    found = _get(ledger, backfill_id)
    assert found is not None
    return found


def _get(ledger: Ledger, backfill_id: str) -> store.BackfillRow | None:
    with dialects.read_transaction(ledger.engine) as connection:
        return store.get(connection, backfill_id)
