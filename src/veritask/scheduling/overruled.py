"""What a finished instance had already decided when late completion evidence changed it.

A terminal instance may still move on completion evidence that outranks what ended it (the
transition rule ``stronger_completion_overrules``: the worker's exit 0 after the engine's exit
record said FAILED). By then the scheduler may have acted on the old state: downstream tasks
skipped, failed upstream or run, the run ended or published. Those decisions stay as they are,
because undoing them is an operator's call (a clear decides them again); this raises one alert
naming each of them, so that nobody has to notice the change by chance.
"""

from __future__ import annotations

from collections import deque

from veritask.core import alert_messages
from veritask.core.events import Event
from veritask.core.jsontypes import JSONObject
from veritask.core.states import InstanceState, PublicationState, RunExecutionState
from veritask.definitions import parse
from veritask.ledger import alerts, dialects, queries
from veritask.ledger.ledger import Applied, Ledger
from veritask.ledger.rows import InstanceRow
from veritask.ledger.vocabulary import AlertCategory

_ENDED_RUNS = frozenset(
    {RunExecutionState.SUCCESS, RunExecutionState.FAILED, RunExecutionState.CANCELLED}
)
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


def alert_decisions_on_the_old_state(ledger: Ledger, event: Event, applied: Applied) -> None:
    """Alert, naming them, about what was decided on the state ``event`` overruled: the
    downstream instances that left CREATED since, and the run's end or publication. Nothing
    is raised when nothing was decided on it yet (the scheduler decides on the new state)."""
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
    if execution in _ENDED_RUNS:
        parts.append(alert_messages.RUN_ENDED_ON.format(state=execution))
    if publication in _ACTED_ON:
        parts.append(alert_messages.PUBLICATION_ON.format(state=publication))
    if not parts:
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
    alerts.raise_quietly(
        ledger,
        category=AlertCategory.RECONCILIATION,
        dedup_key=f"overruled:{event.instance_id}:{event.event_id}",
        message=alert_messages.DECIDED_ON_THE_OLD_STATE.format(
            attempt_no=event.attempt_no,
            previous=before,
            state=after,
            decided="; ".join(parts),
        ),
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
