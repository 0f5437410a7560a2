"""``explain``: a run or an instance as known at an instant, beside what is known now for that
instant (docs/explain.md).

Reads the events once (``ledger.explanations``), then the pure core
(:mod:`veritask.core.explanation`) folds each column with :mod:`veritask.core.fold`.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from veritask.core import durations, explanation, refusals
from veritask.core.explanation import Axis, Cause, Change, Column, RefusedEvent, RunColumn
from veritask.core.policy import TaskPolicy
from veritask.core.states import InstanceState, PublicationState, RunExecutionState
from veritask.ledger import dialects, explanations, queries
from veritask.ledger.explanations import InstanceRecord
from veritask.services import ordering, views
from veritask.services.errors import InvalidInput, NotFound
from veritask.services.platform import Platform

#: How ``axis`` is written when both columns are shown.
BOTH = "both"


@dataclass(frozen=True)
class ExplainedInstance:
    """One instance explained: both columns (or the asked one), the late events, the events
    refused by then, and what changed afterwards."""

    id: str
    run_id: str
    task: str
    map_index: int
    as_of: datetime | None
    axis: str
    known_then: Column | None
    known_now: Column | None
    state_now: InstanceState
    late: tuple[Cause, ...]
    refused: tuple[RefusedEvent, ...]
    afterwards: tuple[Change, ...]

    @property
    def differs(self) -> bool:
        """Whether what is known now for the instant differs from what was known then."""
        then, now = self.known_then, self.known_now
        return then is not None and now is not None and then.state is not now.state


@dataclass(frozen=True)
class ExplainedRun:
    """A run explained: its execution and publication states in both columns, and each of
    its instances (in pipeline order)."""

    id: str
    definition: str
    as_of: datetime | None
    axis: str
    known_then: RunColumn | None
    known_now: RunColumn | None
    execution_state_now: RunExecutionState
    publication_state_now: PublicationState
    late: tuple[Cause, ...]
    afterwards: tuple[Change, ...]
    instances: tuple[ExplainedInstance, ...]


def moment(text: str | None, *, field: str = "as_of") -> datetime | None:
    """An RFC 3339 (ISO 8601) date and time, UTC when it has no offset; None for None."""
    if text is None:
        return None
    try:
        parsed = datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidInput.about(field, refusals.NOT_A_MOMENT.format(value=text)) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)


@functools.lru_cache(maxsize=256)
def _policy(text: str) -> TaskPolicy:
    """A run's tasks share a few policies: each stored text is parsed once."""
    return TaskPolicy.from_json(json.loads(text))


def _axes(axis: Axis | None) -> frozenset[Axis]:
    return explanation.BOTH_AXES if axis is None else frozenset({axis})


def explain_instance(
    platform: Platform, instance_id: str, *, as_of: datetime | None, axis: Axis | None = None
) -> ExplainedInstance:
    """The instance as known at ``as_of`` and as known now for it (None: the present)."""
    with dialects.read_transaction(platform.engine) as connection:
        found = explanations.instance_records(connection, instance_id=instance_id)
    if not found:
        raise NotFound(refusals.NO_INSTANCE.format(instance_id=instance_id))
    return _explained(found[0], as_of, axis)


def explain_run(
    platform: Platform, run_id: str, *, as_of: datetime | None, axis: Axis | None = None
) -> ExplainedRun:
    """The run's two states and every instance's, as known at ``as_of`` and as known now."""
    with dialects.read_transaction(platform.engine) as connection:
        run = queries.get_run(connection, run_id)
        if run is None:
            raise NotFound(refusals.NO_RUN.format(run_id=run_id))
        names = queries.definition_names(connection, [run.definition_id])
        order = ordering.version_order(connection, run.definition_id, run.definition_version)
        records = explanations.instance_records(connection, run_id=run_id)
        run_events = explanations.run_events(connection, run_id)
    publication_now = PublicationState(run.publication_state)
    start = next(
        (
            PublicationState(str(e.from_state))
            for e in run_events
            if e.from_state is not None and e.kind == "publication_changed"
        ),
        publication_now,
    )
    told = explanation.explain_run(
        run_id, run_events, publication_start=start, as_of=as_of, axes=_axes(axis)
    )
    listed = ordering.in_pipeline_order(
        records, order, task=lambda r: r.task_key, index=lambda r: r.map_index
    )
    return ExplainedRun(
        id=run_id,
        definition=names.get(run.definition_id, ""),
        as_of=as_of,
        axis=BOTH if axis is None else axis.value,
        known_then=told.known_then,
        known_now=told.known_now,
        execution_state_now=RunExecutionState(run.execution_state),
        publication_state_now=publication_now,
        late=told.late,
        afterwards=told.afterwards,
        instances=tuple(_explained(record, as_of, axis) for record in listed),
    )


def moments(platform: Platform, run_id: str) -> tuple[datetime, ...]:
    """Every instant the platform recorded an event of the run or of its instances (their
    observed times, each once, in order): the instants a time scrubber steps to."""
    with dialects.read_transaction(platform.engine) as connection:
        return tuple(explanations.observed_times(connection, run_id))


def moment_bounds(platform: Platform, run_id: str) -> tuple[int, datetime | None]:
    """How many instants :func:`moments` would give, and the last, without reading them."""
    with dialects.read_transaction(platform.engine) as connection:
        return explanations.observed_bounds(connection, run_id)


def neighbour_moments(
    platform: Platform, run_id: str, here: datetime
) -> tuple[datetime | None, datetime | None]:
    """The instant of :func:`moments` before ``here`` and the one after (None: none)."""
    with dialects.read_transaction(platform.engine) as connection:
        return explanations.observed_neighbours(connection, run_id, here)


def detail_then(detail: views.RunDetail, told: ExplainedRun) -> views.RunDetail:
    """The run's detail as it was known at ``told.as_of`` (the *known then* column): the
    run's two states and reasons, and each instance's state, reason and the attempts it had
    opened by then; an instance not created yet is left out. ``told`` must hold that column."""
    run = detail.run
    column = told.known_then
    if column is not None and column.execution_state is not None:
        run = replace(
            run,
            execution_state=column.execution_state,
            execution_reason=column.execution_reason,
            publication_state=column.publication_state or run.publication_state,
            publication_reason=column.publication_reason,
        )
    then = {i.id: i.known_then for i in told.instances}
    instances = []
    for instance in detail.instances:
        known = then.get(instance.id)
        if known is None or known.state is None or known.snapshot is None:
            continue
        opened = {a.attempt_no for a in known.snapshot.attempts}
        instances.append(
            replace(
                instance,
                state=known.state,
                reason=known.reason or "",
                epoch=known.attempt_no,
                retry_at=known.snapshot.retry_at,
                overridden=known.snapshot.override is not None,
                attempts=tuple(a for a in instance.attempts if a.attempt_no in opened),
            )
        )
    return replace(detail, run=run, instances=tuple(instances))


def phases_then(told: ExplainedInstance) -> tuple[durations.PhaseInterval, ...]:
    """The instance's phases as known then: the timeline's own computation
    (:func:`veritask.core.durations.observed_phases`) over the *known then* fold."""
    column = told.known_then
    if column is None or column.snapshot is None:
        return ()
    return tuple(durations.observed_phases(column.snapshot))


def _explained(
    record: InstanceRecord, as_of: datetime | None, axis: Axis | None
) -> ExplainedInstance:
    told = explanation.explain_instance(
        record.instance_id,
        record.recorded,
        record.refusals,
        _policy(record.policy),
        as_of=as_of,
        axes=_axes(axis),
    )
    return ExplainedInstance(
        id=record.instance_id,
        run_id=record.run_id,
        task=record.task_key,
        map_index=record.map_index,
        as_of=as_of,
        axis=BOTH if axis is None else axis.value,
        known_then=told.known_then,
        known_now=told.known_now,
        state_now=told.state_now,
        late=told.late,
        refused=told.refused,
        afterwards=told.afterwards,
    )
