"""Clearing a run: the same inputs, the same run, a new attempt of what is cleared.

A clear records a ``cleared`` decision on each instance in scope: the instance enters a new
epoch with no attempt and waits; its trigger rule decides it again and the scheduler opens the
next attempt number as a rerun (counters reset). Earlier attempts keep their records. The run
goes back to RUNNING through a run-level event that carries the actor, the reason and the
scope. A scope holding an active instance is refused, naming it, and nothing is recorded.
Every ``cleared`` decision and the run's move are one transaction, each decision against the
version it was judged on: an instance or the run that moves meanwhile records none of them, and
the whole scope is judged again (409 after a few rounds). A run whose publication had moved on
(PUBLISHED, CHECK_FAILED, PUBLISH_FAILED) goes back to PENDING and its publication steps are
cleared too: what it published is redone once execution succeeds again, so the run never claims
a publication of output it is rewriting.

It lives here, below the services, because two callers need it: an operator's clear
(services/reruns.py, which checks the request) and a backfill's ``existing: failed``, which
the scheduler's pass paces (scheduling/backfills.py).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime

from veritask.core import judge, new_events, refusals, run_state
from veritask.core import reasons as phrases
from veritask.core.events import ClearScope, Event
from veritask.core.fold import InstanceSnapshot
from veritask.core.jsontypes import JSONObject
from veritask.core.states import InstanceState, PublicationState, RunExecutionState
from veritask.definitions import parse
from veritask.ledger import dialects, errors, queries, run_store
from veritask.ledger.database import Connection
from veritask.ledger.ledger import Ledger
from veritask.ledger.rows import RunRow
from veritask.ledger.vocabulary import SubjectType
from veritask.scheduling import publication, triggers
from veritask.scheduling.dispatch import new_event_id

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
CLEARABLE_RUNS = frozenset(
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
#: Who a preview's decisions name: they are judged as a clear's would be, never recorded.
_PREVIEW_ACTOR = "operator:preview"


class ClearRefused(triggers.Refused):
    """The run, or an instance in scope, cannot be cleared as it is now."""

    def __init__(self, message: str, *, current_state: str | None = None) -> None:
        super().__init__(message)
        self.current_state = current_state


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


def clear_scope(
    ledger: Ledger,
    run_id: str,
    *,
    failed: bool = False,
    tasks: Sequence[str] = (),
    downstream: bool = True,
) -> ClearPreview:
    """What :func:`clear` would send back to waiting now, recording nothing: the same checks,
    the same refusals (404, 409 naming an active instance) and the same instances, because
    :func:`clear` plans with the very same function."""
    run, graph, ids, scope = _checked_scope(ledger, run_id, failed, tasks)
    # The decisions are built and judged as the clear would, then dropped: never applied.
    planned = _planned(
        ledger, run, graph, ids, failed, tasks, downstream, _PREVIEW_ACTOR, "preview", scope
    )
    return ClearPreview(run_id, scope.value, downstream, tuple(item for _, _, item in planned))


def clear(
    ledger: Ledger,
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
    run, graph, ids, scope = _checked_scope(ledger, run_id, failed, tasks)
    for _ in range(_ROUNDS):
        events = _planned(ledger, run, graph, ids, failed, tasks, downstream, actor, why, scope)
        if expected is not None and {i.instance_id for _, _, i in events} != set(expected):
            names = ", ".join(item.task for _, _, item in events) or "-"
            raise ClearRefused(refusals.CLEAR_SCOPE_CHANGED.format(tasks=names))
        cleared = tuple(item for _, _, item in events)
        reopen = _Reopening(run_id, actor, why, scope, downstream, cleared, ledger.clock())
        try:
            ledger.apply_batch(
                [event for event, _, _ in events],
                expected_versions={event.instance_id: version for event, version, _ in events},
                then=reopen,
            )
        except errors.LedgerConflict:
            # An instance or the run moved meanwhile (or now refuses): nothing was recorded;
            # judge them all again on what is there now.
            continue
        break
    else:
        raise ClearRefused(refusals.KEPT_CHANGING.format(instance_id=run_id))
    assert reopen.result is not None  # apply_batch returned: it ran
    execution, published = reopen.result
    return Cleared(run_id, scope.value, downstream, why, cleared, execution, published)


def _checked_scope(
    ledger: Ledger, run_id: str, failed: bool, tasks: Sequence[str]
) -> tuple[RunRow, run_state.RunGraph, dict[str, str], ClearScope]:
    """The run, its graph and instance ids, for a clearable run and tasks it has; NotFound or
    ClearRefused otherwise. The caller has checked that the request names one scope."""
    run, graph, ids = _run_graph(ledger, run_id)
    for task in tasks:
        if task not in ids or (task not in graph.keys and not _members(task, graph)):
            raise triggers.NotFound(refusals.NO_TASK_IN_RUN.format(run_id=run_id, task=task))
    state = RunExecutionState(run.execution_state)
    if state not in CLEARABLE_RUNS:
        raise ClearRefused(
            refusals.CLEAR_RUN_STATE.format(run_id=run_id, state=state), current_state=state.value
        )
    return run, graph, ids, ClearScope.FAILED if failed else ClearScope.TASKS


def _planned(
    ledger: Ledger,
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
    targets = _targets(ledger, run, graph, ids, failed, tasks, downstream)
    if failed and not any(origin for _, _, origin in targets):
        state = run.execution_state
        raise ClearRefused(refusals.NOTHING_FAILED.format(run_id=run.id), current_state=state)
    return _clearing_events(ledger, targets, actor, why, scope)


def _run_graph(ledger: Ledger, run_id: str) -> tuple[RunRow, run_state.RunGraph, dict[str, str]]:
    with dialects.read_transaction(ledger.engine) as connection:
        run = queries.get_run(connection, run_id)
        if run is None:
            raise triggers.NotFound(refusals.NO_RUN.format(run_id=run_id))
        version = queries.get_definition_version(
            connection, definition_id=run.definition_id, version=run.definition_version
        )
        if version is None:
            raise triggers.NotFound(refusals.VERSION_GONE.format(run_id=run_id))
        rows = queries.instances_of_run(connection, run_id)
    # A mapped task's instances are KEY[i] in the run's graph: clearing the task clears them
    # (each runs its item again); the instance that recorded the expansion stays as it is.
    ids = {run_state.instance_key(row.task_key, row.map_index): row.id for row in rows}
    groups: dict[str, int] = {}
    for row in rows:
        if row.map_index >= 0:
            groups[row.task_key] = groups.get(row.task_key, 0) + 1
    graph = parse.definition_from_json(version.spec).run_graph().expanded(groups)
    return run, graph, ids


def _members(task: str, graph: run_state.RunGraph) -> tuple[str, ...]:
    """The instances of an expanded mapped task in the run's graph (none otherwise)."""
    return tuple(key for key in graph.keys if key.startswith(task + "["))


def _targets(
    ledger: Ledger,
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
        loaded = ledger.snapshot(instance_id)
        if loaded is not None:
            snapshots[key] = loaded[0]
    if failed:
        origins = [
            key
            for key in graph.keys
            if key in snapshots and snapshots[key].state in FAILED_TO_CLEAR
        ]
    else:
        origins = list(dict.fromkeys(m for t in tasks for m in (_members(t, graph) or (t,))))
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
    ledger: Ledger,
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
            raise ClearRefused(
                refusals.CLEAR_ACTIVE.format(
                    task=task, instance_id=snapshot.instance_id, state=snapshot.state
                ),
                current_state=snapshot.state.value,
            )
        loaded = ledger.snapshot(snapshot.instance_id)
        policy = ledger.policy_of(snapshot.instance_id)
        if loaded is None or policy is None:
            raise triggers.NotFound(refusals.NO_INSTANCE.format(instance_id=snapshot.instance_id))
        current, version = loaded
        event = new_events.cleared(
            event_id=new_event_id(),
            instance_id=snapshot.instance_id,
            attempt_no=current.epoch + 1,
            event_time=ledger.clock(),
            operator=actor,
            reason=why,
            scope=scope if named else ClearScope.DOWNSTREAM,
        )
        verdict = judge.judge(current, event, policy)
        if verdict.outcome is judge.Outcome.REJECTED:
            raise ClearRefused(
                refusals.CLEAR_ACTIVE.format(
                    task=task, instance_id=snapshot.instance_id, state=current.state
                ),
                current_state=current.state.value,
            )
        item = ClearedInstance(snapshot.instance_id, task, current.state, current.epoch + 1)
        events.append((event, version, item))
    return events


@dataclass
class _Reopening:
    """Record the clear on the run and move it back to RUNNING (and PENDING, see the module
    docstring), in the transaction that records the instances' ``cleared`` decisions: the
    run's compare-and-set failing rolls them back too."""

    run_id: str
    actor: str
    why: str
    scope: ClearScope
    downstream: bool
    cleared: tuple[ClearedInstance, ...]
    now: datetime
    #: The run's states the clear left, once the transaction ran.
    result: tuple[RunExecutionState, PublicationState] | None = None

    def __call__(self, connection: Connection) -> None:
        run = queries.get_run(connection, self.run_id)
        if run is None:
            raise triggers.NotFound(refusals.NO_RUN.format(run_id=self.run_id))
        actor, why, now = self.actor, self.why, self.now
        evidence: JSONObject = {
            "reason": why,
            "scope": self.scope.value,
            "downstream": self.downstream,
            "operator": actor,
            "instances": {item.task: item.instance_id for item in self.cleared},
        }
        names = ", ".join(item.task for item in self.cleared) or "-"
        execution = RunExecutionState(run.execution_state)
        published = PublicationState(run.publication_state)
        version = run.version
        moved = bool(self.cleared) and execution is not RunExecutionState.RUNNING
        if moved:
            version = run_store.set_execution_state(
                connection,
                run_id=self.run_id,
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
                run_id=self.run_id,
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
                subject_id=self.run_id,
                run_id=self.run_id,
                kind=RUN_CLEARED_KIND,
                actor=actor,
                event_id=new_event_id(),
                now=now,
                evidence=evidence,
                reason=phrases.RUN_CLEARED.format(actor=actor, why=why, tasks=names),
            )
        self.result = (execution, published)
