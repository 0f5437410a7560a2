"""Overrides: an operator sets SUCCESS or FAILED on the current attempt epoch.

What an override may and may not do is in docs/state-machine.md, 'What the table allows'.

An override is an instance-level decision with the operator, the reason and the scope in its
evidence; it erases no fact (invariant 12). Its scope is the instance, the instance and every
task downstream of it, or the whole run. Every target is judged first, with the same pure
``judge`` the ledger uses, so an override that one target refuses (an attempt still running:
stop it first) records nothing at all.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from veritask.core import judge, new_events, reasons, refusals, run_state
from veritask.core.events import Event, OverrideScope
from veritask.core.fold import InstanceSnapshot
from veritask.core.states import InstanceState, PublicationState, RunExecutionState
from veritask.definitions import parse
from veritask.ledger import dialects, errors, queries, run_store
from veritask.ledger.database import Connection
from veritask.ledger.ledger import StaleDecision
from veritask.scheduling.dispatch import new_event_id
from veritask.services import views
from veritask.services.errors import Conflict, InvalidInput, NotFound
from veritask.services.platform import Platform

OVERRIDE_STATES = (InstanceState.SUCCESS, InstanceState.FAILED)
_ROUNDS = 5
#: Publication states past which a run has published, or is publishing, what it made.
_STARTED = frozenset(
    {PublicationState.CHECKING, PublicationState.PUBLISHING, PublicationState.PUBLISHED}
)


@dataclass(frozen=True)
class _Asked:
    """What the operator asked for, on which instance."""

    to_state: InstanceState
    reason: str
    scope: OverrideScope
    actor: str
    origin: str


@dataclass(frozen=True)
class _Target:
    instance_id: str
    task: str
    snapshot: InstanceSnapshot
    version: int
    event: Event


def override(
    platform: Platform,
    instance_id: str,
    *,
    to_state: InstanceState,
    scope: OverrideScope,
    reason: str,
    actor: str,
) -> views.Overridden:
    """Set ``to_state`` on the instances in ``scope``; 409 naming those that refuse it."""
    if to_state not in OVERRIDE_STATES:
        raise InvalidInput.about("state", refusals.OVERRIDE_STATES.format())
    if not reason.strip():
        raise InvalidInput.about("reason", refusals.OVERRIDE_NEEDS_REASON.format())
    with dialects.read_transaction(platform.engine) as connection:
        instance = queries.get_instance(connection, instance_id)
        if instance is None:
            raise NotFound(refusals.NO_INSTANCE.format(instance_id=instance_id))
        run_id = instance.run_id
        graph, keys_to_ids = _graph(connection, run_id)
    if scope is OverrideScope.DOWNSTREAM and instance.task_key not in graph.keys:
        # A publication step is outside the task graph: nothing in it is downstream of one.
        raise InvalidInput.about("scope", refusals.NOT_IN_GRAPH.format(task=instance.task_key))
    task_keys = _scope(graph, instance.task_key, scope, keys_to_ids)
    asked = _Asked(to_state, reason.strip(), scope, actor, instance_id)
    for _ in range(_ROUNDS):
        targets = [_target(platform, keys_to_ids[key], key, asked) for key in task_keys]
        _refuse_if_any_refuses(platform, targets, instance_id)
        try:
            state = _apply_all(platform, run_id, graph, targets, asked)
        except StaleDecision:
            continue  # one moved meanwhile: judge them all again on what is there now
        break
    else:
        raise Conflict(refusals.KEPT_CHANGING.format(instance_id=instance_id))
    return views.Overridden(
        run_id, to_state, scope.value, tuple(keys_to_ids[key] for key in task_keys), state
    )


def _graph(connection: Connection, run_id: str) -> tuple[run_state.RunGraph, dict[str, str]]:
    run = queries.get_run(connection, run_id)
    if run is None:
        raise NotFound(refusals.NO_RUN.format(run_id=run_id))
    version = queries.get_definition_version(
        connection, definition_id=run.definition_id, version=run.definition_version
    )
    if version is None:
        raise NotFound(refusals.VERSION_GONE.format(run_id=run_id))
    graph = parse.definition_from_json(version.spec).run_graph()
    ids = {row.task_key: row.id for row in queries.instances_of_run(connection, run_id)}
    return graph, ids


def _scope(
    graph: run_state.RunGraph, task: str, scope: OverrideScope, ids: dict[str, str]
) -> list[str]:
    """The task keys an override reaches, the asked-for task first."""
    if scope is OverrideScope.INSTANCE:
        return [task]
    if scope is OverrideScope.RUN:
        return [task, *(key for key in graph.keys if key != task and key in ids)]
    reached, queue = [task], deque([task])
    while queue:
        for below in graph.downstream(queue.popleft()):
            if below not in reached and below in ids:
                reached.append(below)
                queue.append(below)
    return reached


def _target(platform: Platform, instance_id: str, task: str, asked: _Asked) -> _Target:
    loaded = platform.ledger.snapshot(instance_id)
    if loaded is None:
        raise NotFound(refusals.NO_INSTANCE.format(instance_id=instance_id))
    snapshot, version = loaded
    event = new_events.override(
        event_id=new_event_id(),
        instance_id=instance_id,
        attempt_no=snapshot.epoch,
        event_time=platform.now(),
        operator=asked.actor,
        to_state=asked.to_state,
        reason=asked.reason,
        scope=asked.scope,
        origin_instance=asked.origin,
    )
    return _Target(instance_id, task, snapshot, version, event)


def _refuse_if_any_refuses(platform: Platform, targets: list[_Target], origin: str) -> None:
    refused: list[str] = []
    for target in targets:
        policy = platform.ledger.policy_of(target.instance_id)
        if policy is None:
            raise NotFound(refusals.NO_INSTANCE.format(instance_id=target.instance_id))
        verdict = judge.judge(target.snapshot, target.event, policy)
        if verdict.outcome is judge.Outcome.REJECTED:
            refused.append(
                refusals.OVERRIDE_REFUSAL.format(
                    task=target.task, state=target.snapshot.state, reason=verdict.reason
                )
            )
    if refused:
        current = next(t.snapshot.state for t in targets if t.instance_id == origin)
        raise Conflict(
            refusals.OVERRIDE_REFUSED.format(refusals="; ".join(refused)),
            current_state=current.value,
        )


def _apply_all(
    platform: Platform,
    run_id: str,
    graph: run_state.RunGraph,
    targets: list[_Target],
    asked: _Asked,
) -> RunExecutionState:
    """Every target's override and the run's settling in one transaction, each override
    against the version it was judged on: one instance (or the run) moved since, or now
    refusing, records none of them. The run's execution state it leaves."""
    settled: list[RunExecutionState] = []

    def settle(connection: Connection) -> None:
        settled.append(_settle_run(connection, platform, run_id, graph, asked))

    try:
        platform.ledger.apply_batch(
            [target.event for target in targets],
            expected_versions={target.instance_id: target.version for target in targets},
            then=settle,
        )
    except StaleDecision:
        raise
    except errors.LedgerConflict as conflict:
        # Judged acceptable a moment ago and refused now, or the run moved: as if moved.
        raise StaleDecision(str(conflict)) from conflict
    return settled[-1]


def _settle_run(
    connection: Connection,
    platform: Platform,
    run_id: str,
    graph: run_state.RunGraph,
    asked: _Asked,
) -> RunExecutionState:
    """A finished run's execution state follows its overridden leaves, and so does its reason
    when the state stays (a run still FAILED no longer fails because of an instance now
    SUCCESS); an active run's is the scheduler's to move (it re-derives it every tick).

    Publication follows execution: a run whose publication has started cannot be made FAILED
    (what it published is out, and a failed run publishes nothing); a run made SUCCESS
    publishes through its own steps, which no override touches. The run's compare-and-set
    makes this decision and the publication state it was taken on one."""
    run = queries.get_run(connection, run_id)
    if run is None:
        raise NotFound(refusals.NO_RUN.format(run_id=run_id))
    version, current = run_store.run_version(connection, run_id)
    if current not in (RunExecutionState.SUCCESS, RunExecutionState.FAILED):
        return current
    states = {
        brief.task_key: brief.state for brief in run_store.instances_brief(connection, run_id)
    }
    verdict = run_state.execution_state(graph, states)
    publication = PublicationState(run.publication_state)
    if verdict.state is RunExecutionState.FAILED and publication in _STARTED:
        raise Conflict(
            refusals.OVERRIDE_UNPUBLISHES.format(run_id=run_id, state=publication),
            current_state=publication.value,
        )
    run_store.set_execution_state(
        connection,
        run_id=run_id,
        expected_version=version,
        state=verdict.state,
        reason=reasons.AFTER_OVERRIDE.format(verdict=verdict.reason, actor=asked.actor),
        previous=current,
        actor=asked.actor,
        event_id=new_event_id(),
        now=platform.now(),
        evidence={"instances": {key: state.value for key, state in states.items()}},
    )
    return verdict.state
