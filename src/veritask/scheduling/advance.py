"""Moving one run forward: trigger rules, attempt openings, the run's own states.

The scheduler's loop decides *which* runs to look at; this module decides what each of them
may do now, with the pure core (``trigger_rules``, ``run_state``, ``publication.plan``), and
records it with compare-and-set. It keeps nothing between calls but caches of immutable
definitions: what the loop must remember (when to look again, whether stops are due) comes
back in :class:`Advanced`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from veritask.core import admission, decide, judge, new_events, reasons, run_state, trigger_rules
from veritask.core.events import Event, EventKind, OpenReason
from veritask.core.jsontypes import JSONValue
from veritask.core.states import InstanceState, RunExecutionState
from veritask.definitions.model import Definition
from veritask.ledger import alerts, dialects, pools, run_store
from veritask.ledger.active_runs import ActiveRun
from veritask.ledger.database import Connection
from veritask.ledger.ledger import Ledger
from veritask.ledger.vocabulary import AlertCategory
from veritask.scheduling import (
    dependencies,
    mapping,
    publication,
    rules,
    run_failures,
    sweeps,
    versions,
)
from veritask.scheduling.dispatch import Dispatcher, Opened, RunContext, Submissions, new_event_id
from veritask.scheduling.settings import Settings
from veritask.scheduling.tokens import AttemptTokens

#: The execution states that end a run by what its instances imply.
_ENDS = frozenset({RunExecutionState.SUCCESS, RunExecutionState.FAILED})
#: How soon an instance whose predecessor is still being stopped is looked at again.
_REPLACE_POLL = timedelta(milliseconds=250)
#: How many expanded run graphs are kept (runs with mapped tasks are moved many times).
_EXPANDED_KEPT = 256


def _key(brief: run_store.InstanceBrief) -> str:
    """The instance's name in its run's graph: ``KEY[i]`` for a mapped one."""
    return run_state.instance_key(brief.task_key, brief.map_index)


def _mapped(context: RunContext, task_key: str) -> bool:
    task = context.definition.tasks.get(task_key)
    return task is not None and task.map_over is not None


def _groups(briefs: list[run_store.InstanceBrief]) -> dict[str, int]:
    """How many instances each expanded mapped task has."""
    groups: dict[str, int] = {}
    for brief in briefs:
        if brief.map_index >= 0:
            groups[brief.task_key] = groups.get(brief.task_key, 0) + 1
    return groups


#: How soon a run with an instance waiting for its pool is looked at again. A slot freed in
#: the same run is news at once; this bounds the wait for a slot freed by another run.
_POOL_POLL = timedelta(milliseconds=200)
#: How many ready instances of a pool beyond its free slots get an opening at once (those
#: the admission may still prefer once it ranks them against other runs' waiters).
_CONSIDERED = 4


@dataclass
class TickReport:
    """What one tick did; zero everywhere means the scheduler may sleep."""

    opened: int = 0
    decided: int = 0
    submitted: int = 0
    reports: int = 0
    swept: int = 0
    runs_moved: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def work(self) -> int:
        return self.opened + self.decided + self.submitted + self.reports + self.runs_moved


@dataclass
class Advanced:
    """What the loop must remember after moving a run."""

    run_id: str
    #: The run's instances, so that their workers' reports find the run again.
    instance_ids: list[str]
    #: Those of them that no task waits for: their success can only end the run, so news
    #: of it may wait a little and be read together with the next ones.
    end_ids: set[str] = field(default_factory=set)
    #: Its tasks' instances that had not ended when it was read: once the last of them ends,
    #: the run can end, and waiting for more news would only delay it.
    unended_ids: set[str] = field(default_factory=set)
    #: When the run has to be looked at again (a retry comes due, a predecessor stops).
    wake_at: list[datetime] = field(default_factory=list)
    #: The run moved in a way that lets it move again at once.
    again: bool = False
    #: Stop requests were recorded that an engine has not been asked for yet.
    stops_due: bool = False
    #: Some of its tasks wait for a pool's slots.
    pool_waiting: bool = False
    #: The states of its instances as read, for a big run that only its instances' moves
    #: can move (no pool, no other pipeline, no cancel): while they stay, re-reading the run
    #: on a full scan would decide nothing new (``Scheduler``).
    digest: run_store.StatesDigest | None = None


class Definitions:
    """Stored definition versions, read once each: a version never changes."""

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger
        self._definitions: dict[tuple[str, int], Definition] = {}
        # Keyed by the identity of a cached definition, which lives as long as the cache.
        self._graphs: dict[int, run_state.RunGraph] = {}
        # Graphs of runs whose mapped tasks expanded, by definition and group sizes.
        self._expanded: dict[tuple[int, tuple[tuple[str, int], ...]], run_state.RunGraph] = {}

    def get(self, definition_id: str, version: int) -> Definition:
        key = (definition_id, version)
        found = self._definitions.get(key)
        if found is None:
            with dialects.read_transaction(self._ledger.engine) as connection:
                found = self._definitions[key] = versions.read(connection, definition_id, version)
        return found

    def graph(self, definition: Definition) -> run_state.RunGraph:
        """The definition's task graph, built once per cached version (runs of thousands of
        tasks are moved many times a second)."""
        found = self._graphs.get(id(definition))
        if found is None:
            found = self._graphs[id(definition)] = definition.run_graph()
        return found

    def run_graph(self, definition: Definition, groups: Mapping[str, int]) -> run_state.RunGraph:
        """The graph of one run: the definition's, with its expanded mapped tasks' instances."""
        if not groups:
            return self.graph(definition)
        key = (id(definition), tuple(sorted(groups.items())))
        found = self._expanded.get(key)
        if found is None:
            if len(self._expanded) >= _EXPANDED_KEPT:
                self._expanded.pop(next(iter(self._expanded)))
            found = self._expanded[key] = self.graph(definition).expanded(groups)
        return found


class RunAdvancer:
    """Moves runs forward for one scheduler."""

    def __init__(
        self,
        ledger: Ledger,
        *,
        settings: Settings,
        dispatcher: Dispatcher,
        submissions: Submissions,
        sweeper: sweeps.Sweeper,
        definitions: Definitions,
    ) -> None:
        self.ledger = ledger
        self.settings = settings
        self.dispatcher = dispatcher
        self.submissions = submissions
        self.sweeper = sweeper
        self.definitions = definitions
        self._waits = _RecordedWaits()

    def advance(self, run: ActiveRun, now: datetime, report: TickReport) -> Advanced:
        """Move one run forward: trigger rules, openings, its execution and publication."""
        definition = self.definitions.get(run.definition_id, run.definition_version)
        context = RunContext(run.id, definition, run.logical_time, run.parameters)
        with dialects.read_transaction(self.ledger.engine) as connection:
            briefs = run_store.instances_brief(connection, run.id)
        groups = _groups(briefs)
        graph = self.definitions.run_graph(definition, groups)
        advanced = Advanced(run.id, instance_ids=[b.id for b in briefs])
        states = {_key(b): b.state for b in briefs}
        gate, run = self._dependency_gate(run, definition, graph, states, now)
        work = [b for b in briefs if not publication.is_publication_key(b.task_key)]
        publishing = [b for b in briefs if publication.is_publication_key(b.task_key)]
        if run.execution_state is RunExecutionState.RUNNING:
            ends = graph.ends()
            advanced.end_ids = {b.id for b in briefs if _key(b) in ends}
            advanced.unended_ids = {b.id for b in work if not b.state.is_terminal}
        if run.execution_state is RunExecutionState.CANCELLING:
            cancelled = self._cancel_run(briefs, states, now)
            report.decided += cancelled
            advanced.stops_due = cancelled > 0
        elif run.execution_state is RunExecutionState.RUNNING:
            self._move_instances(context, graph, work, states, now, report, advanced, gate)
        else:
            # Publishing: its steps retry like any instance; the plan opens new ones.
            retrying = [b for b in publishing if states[b.task_key] is InstanceState.UP_FOR_RETRY]
            self._move_instances(context, graph, retrying, states, now, report, advanced, None)
        work_states = {_key(b): states[_key(b)] for b in work}
        execution = self._settle_run(run, definition, graph, work, work_states, now, report)
        if definition.publish is not None:
            self._settle_publication(
                run, context, execution, publishing, states, now, report, advanced
            )
        if (
            len(briefs) >= self.settings.digest_from
            and run.execution_state is RunExecutionState.RUNNING
            and gate is None
            and not definition.wait_for
            and not advanced.pool_waiting
        ):
            advanced.digest = run_store.digest_of(briefs)
        return advanced

    def _dependency_gate(
        self,
        run: ActiveRun,
        definition: Definition,
        graph: run_state.RunGraph,
        states: Mapping[str, InstanceState],
        now: datetime,
    ) -> tuple[dependencies.Verdict | None, ActiveRun]:
        """Whether the run's roots wait for other pipelines (None: nothing to wait for), and
        the run as it is after the wait or its end was recorded (docs/definitions.md,
        wait_for): the run's reason names what it waits for, its release the upstream runs.
        """
        if not definition.wait_for or run.execution_state is not RunExecutionState.RUNNING:
            return None, run
        if not any(
            state is InstanceState.CREATED and key in graph and not graph.node(key).after
            for key, state in states.items()
        ):
            return None, run  # no root waits: the gate holds nothing back
        with dialects.read_transaction(self.ledger.engine) as connection:
            waited = dependencies.waited_time(
                connection,
                run_id=run.id,
                trigger_kind=run.trigger_kind,
                logical_time=run.logical_time,
            )
            verdict = dependencies.check(
                connection, definition, logical_time=waited, created_at=run.created_at, now=now
            )
            _, said = run_store.execution_of(connection, run.id)
            evidence = (
                dependencies.release_evidence(connection, verdict)
                if verdict.released and said != verdict.reason
                else verdict.evidence()
            )
        if verdict.timed_out:
            self._alert_dependency(run.id, verdict)
        elif said != verdict.reason:
            with self.ledger.engine.begin() as connection:
                version = run_store.set_execution_reason(
                    connection,
                    run_id=run.id,
                    expected_version=run.version,
                    kind=(
                        dependencies.RELEASED_KIND
                        if verdict.released
                        else dependencies.AWAITED_KIND
                    ),
                    reason=verdict.reason,
                    actor="scheduler",
                    event_id=new_event_id(),
                    now=now,
                    evidence=evidence,
                )
            run = replace(run, version=version)
        return (None if verdict.released else verdict), run

    def _settle_publication(
        self,
        run: ActiveRun,
        context: RunContext,
        execution: RunExecutionState,
        publishing: list[run_store.InstanceBrief],
        states: dict[str, InstanceState],
        now: datetime,
        report: TickReport,
        advanced: Advanced,
    ) -> None:
        """Move the run's publication state and open the steps it allows (docs/definitions.md)."""
        plan = publication.plan(context.definition, execution, run.publication_state, states)
        by_step = {b.task_key: b for b in publishing}
        if plan.state is not run.publication_state:
            with self.ledger.engine.begin() as connection:
                version, _ = run_store.run_version(connection, run.id)
                run_store.set_publication_state(
                    connection,
                    run_id=run.id,
                    expected_version=version,
                    state=plan.state,
                    reason=plan.reason,
                    previous=run.publication_state,
                    actor="scheduler",
                    event_id=new_event_id(),
                    now=now,
                    evidence=publication.evidence(plan, execution, by_step, states),
                )
            report.runs_moved += 1
            advanced.again = True
        openings = [
            self._opening(by_step[key], now)
            for key in plan.open_now
            if key in by_step and states[key] is InstanceState.CREATED
        ]
        self._open_and_submit(context, openings, states, now, report, advanced)

    def _cancel_run(
        self,
        briefs: list[run_store.InstanceBrief],
        states: dict[str, InstanceState],
        now: datetime,
    ) -> int:
        unfinished = []
        for brief in briefs:
            if brief.state.is_terminal or brief.state in (
                InstanceState.CANCELLING,
                InstanceState.CANCEL_FAILED,
            ):
                continue
            loaded = self.ledger.snapshot(brief.id)
            if loaded is not None:
                unfinished.append(loaded)
        done = self.sweeper.cancel_instances(unfinished, now, reason=reasons.RUN_CANCELLED.format())
        if done:
            keys = {b.id: _key(b) for b in briefs}
            for snapshot, _ in unfinished:
                after = self.ledger.snapshot(snapshot.instance_id)
                if after is not None:
                    states[keys[snapshot.instance_id]] = after[0].state
        return done

    def _move_instances(
        self,
        context: RunContext,
        graph: run_state.RunGraph,
        briefs: list[run_store.InstanceBrief],
        states: dict[str, InstanceState],
        now: datetime,
        report: TickReport,
        advanced: Advanced,
        gate: dependencies.Verdict | None,
    ) -> None:
        """Open the attempts that may open and record the trigger rules' verdicts.

        A skip or an upstream failure can decide the next tasks down at once, so the pass is
        repeated on the states it produced until it decides nothing more.
        """
        ids = {_key(b): b.id for b in briefs}
        branches = rules.BranchChoices(self.ledger, ids)
        pending = list(briefs)
        openings: list[tuple[Event, Opened]] = []
        expansions: list[tuple[run_store.InstanceBrief, list[JSONValue]]] = []
        ready: list[run_store.InstanceBrief] = []
        while pending:
            decisions: list[tuple[str, Event]] = []
            waiting: list[run_store.InstanceBrief] = []
            for brief in pending:
                state = states[_key(brief)]
                if state is InstanceState.CREATED and _key(brief) not in graph:
                    # The unmapped instance of an expanded task (cleared since): its
                    # instances are the task now; nothing decides it again.
                    continue
                if state is InstanceState.CREATED:
                    decision = self._rule(brief, graph, states, branches, now, gate)
                    mapped = brief.map_index < 0 and _mapped(context, brief.task_key)
                    if decision is True and mapped:
                        # The upstream's output decides: instances, a skip or a failure.
                        verdict = mapping.decide(self.ledger, context, brief, now)
                        if isinstance(verdict, Event):
                            decisions.append((_key(brief), verdict))
                        else:
                            expansions.append((brief, verdict))
                    elif isinstance(decision, Event):
                        decisions.append((_key(brief), decision))
                    elif decision:
                        ready.append(brief)
                    else:
                        waiting.append(brief)
                elif state is InstanceState.UP_FOR_RETRY:
                    if brief.retry_at is not None and brief.retry_at > now:
                        advanced.wake_at.append(brief.retry_at)
                        continue
                    opening = self._retry_opening(brief, context, now, advanced)
                    if opening is not None:
                        openings.append(opening)
            if not decisions:
                break
            decisions.sort(key=lambda pair: pair[1].instance_id)  # one lock order for all
            results = self.ledger.apply_batch([event for _, event in decisions])
            moved = False
            for (key, _), result in zip(decisions, results, strict=True):
                if result.outcome is judge.Outcome.APPLIED and result.snapshot is not None:
                    report.decided += 1
                    states[key] = result.snapshot.state
                    moved = True
            pending = waiting if moved else []
        for brief, items in expansions:
            # Not folded into ``states``: the graph that sees the new instances is the next one.
            if mapping.expand(self.ledger, context, brief, items, ids, now):
                report.decided += 1
                advanced.again = True
        self._open_and_submit(context, openings, states, now, report, advanced, ready)

    def _open_and_submit(
        self,
        context: RunContext,
        openings: list[tuple[Event, Opened]],
        states: dict[str, InstanceState],
        now: datetime,
        report: TickReport,
        advanced: Advanced,
        ready: Sequence[run_store.InstanceBrief] = (),
    ) -> None:
        """Record the openings their pools admit, in batches, then hand the ones recorded to
        their engines; those that wait for a pool are looked at again soon.

        Of the ``ready`` instances (CREATED, their rule says run) only the best ranked of
        each pool get an event, as many as it has free slots and a few more: a fan-out of
        thousands into a pool of eight would otherwise build thousands of openings at every
        pass to record eight. The others take their place among the pool's waiters.
        """
        aging = self.settings.pool_aging or None
        chosen, held, more = self._choose(context, ready, now)
        openings = openings + [self._opening(brief, now) for brief in chosen]
        if not openings and not held:
            if more:
                advanced.pool_waiting = True
                advanced.wake_at.append(now + _POOL_POLL)
            return
        wanted: list[tuple[Event | None, Opened | None, pools.Wanted]] = [
            (event, opened, self._wanted(context, opened.instance_id, opened.task_key, now))
            for event, opened in sorted(openings, key=lambda pair: pair[0].instance_id)
        ]
        wanted += [
            (None, None, self._wanted(context, brief.id, brief.task_key, now)) for brief in held
        ]
        self._waits.recorded((brief.id for brief in held), now)
        waiting = more
        for start in range(0, len(wanted), self.settings.batch):
            chunk = wanted[start : start + self.settings.batch]
            results = self.ledger.open_attempts([(e, w) for e, _, w in chunk], aging=aging)
            for (_, opened, _), result in zip(chunk, results, strict=True):
                if isinstance(result, admission.Verdict) or opened is None:
                    waiting = True
                    continue
                if result.outcome is not judge.Outcome.APPLIED or result.snapshot is None:
                    continue
                report.opened += 1
                states[run_state.instance_key(opened.task_key, opened.map_index)] = (
                    result.snapshot.state
                )
                self.submissions.submit(context, opened)
        if waiting:
            advanced.pool_waiting = True
            advanced.wake_at.append(now + _POOL_POLL)

    def _choose(
        self,
        context: RunContext,
        ready: Sequence[run_store.InstanceBrief],
        now: datetime,
    ) -> tuple[list[run_store.InstanceBrief], list[run_store.InstanceBrief], bool]:
        """Which ready instances get an opening now, which only record their wait (those
        whose wait is not recorded, or was recorded a while ago), and whether any was held
        back; see above. Within one run, the order is the priority, then creation (one
        logical time)."""
        if not ready:
            return [], [], False
        by_pool: dict[str, list[run_store.InstanceBrief]] = {}
        chosen: list[run_store.InstanceBrief] = []
        for brief in ready:
            task = context.tasks[brief.task_key]
            if not task.slots_held:
                chosen.append(brief)  # a wait: no pool's slots to count
                continue
            by_pool.setdefault(task.pool or admission.DEFAULT_POOL, []).append(brief)
        with dialects.read_transaction(self.ledger.engine) as connection:
            free = pools.headroom(connection, by_pool)
        held: list[run_store.InstanceBrief] = []
        more = False
        for name, group in by_pool.items():
            room = free[name]
            if room is None:
                chosen += group
                continue
            group.sort(key=lambda b: (-context.tasks[b.task_key].priority, b.id))
            cut = room + _CONSIDERED
            chosen += group[:cut]
            held += [b for b in group[cut:] if self._waits.due(b.id, now)]
            more = more or len(group) > cut
        return chosen, held, more

    @staticmethod
    def _wanted(
        context: RunContext, instance_id: str, task_key: str, since: datetime
    ) -> pools.Wanted:
        task = context.tasks[task_key]
        claim = admission.Claim(
            instance_id=instance_id,
            pool=task.pool or admission.DEFAULT_POOL,
            slots=task.slots_held,
            priority=task.priority,
            logical_time=context.logical_time,
            since=since,
        )
        return pools.Wanted(claim, context.run_id, task_key)

    def _rule(
        self,
        brief: run_store.InstanceBrief,
        graph: run_state.RunGraph,
        states: Mapping[str, InstanceState],
        branches: rules.BranchChoices,
        now: datetime,
        gate: dependencies.Verdict | None,
    ) -> Event | bool:
        """The trigger rule's verdict on a CREATED instance: an event, open (True) or wait.

        A root task of a run that waits for other pipelines (``gate``) waits too, and fails
        as UPSTREAM_FAILED once the dependency timed out.
        """
        node = graph.node(_key(brief))
        if not node.after and gate is not None:
            if gate.timed_out:
                return rules.rule_event(brief, EventKind.UPSTREAM_FAILED, gate.reason, now, {})
            return False
        upstream = {key: states.get(key, InstanceState.CREATED) for key in node.after}
        skipped_by = branches.skipped_by(brief.task_key, node.after, upstream)
        if skipped_by is not None:
            return rules.rule_event(brief, EventKind.SKIPPED, skipped_by, now, upstream)
        verdict = trigger_rules.evaluate(
            node.trigger_rule, upstream, setup_upstreams=graph.setup_upstreams(node.key)
        )
        rule = reasons.RULE_SAYS.format(rule=node.trigger_rule, reason=verdict.reason)
        match verdict.outcome:
            case trigger_rules.RuleOutcome.RUN:
                return True
            case trigger_rules.RuleOutcome.SKIP:
                return rules.rule_event(brief, EventKind.SKIPPED, rule, now, upstream)
            case trigger_rules.RuleOutcome.UPSTREAM_FAILED:
                return rules.rule_event(brief, EventKind.UPSTREAM_FAILED, rule, now, upstream)
            case _:
                return False

    def _opening(self, brief: run_store.InstanceBrief, now: datetime) -> tuple[Event, Opened]:
        nonce = AttemptTokens.new_nonce()
        # A CREATED instance past epoch 0 was cleared: its attempt opens in the epoch the
        # clear opened, as a rerun (counters reset).
        cleared = brief.epoch > 0
        attempt_no = brief.epoch if cleared else 1
        token_hash = self.dispatcher.tokens.token_hash(brief.id, attempt_no, nonce)
        event = new_events.attempt_opened(
            event_id=new_event_id(),
            instance_id=brief.id,
            attempt_no=attempt_no,
            event_time=now,
            token_hash=token_hash,
            reason=OpenReason.RERUN if cleared else OpenReason.FIRST,
            retry_index=0,
            resubmit_index=0,
            nonce=nonce,
        )
        return event, Opened(brief.id, attempt_no, brief.task_key, nonce, brief.map_index)

    def _retry_opening(
        self,
        brief: run_store.InstanceBrief,
        context: RunContext,
        now: datetime,
        advanced: Advanced,
    ) -> tuple[Event, Opened] | None:
        loaded = self.ledger.snapshot(brief.id)
        if loaded is None:
            return None
        snapshot, _ = loaded
        if not self.sweeper.replaceable(snapshot, context, now):
            advanced.wake_at.append(now + _REPLACE_POLL)
            return None
        nonce = AttemptTokens.new_nonce()
        attempt_no = snapshot.epoch + 1
        event = decide.open_attempt(
            snapshot,
            token_hash=self.dispatcher.tokens.token_hash(brief.id, attempt_no, nonce),
            now=now,
            event_id=new_event_id(),
            nonce=nonce,
        )
        if event is None:
            return None
        return event, Opened(brief.id, attempt_no, brief.task_key, nonce, brief.map_index)

    def _settle_run(
        self,
        run: ActiveRun,
        definition: Definition,
        graph: run_state.RunGraph,
        briefs: list[run_store.InstanceBrief],
        states: dict[str, InstanceState],
        now: datetime,
        report: TickReport,
    ) -> RunExecutionState:
        """Record the execution state the run's leaves imply; return the state it is in."""
        if run.execution_state not in (RunExecutionState.RUNNING, RunExecutionState.CANCELLING):
            return run.execution_state
        waiting = {
            _key(b)
            for b in briefs
            if states[_key(b)] is InstanceState.UP_FOR_RETRY and b.retry_at is not None
        }
        if run.execution_state is RunExecutionState.CANCELLING:
            if not all(state.is_terminal for state in states.values()):
                return run.execution_state
            ended = run_state.after_cancel(graph, states)
            if ended is None:
                return run.execution_state
            target, reason = ended.state, ended.reason
            blocking: Sequence[str] = ()
        else:
            verdict = run_state.execution_state(graph, states, waiting_for_time=waiting)
            target, reason, blocking = verdict.state, verdict.reason, verdict.blocking
            if verdict.blocking:
                reason = reasons.BLOCKING.format(reason=reason, tasks=", ".join(verdict.blocking))
        if target is run.execution_state:
            return target
        with self.ledger.engine.begin() as connection:
            if target in _ENDS and self._moved_since(connection, run, states):
                # An instance moved after it was read (late evidence of a finished one):
                # the next look decides on what it is now.
                return run.execution_state
            run_store.set_execution_state(
                connection,
                run_id=run.id,
                expected_version=run.version,
                state=target,
                reason=reason,
                previous=run.execution_state,
                actor="scheduler",
                event_id=new_event_id(),
                now=now,
                evidence={
                    **run_state.states_evidence(states),
                    **(
                        {"blocking": list(blocking[: run_state.NAMED_INSTANCES])}
                        if blocking
                        else {}
                    ),
                },
            )
        report.runs_moved += 1
        if target is RunExecutionState.FAILED:
            run_failures.alert_failed_run(
                self.ledger, run_id=run.id, definition=definition, reason=reason
            )
        return target

    @staticmethod
    def _moved_since(
        connection: Connection, run: ActiveRun, states: Mapping[str, InstanceState]
    ) -> bool:
        """Whether an instance of ``states`` is no longer in the state read, with the run's row
        locked first: evidence that changes a finished instance either committed before this
        read, or its writer waits for this run to end and then moves it on
        (``overruled.follow_the_instances``)."""
        run_store.run_version(connection, run.id, lock=True)
        for brief in run_store.instances_brief(connection, run.id):
            read = states.get(_key(brief))
            if read is not None and read is not brief.state:
                return True
        return False

    def _alert_dependency(self, run_id: str, verdict: dependencies.Verdict) -> None:
        alerts.raise_quietly(
            self.ledger,
            category=AlertCategory.DEPENDENCY,
            dedup_key=f"dependency:run:{run_id}",
            message=verdict.reason,
            run_id=run_id,
            evidence=verdict.evidence(),
        )


class _RecordedWaits:
    """When this process last recorded the wait of an instance held back by its pool, so
    that a run of thousands waiting does not write their waits at every pass (only saves
    work: a wait not refreshed lapses, and is recorded again)."""

    _LIMIT = 100_000

    def __init__(self) -> None:
        self._at: dict[str, datetime] = {}

    def due(self, instance_id: str, now: datetime) -> bool:
        at = self._at.get(instance_id)
        return at is None or now - at >= pools.WAIT_FRESH / 3

    def recorded(self, instance_ids: Iterable[str], now: datetime) -> None:
        if len(self._at) > self._LIMIT:
            self._at.clear()
        for instance_id in instance_ids:
            self._at[instance_id] = now
