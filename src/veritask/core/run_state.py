"""A run's execution state, decided from its leaves (docs/definitions.md, "The run's
execution state").

Pure: the scheduler passes the run's graph, each instance's state and which instances wait for
a time (a future ``retry_at``); :func:`execution_state` answers RUNNING, SUCCESS or FAILED
with a reason that is stored and shown.

**Leaves.** A leaf is a task that no other task runs after, where edges *into teardown tasks
do not count*: a work task whose only downstream is a teardown is still a leaf, so cleaning up
after it never hides its failure. Teardown leaves are ignored unless they are marked
``decides_run``. Failures of tasks that are not leaves do not decide the run by themselves:
a downstream task with ``all_done`` that succeeded after them is what the run reports.

**Settled.** The run stays RUNNING while anything in it can still move: an instance is active
(scheduled, queued, running, lost, stopping), waits for a time, or is ready (its rule no longer
says wait, so the scheduler has to open an attempt or record the skip). Only then is it decided,
so a decided run never has an active instance (a leaf that failed early is mentioned in the
RUNNING reason). Unfinished instances with none of those is a **deadlock**: FAILED, naming the
blocked instances. Since :func:`trigger_rules.evaluate` never waits once every upstream is
finished, a deadlock means instances wait for each other: a cycle that slipped through.

The run-level states QUEUED and CANCELLING come from concurrency and cancel requests, not from
the instances. How a cancel ends does come from them (:func:`after_cancel`): CANCELLED only if
the cancel stopped something.
"""

from __future__ import annotations

import heapq
from collections import Counter, deque
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from veritask.core import reasons
from veritask.core.errors import VeritaskError
from veritask.core.jsontypes import JSONValue
from veritask.core.states import InstanceState, RunExecutionState
from veritask.core.trigger_rules import FAILED_STATES, RuleOutcome, TriggerRule, evaluate


class TaskRole(StrEnum):
    """What a task is for, which decides how it counts for its run."""

    WORK = "work"
    """An ordinary task (the default)."""
    SETUP = "setup"
    """Creates what the work needs (a cluster, a bucket); the work runs only if it succeeded."""
    TEARDOWN = "teardown"
    """Cleans up after the work, even when the work failed (rule all_done_setup_success); it
    does not decide the run unless marked decides_run."""


class InvalidGraph(VeritaskError, ValueError):
    """The run's graph names a task that does not exist."""


#: Instances that someone other than the scheduler will move on: the executor, the worker,
#: the monitor or the reconciler.
ACTIVE_STATES = frozenset(
    {
        InstanceState.SCHEDULED,
        InstanceState.QUEUED,
        InstanceState.RUNNING,
        InstanceState.LOST,
        InstanceState.CANCELLING,
        InstanceState.CANCEL_FAILED,
    }
)

#: A leaf in one of these fails the run.
FAILING_LEAF_STATES = FAILED_STATES | {InstanceState.UPSTREAM_FAILED}


@dataclass(frozen=True)
class TaskNode:
    """One task of the graph, as far as the run's state is concerned."""

    key: str
    after: tuple[str, ...] = ()
    trigger_rule: TriggerRule = TriggerRule.ALL_SUCCESS
    role: TaskRole = TaskRole.WORK
    decides_run: bool = False


@dataclass(frozen=True)
class RunGraph:
    """The tasks of a run and their edges (``after``), in definition order."""

    nodes: tuple[TaskNode, ...]
    _by_key: dict[str, TaskNode] = field(init=False, repr=False, compare=False)
    _downstream: dict[str, tuple[str, ...]] = field(init=False, repr=False, compare=False)
    # Derived once: a scheduler asks for them each time it moves a run of thousands.
    _leaves: tuple[str, ...] = field(init=False, repr=False, compare=False)
    _ends: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_key: dict[str, TaskNode] = {}
        for node in self.nodes:
            if node.key in by_key:
                raise InvalidGraph(f"task {node.key!r} appears twice")
            by_key[node.key] = node
        downstream: dict[str, list[str]] = {key: [] for key in by_key}
        for node in self.nodes:
            for up in node.after:
                if up not in by_key:
                    raise InvalidGraph(f"task {node.key!r} runs after unknown task {up!r}")
                downstream[up].append(node.key)
        object.__setattr__(self, "_by_key", by_key)
        object.__setattr__(self, "_downstream", {k: tuple(v) for k, v in downstream.items()})
        object.__setattr__(self, "_leaves", self._find_leaves())
        object.__setattr__(
            self, "_ends", frozenset(k for k, below in downstream.items() if not below)
        )

    @property
    def keys(self) -> tuple[str, ...]:
        """Every task key, in definition order."""
        return tuple(node.key for node in self.nodes)

    def __contains__(self, key: object) -> bool:
        return key in self._by_key

    def node(self, key: str) -> TaskNode:
        """The task called ``key``."""
        return self._by_key[key]

    def downstream(self, key: str) -> tuple[str, ...]:
        """The tasks that list ``key`` in their ``after``."""
        return self._downstream[key]

    def setup_upstreams(self, key: str) -> frozenset[str]:
        """The direct upstream tasks of ``key`` that are setup tasks."""
        return frozenset(
            up for up in self._by_key[key].after if self._by_key[up].role is TaskRole.SETUP
        )

    def leaves(self) -> tuple[str, ...]:
        """The tasks that decide the run (see the module docstring)."""
        return self._leaves

    def ends(self) -> frozenset[str]:
        """The tasks no task runs after (a leaf may have teardown tasks after it)."""
        return self._ends

    def expanded(self, groups: Mapping[str, int]) -> RunGraph:
        """The graph of a run whose mapped tasks were expanded: each task of ``groups``
        (task key -> how many instances) becomes one node per instance (:func:`instance_key`)
        with the task's edges, and its downstream tasks wait for all of them. So trigger rules,
        leaves and deadlocks see a mapped group as all of its instances."""
        if not groups:
            return self
        nodes: list[TaskNode] = []
        for node in self.nodes:
            after = tuple(key for up in node.after for key in _members(up, groups))
            if node.key in groups:
                nodes.extend(
                    TaskNode(
                        instance_key(node.key, index),
                        after,
                        node.trigger_rule,
                        node.role,
                        node.decides_run,
                    )
                    for index in range(groups[node.key])
                )
            else:
                nodes.append(
                    TaskNode(node.key, after, node.trigger_rule, node.role, node.decides_run)
                )
        return RunGraph(tuple(nodes))

    def _find_leaves(self) -> tuple[str, ...]:
        result = []
        for node in self.nodes:
            if node.role is TaskRole.TEARDOWN and not node.decides_run:
                continue
            below = self._downstream[node.key]
            if all(self._by_key[d].role is TaskRole.TEARDOWN for d in below):
                result.append(node.key)
        return tuple(result)


def instance_key(task_key: str, map_index: int) -> str:
    """How an instance is named in a run's graph: its task key, ``KEY[i]`` for a mapped one
    (a task key never holds ``[``)."""
    return task_key if map_index < 0 else f"{task_key}[{map_index}]"


def _members(key: str, groups: Mapping[str, int]) -> tuple[str, ...]:
    count = groups.get(key)
    if count is None:
        return (key,)
    return tuple(instance_key(key, index) for index in range(count))


#: How many instances a run-level event names one by one; a larger run is named by its counts
#: and the instances that did not succeed, so one event stays small whatever the run's size.
NAMED_INSTANCES = 50


def states_evidence(states: Mapping[str, InstanceState]) -> dict[str, JSONValue]:
    """The instances' states a run-level decision rested on, as evidence bounded in size."""
    if len(states) <= NAMED_INSTANCES:
        return {"instances": {key: state.value for key, state in states.items()}}
    unsuccessful = sorted(
        key
        for key, state in states.items()
        if state not in (InstanceState.SUCCESS, InstanceState.SKIPPED)
    )
    named = unsuccessful[:NAMED_INSTANCES]
    return {
        "instance_counts": dict(Counter(state.value for state in states.values())),
        "instances": {key: states[key].value for key in named},
        "instances_not_named": len(states) - len(named),
    }


def pipeline_order(graph: RunGraph) -> tuple[str, ...]:
    """The tasks in an order that puts each after every task it waits for; among the tasks
    that are ready at the same point, the one the definition lists first comes first."""
    position = {key: index for index, key in enumerate(graph.keys)}
    waiting = {key: len(set(graph.node(key).after)) for key in graph.keys}
    ready = [(position[key], key) for key, count in waiting.items() if count == 0]
    heapq.heapify(ready)
    ordered: list[str] = []
    while ready:
        _, key = heapq.heappop(ready)
        ordered.append(key)
        for down in dict.fromkeys(graph.downstream(key)):
            waiting[down] -= 1
            if waiting[down] == 0:
                heapq.heappush(ready, (position[down], down))
    return tuple(ordered)


@dataclass(frozen=True)
class RunVerdict:
    """The run's execution state, why, and (for a deadlock) the instances that block."""

    state: RunExecutionState
    reason: str
    blocking: tuple[str, ...] = ()


def execution_state(
    graph: RunGraph,
    states: Mapping[str, InstanceState],
    *,
    waiting_for_time: Collection[str] = frozenset(),
) -> RunVerdict:
    """Decide the run's execution state from its instances.

    ``states`` maps task keys to instance states; a task with no instance yet counts as
    CREATED and instances of tasks outside the graph are ignored. ``waiting_for_time`` names
    the instances that wait for a time (an UP_FOR_RETRY with a future ``retry_at``).
    """

    def state_of(key: str) -> InstanceState:
        return states.get(key, InstanceState.CREATED)

    timed = frozenset(waiting_for_time)
    active: list[str] = []
    waiting: list[str] = []
    ready: list[str] = []
    blocked: dict[str, tuple[str, ...]] = {}
    for key in graph.keys:
        state = state_of(key)
        if state.is_terminal:
            continue
        if state in ACTIVE_STATES:
            active.append(key)
        elif key in timed:
            waiting.append(key)
        elif state is InstanceState.UP_FOR_RETRY:
            ready.append(key)
        else:
            node = graph.node(key)
            upstream = {up: state_of(up) for up in node.after}
            decision = evaluate(
                node.trigger_rule, upstream, setup_upstreams=graph.setup_upstreams(key)
            )
            if decision.outcome is RuleOutcome.WAIT:
                blocked[key] = tuple(up for up in node.after if not state_of(up).is_terminal)
            else:
                ready.append(key)

    leaves = graph.leaves()
    failing = [leaf for leaf in leaves if state_of(leaf) in FAILING_LEAF_STATES]

    if active or waiting or ready or blocked:
        if not (active or waiting or ready):
            return _deadlock(blocked)
        parts = []
        if active:
            parts.append(reasons.ACTIVE.format(tasks=_names(active)))
        if waiting:
            parts.append(reasons.WAITING_FOR_RETRY.format(tasks=_names(waiting)))
        if ready:
            parts.append(reasons.READY.format(tasks=_names(ready)))
        if blocked:
            parts.append(reasons.WAITING_FOR_UPSTREAM.format(tasks=_names(blocked)))
        if failing:
            already = reasons.LEAF_ALREADY if len(failing) == 1 else reasons.LEAVES_ALREADY
            parts.append(already.format(ended=_describe(failing, state_of)))
        return RunVerdict(RunExecutionState.RUNNING, "; ".join(parts))

    if failing:
        ended = reasons.LEAF_ENDED if len(failing) == 1 else reasons.LEAVES_ENDED
        return RunVerdict(
            RunExecutionState.FAILED, ended.format(ended=_describe(failing, state_of))
        )
    reason = reasons.EVERY_LEAF_SUCCEEDED.format()
    ignored = [
        key
        for key in graph.keys
        if graph.node(key).role is TaskRole.TEARDOWN
        and not graph.node(key).decides_run
        and state_of(key) in FAILING_LEAF_STATES
    ]
    if ignored:
        reason = reasons.TEARDOWN_IGNORED.format(ended=_describe(ignored, state_of))
    return RunVerdict(RunExecutionState.SUCCESS, reason)


def implied_by_instances(
    graph: RunGraph, instances: Iterable[tuple[str, int, InstanceState]]
) -> RunVerdict:
    """The execution state a run's instances imply, given as (task key, map index, state):
    a mapped task counts as its expanded instances; instances of tasks outside the graph
    (publication steps) are ignored. What a finished run follows, and what ``verify``
    checks it against."""
    found = list(instances)
    groups: dict[str, int] = {}
    for key, index, _ in found:
        if index >= 0:
            groups[key] = groups.get(key, 0) + 1
    states = {instance_key(key, index): state for key, index, state in found}
    return execution_state(graph.expanded(groups), states)


def after_cancel(graph: RunGraph, states: Mapping[str, InstanceState]) -> RunVerdict | None:
    """How a CANCELLING run ends once every instance has (None while any is unfinished).

    CANCELLED if the cancel stopped at least one instance. If every instance had ended by
    itself before the cancel took effect, the run is what they imply (SUCCESS when its leaves
    succeeded), with a reason saying the cancel came too late: a run whose every instance
    succeeded was not cancelled.
    """
    ended = {key: states.get(key, InstanceState.CREATED) for key in graph.keys}
    if not all(state.is_terminal for state in ended.values()):
        return None
    if any(state is InstanceState.CANCELLED for state in ended.values()):
        return RunVerdict(RunExecutionState.CANCELLED, reasons.ALL_STOPPED.format())
    verdict = execution_state(graph, ended)
    return RunVerdict(verdict.state, reasons.CANCEL_TOO_LATE.format(reason=verdict.reason))


def find_cycles(after: Mapping[str, Sequence[str]]) -> list[tuple[str, ...]]:
    """One cycle per group of tasks that wait for each other, in run order.

    ``after`` maps each task to the tasks it runs after. Each cycle starts at its first task in
    the mapping's order and follows "runs before" edges back to it: ``(a, b, c)`` means
    ``a -> b -> c -> a``. A task that runs after itself is a cycle of one. Edges to tasks not
    in the mapping are ignored.
    """
    order = {key: i for i, key in enumerate(after)}
    downstream: dict[str, list[str]] = {key: [] for key in after}
    for key, ups in after.items():
        for up in ups:
            if up in downstream and key not in downstream[up]:
                downstream[up].append(key)
    cycles = []
    for component in _strongly_connected(list(after), downstream):
        members = set(component)
        start = min(component, key=order.__getitem__)
        if len(component) == 1 and start not in downstream[start]:
            continue
        cycles.append(_cycle_through(start, members, downstream))
    cycles.sort(key=lambda cycle: order[cycle[0]])
    return cycles


def _strongly_connected(keys: list[str], edges: Mapping[str, list[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative so that a long chain cannot exhaust the stack."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for root in keys:
        if root in index:
            continue
        work: list[tuple[str, int]] = [(root, 0)]
        while work:
            key, i = work.pop()
            if i == 0:
                index[key] = low[key] = counter
                counter += 1
                stack.append(key)
                on_stack.add(key)
            recurse = False
            children = edges[key]
            while i < len(children):
                child = children[i]
                i += 1
                if child not in index:
                    work.append((key, i))
                    work.append((child, 0))
                    recurse = True
                    break
                if child in on_stack:
                    low[key] = min(low[key], index[child])
            if recurse:
                continue
            if low[key] == index[key]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == key:
                        break
                components.append(component)
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[key])
    return components


def _cycle_through(
    start: str, members: set[str], edges: Mapping[str, list[str]]
) -> tuple[str, ...]:
    """The shortest path from ``start`` back to itself inside one component."""
    previous: dict[str, str] = {}
    queue = deque([start])
    while queue:
        key = queue.popleft()
        for child in edges[key]:
            if child not in members:
                continue
            if child == start:
                path = [key]
                while path[-1] != start:
                    path.append(previous[path[-1]])
                return tuple(reversed(path))
            if child not in previous:
                previous[child] = key
                queue.append(child)
    return (start,)  # unreachable for a real component; keeps the type total


def _deadlock(blocked: Mapping[str, tuple[str, ...]]) -> RunVerdict:
    cycles = find_cycles(blocked)
    waits = "; ".join(
        reasons.WAITS_FOR.format(task=key, tasks=_names(ups)) for key, ups in blocked.items()
    )
    reason = reasons.DEADLOCK.format(waits=waits)
    if cycles:
        shown = ", ".join(" -> ".join((*cycle, cycle[0])) for cycle in cycles)
        reason = reasons.DEADLOCK_CYCLE.format(waits=waits, cycles=shown)
    return RunVerdict(RunExecutionState.FAILED, reason, blocking=tuple(blocked))


def _describe(keys: Iterable[str], state_of: Callable[[str], InstanceState]) -> str:
    parts = []
    for key in keys:
        state = state_of(key)
        parts.append(reasons.TASK_ENDED.format(task=key, state=state.value.lower()))
    return ", ".join(parts)


def _names(keys: Iterable[str], limit: int = 5) -> str:
    items = list(keys)
    if len(items) > limit:
        return reasons.AND_MORE.format(tasks=", ".join(items[:limit]), count=len(items) - limit)
    return ", ".join(items)
