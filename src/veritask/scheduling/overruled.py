"""What a finished instance had already decided when late completion evidence changed it.

A terminal instance may still move on completion evidence that outranks what ended it (the
transition rule ``stronger_completion_overrules``: the worker's exit 0 after the engine's exit
record said FAILED). By then the scheduler may have acted on the old state: downstream tasks
skipped, failed upstream or run, the run ended or published.

A finished run's execution state follows its instances' final states: if the run had ended
(SUCCESS or FAILED) and its instances now imply another state, the run moves there by a
``run_state_changed`` event whose evidence names the instance, the attempt and the event
that changed it (:func:`follow_the_instances`). The decisions taken on the old state by
downstream tasks and the publication stay as they are, because undoing them is an
operator's call (a clear decides them again); one alert names each of them, so that nobody
has to notice the change by chance.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass

from veritask import ids
from veritask.core import alert_messages, reasons, run_state
from veritask.core.events import Event
from veritask.core.jsontypes import JSONObject
from veritask.core.states import InstanceState, PublicationState, RunExecutionState
from veritask.definitions import parse
from veritask.ledger import alerts, dialects, errors, queries, run_store
from veritask.ledger.ledger import Applied, Ledger
from veritask.ledger.rows import InstanceRow
from veritask.ledger.vocabulary import AlertCategory
from veritask.scheduling import run_failures, versions

log = logging.getLogger(__name__)

_ENDED_RUNS = frozenset(
    {RunExecutionState.SUCCESS, RunExecutionState.FAILED, RunExecutionState.CANCELLED}
)
#: The run states its instances alone decide, which a finished run follows.
_FOLLOWING = frozenset({RunExecutionState.SUCCESS, RunExecutionState.FAILED})
#: How often a move of the run is tried again when another writer moved it first.
_ROUNDS = 3
#: Publication states a run reaches only by acting on its execution's outcome.
_ACTED_ON = frozenset(PublicationState) - {PublicationState.NOT_REQUIRED, PublicationState.PENDING}


def changed_a_finished_instance(event: Event, applied: Applied) -> bool:
    """Whether recording ``event`` moved an instance that had already ended to another state.

    Only evidence does that unasked; a decision that moves a finished instance (an override, a
    clear, a rerun) is itself the operator's act.
    """
    before, after = applied.previous_state, applied.state
    return (
        not event.is_decision
        and before is not None
        and after is not None
        and before.is_terminal
        and after is not before
    )


@dataclass(frozen=True)
class RunFollowed:
    """A finished run moved to what its instances imply after late evidence changed one."""

    previous: RunExecutionState
    state: RunExecutionState


def follow_the_instances(ledger: Ledger, event: Event, applied: Applied) -> RunFollowed | None:
    """Move the instance's run, if it had ended, to the state its instances now imply, by a
    ``run_state_changed`` naming ``event`` (None when it had not ended or does not move).

    The run's row is locked first: a scheduler ending the run at the same moment either
    committed before (then it is moved here) or re-reads the instances after this event
    (``advance``), so the run never stays on the old state.
    """
    before, after = applied.previous_state, applied.state
    if before is None or after is None:
        return None
    for _ in range(_ROUNDS):
        try:
            return _follow(ledger, event, before, after)
        except errors.LedgerConflict:
            continue
    log.warning("run of instance %s not moved: it kept moving", event.instance_id)
    return None


def _follow(
    ledger: Ledger, event: Event, before: InstanceState, after: InstanceState
) -> RunFollowed | None:
    with ledger.engine.begin() as connection:
        instance = queries.get_instance(connection, event.instance_id)
        if instance is None:
            return None
        version, state = run_store.run_version(connection, instance.run_id, lock=True)
        if state not in _FOLLOWING:
            return None
        run = queries.get_run(connection, instance.run_id)
        if run is None:
            return None
        definition = versions.read(connection, run.definition_id, run.definition_version)
        briefs = run_store.instances_brief(connection, run.id)
        verdict = run_state.implied_by_instances(
            definition.run_graph(), [(b.task_key, b.map_index, b.state) for b in briefs]
        )
        if verdict.state is state:
            return None
        late: JSONObject = {
            "event_id": event.event_id,
            "kind": event.kind.value,
            "instance_id": event.instance_id,
            "task": _name(instance),
            "attempt_no": event.attempt_no,
            "previous_state": before.value,
            "state": after.value,
        }
        run_store.set_execution_state(
            connection,
            run_id=run.id,
            expected_version=version,
            state=verdict.state,
            reason=reasons.LATE_EVIDENCE_MOVED_RUN.format(
                reason=verdict.reason,
                event_id=event.event_id,
                task=_name(instance),
                attempt_no=event.attempt_no,
                previous=before,
                state=after,
            ),
            previous=state,
            actor="scheduler",
            event_id=ids.time_ordered_id(),
            now=ledger.clock(),
            evidence={
                **run_state.states_evidence(
                    {run_state.instance_key(b.task_key, b.map_index): b.state for b in briefs}
                ),
                "late_evidence": late,
            },
        )
    if verdict.state is RunExecutionState.FAILED:
        run_failures.alert_failed_run(
            ledger, run_id=run.id, definition=definition, reason=verdict.reason
        )
    return RunFollowed(state, verdict.state)


def alert_decisions_on_the_old_state(
    ledger: Ledger, event: Event, applied: Applied, *, followed: RunFollowed | None = None
) -> None:
    """Alert, naming them, about what was decided on the state ``event`` overruled: the
    downstream instances that left CREATED since, and the run's end or publication; or,
    when nothing else was, that the run ``followed`` its instances. Nothing is raised when
    nothing was decided on it yet (the scheduler decides on the new state)."""
    before, after = applied.previous_state, applied.state
    if before is None or after is None:
        return
    with dialects.read_transaction(ledger.engine) as connection:
        instance = queries.get_instance(connection, event.instance_id)
        run = None if instance is None else queries.get_run(connection, instance.run_id)
        if instance is None or run is None:
            return
        version = queries.get_definition_version(
            connection, definition_id=run.definition_id, version=run.definition_version
        )
        rows = queries.instances_of_run(connection, run.id)
    below = set() if version is None else _below(version.spec, instance.task_key)
    decided = [row for row in rows if row.task_key in below and _decided(row)]
    execution = RunExecutionState(run.execution_state)
    publication = PublicationState(run.publication_state)
    parts = [
        alert_messages.DOWNSTREAM_DECIDED.format(task=_name(row), state=row.state)
        for row in decided
    ]
    if execution in _ENDED_RUNS and followed is None:
        parts.append(alert_messages.RUN_ENDED_ON.format(state=execution))
    if publication in _ACTED_ON:
        parts.append(alert_messages.PUBLICATION_ON.format(state=publication))
    if not parts and followed is None:
        return
    evidence: JSONObject = {
        "event_id": event.event_id,
        "kind": event.kind.value,
        "previous_state": before.value,
        "state": after.value,
        "downstream": {row.id: {"task": _name(row), "state": row.state} for row in decided},
        "execution_state": execution.value,
        "publication_state": publication.value,
    }
    if followed is not None:
        evidence["run_followed"] = {
            "previous_state": followed.previous.value,
            "state": followed.state.value,
        }
    message = alert_messages.DECIDED_ON_THE_OLD_STATE.format(
        attempt_no=event.attempt_no, previous=before, state=after, decided="; ".join(parts)
    )
    if not parts and followed is not None:
        message = alert_messages.RUN_FOLLOWED.format(
            attempt_no=event.attempt_no,
            previous=before,
            state=after,
            run_previous=followed.previous,
            run_state=followed.state,
        )
    alerts.raise_quietly(
        ledger,
        category=AlertCategory.RECONCILIATION,
        dedup_key=f"overruled:{event.instance_id}:{event.event_id}",
        message=message,
        run_id=run.id,
        instance_id=event.instance_id,
        attempt_no=event.attempt_no or None,
        evidence=evidence,
    )


def _below(spec: JSONObject, task: str) -> set[str]:
    """Every task downstream of ``task``, however far (none for a publication step)."""
    graph = parse.definition_from_json(spec).run_graph()
    if task not in graph.keys:
        return set()
    reached: set[str] = set()
    queue = deque([task])
    while queue:
        for key in graph.downstream(queue.popleft()):
            if key not in reached:
                reached.add(key)
                queue.append(key)
    return reached


def _decided(row: InstanceRow) -> bool:
    """Whether the scheduler took a decision on this instance: anything but still waiting."""
    return InstanceState(row.state) not in (InstanceState.CREATED, InstanceState.REMOVED)


def _name(row: InstanceRow) -> str:
    return row.task_key if row.map_index < 0 else f"{row.task_key}[{row.map_index}]"
