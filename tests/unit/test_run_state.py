"""The run's execution state from its leaves (docs/definitions.md)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from veritask.core import run_state
from veritask.core.run_state import (
    InvalidGraph,
    RunGraph,
    TaskNode,
    TaskRole,
    after_cancel,
    execution_state,
    find_cycles,
    implied_by_instances,
)
from veritask.core.states import TERMINAL_INSTANCE_STATES, InstanceState, RunExecutionState
from veritask.core.trigger_rules import RuleOutcome, TriggerRule, evaluate

S = InstanceState.SUCCESS
F = InstanceState.FAILED
UF = InstanceState.UPSTREAM_FAILED
K = InstanceState.SKIPPED
C = InstanceState.CREATED
R = InstanceState.RUNNING

RUNNING = RunExecutionState.RUNNING
SUCCESS = RunExecutionState.SUCCESS
FAILED = RunExecutionState.FAILED


def graph(*nodes: TaskNode) -> RunGraph:
    return RunGraph(nodes)


def task(
    key: str,
    *after: str,
    rule: TriggerRule = TriggerRule.ALL_SUCCESS,
    role: TaskRole = TaskRole.WORK,
    decides_run: bool = False,
) -> TaskNode:
    return TaskNode(key, tuple(after), rule, role, decides_run)


#: extract -> choose -> (weekday | weekend) -> join
BRANCHED = graph(
    task("extract"),
    task("choose", "extract"),
    task("weekday", "choose"),
    task("weekend", "choose"),
    task("join", "weekday", "weekend", rule=TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS),
)

#: setup -> work -> teardown, and setup -> teardown
WITH_TEARDOWN = graph(
    task("setup", role=TaskRole.SETUP),
    task("work", "setup"),
    task(
        "teardown", "setup", "work", role=TaskRole.TEARDOWN, rule=TriggerRule.ALL_DONE_SETUP_SUCCESS
    ),
)


# -- leaves ------------------------------------------------------------------------------------


def test_leaves_are_the_tasks_nothing_runs_after() -> None:
    assert BRANCHED.leaves() == ("join",)
    fan_out = graph(task("a"), task("b", "a"), task("c", "a"))
    assert fan_out.leaves() == ("b", "c")


def test_a_work_task_whose_only_downstream_is_a_teardown_is_a_leaf() -> None:
    assert WITH_TEARDOWN.leaves() == ("work",)


def test_the_ends_are_the_tasks_nothing_waits_for_teardowns_included() -> None:
    # What a scheduler may read late: a leaf with a teardown after it is not an end.
    assert WITH_TEARDOWN.ends() == frozenset({"teardown"})
    assert BRANCHED.ends() == frozenset({"join"})


def test_a_teardown_that_decides_is_a_leaf_too() -> None:
    deciding = graph(
        task("setup", role=TaskRole.SETUP),
        task("work", "setup"),
        task("teardown", "setup", "work", role=TaskRole.TEARDOWN, decides_run=True),
    )
    assert deciding.leaves() == ("work", "teardown")


def test_a_graph_must_name_known_tasks() -> None:
    with pytest.raises(InvalidGraph, match="unknown task 'nope'"):
        graph(task("a", "nope"))
    with pytest.raises(InvalidGraph, match="appears twice"):
        graph(task("a"), task("a"))


# -- decided runs ------------------------------------------------------------------------------


def test_a_skipped_branch_is_a_success() -> None:
    states = {"extract": S, "choose": S, "weekday": S, "weekend": K, "join": S}
    verdict = execution_state(BRANCHED, states)
    assert verdict.state is SUCCESS
    assert verdict.reason == "every leaf succeeded or was skipped"


def test_a_skipped_leaf_is_a_success() -> None:
    states = {"extract": S, "choose": S, "weekday": K, "weekend": K, "join": K}
    assert execution_state(BRANCHED, states).state is SUCCESS


def test_a_failed_leaf_fails_the_run() -> None:
    chain = graph(task("extract"), task("load", "extract"))
    verdict = execution_state(chain, {"extract": S, "load": F})
    assert verdict.state is FAILED
    assert verdict.reason == "leaf load failed"


def test_an_upstream_failed_leaf_fails_the_run() -> None:
    chain = graph(task("extract"), task("load", "extract"))
    verdict = execution_state(chain, {"extract": InstanceState.TIMEOUT, "load": UF})
    assert verdict.state is FAILED
    assert verdict.reason == "leaf load upstream_failed"


def test_a_failure_that_is_not_a_leaf_does_not_decide_alone() -> None:
    chain = graph(task("extract"), task("report", "extract", rule=TriggerRule.ALL_DONE))
    assert execution_state(chain, {"extract": F, "report": S}).state is SUCCESS


def test_a_failed_teardown_that_does_not_decide_is_ignored() -> None:
    verdict = execution_state(WITH_TEARDOWN, {"setup": S, "work": S, "teardown": F})
    assert verdict.state is SUCCESS
    assert "teardown teardown failed, which does not decide the run" in verdict.reason


def test_the_work_still_fails_the_run_when_the_teardown_succeeds() -> None:
    verdict = execution_state(WITH_TEARDOWN, {"setup": S, "work": F, "teardown": S})
    assert verdict.state is FAILED
    assert verdict.reason == "leaf work failed"


def test_a_teardown_that_decides_fails_the_run() -> None:
    deciding = graph(
        task("setup", role=TaskRole.SETUP),
        task("work", "setup"),
        task("teardown", "setup", "work", role=TaskRole.TEARDOWN, decides_run=True),
    )
    verdict = execution_state(deciding, {"setup": S, "work": S, "teardown": F})
    assert verdict.state is FAILED
    assert verdict.reason == "leaf teardown failed"


def test_several_failing_leaves_are_all_named() -> None:
    fan_out = graph(task("a"), task("b", "a"), task("c", "a"))
    verdict = execution_state(fan_out, {"a": S, "b": F, "c": InstanceState.CANCELLED})
    assert verdict.reason == "leaves b failed, c cancelled"


def test_removed_instances_and_unknown_tasks_do_not_count() -> None:
    chain = graph(task("a"), task("b", "a"))
    assert execution_state(chain, {"a": S, "b": S, "old_task": F}).state is SUCCESS
    assert execution_state(chain, {"a": S, "b": InstanceState.REMOVED}).state is SUCCESS


# -- running -----------------------------------------------------------------------------------


def test_a_run_with_a_running_instance_is_running() -> None:
    verdict = execution_state(BRANCHED, {"extract": S, "choose": R})
    assert verdict.state is RUNNING
    assert verdict.reason == "active: choose; waiting for upstream: weekday, weekend, join"


def test_an_instance_that_waits_for_its_retry_keeps_the_run_running() -> None:
    chain = graph(task("extract"), task("load", "extract"))
    states = {"extract": InstanceState.UP_FOR_RETRY, "load": C}
    verdict = execution_state(chain, states, waiting_for_time={"extract"})
    assert verdict.state is RUNNING
    assert "waiting for a retry: extract" in verdict.reason


def test_a_ready_instance_keeps_the_run_running() -> None:
    chain = graph(task("extract"), task("load", "extract"))
    verdict = execution_state(chain, {"extract": S, "load": C})
    assert verdict.state is RUNNING
    assert verdict.reason == "ready: load"
    # A task that no instance exists for yet counts as CREATED.
    assert execution_state(chain, {"extract": S}).reason == "ready: load"


def test_a_skip_to_record_keeps_the_run_running() -> None:
    chain = graph(task("extract"), task("load", "extract"))
    assert execution_state(chain, {"extract": K, "load": C}).state is RUNNING


def test_a_failed_leaf_is_reported_while_the_rest_still_runs() -> None:
    fan_out = graph(task("a"), task("b", "a"), task("c", "a"))
    verdict = execution_state(fan_out, {"a": S, "b": F, "c": R})
    assert verdict.state is RUNNING
    assert verdict.reason == "active: c; leaf b failed already"


@pytest.mark.parametrize(
    "state",
    [
        InstanceState.SCHEDULED,
        InstanceState.QUEUED,
        InstanceState.LOST,
        InstanceState.CANCELLING,
        InstanceState.CANCEL_FAILED,
    ],
)
def test_an_active_instance_keeps_the_run_running(state: InstanceState) -> None:
    chain = graph(task("a"), task("b", "a"))
    assert execution_state(chain, {"a": state, "b": C}).state is RUNNING


# -- deadlock ----------------------------------------------------------------------------------


def test_instances_that_wait_for_each_other_are_a_deadlock() -> None:
    cyclic = graph(task("start"), task("a", "start", "c"), task("b", "a"), task("c", "b"))
    verdict = execution_state(cyclic, {"start": S, "a": C, "b": C, "c": C})
    assert verdict.state is FAILED
    assert verdict.blocking == ("a", "b", "c")
    assert verdict.reason == (
        "deadlock: a waits for c; b waits for a; c waits for b (cycle a -> b -> c -> a)"
    )


def test_a_cycle_is_not_a_deadlock_while_something_else_runs() -> None:
    cyclic = graph(task("other"), task("a", "b"), task("b", "a"))
    assert execution_state(cyclic, {"other": R, "a": C, "b": C}).state is RUNNING
    verdict = execution_state(cyclic, {"other": S, "a": C, "b": C})
    assert verdict.state is FAILED
    assert verdict.reason.startswith("deadlock:")


# -- cycles ------------------------------------------------------------------------------------


def test_find_cycles_names_each_cycle_in_run_order() -> None:
    after = {"a": ["c"], "b": ["a"], "c": ["b"], "d": [], "e": ["f"], "f": ["e"], "g": ["g"]}
    assert find_cycles(after) == [("a", "b", "c"), ("e", "f"), ("g",)]
    assert find_cycles({"a": [], "b": ["a"]}) == []


def test_find_cycles_handles_a_long_chain() -> None:
    after = {f"t{i}": [f"t{i - 1}"] if i else [] for i in range(5000)}
    assert find_cycles(after) == []
    after["t0"] = ["t4999"]
    (cycle,) = find_cycles(after)
    assert len(cycle) == 5000


# -- properties --------------------------------------------------------------------------------

KEYS = ["a", "b", "c", "d", "e"]


@st.composite
def dags(draw: st.DrawFn) -> RunGraph:
    nodes = []
    for i, key in enumerate(KEYS):
        after = draw(st.lists(st.sampled_from(KEYS[:i]), unique=True)) if i else []
        rule = draw(st.sampled_from(list(TriggerRule)))
        nodes.append(TaskNode(key, tuple(after), rule))
    return RunGraph(tuple(nodes))


@given(dags(), st.lists(st.sampled_from(sorted(InstanceState)), min_size=5, max_size=5))
def test_property_a_dag_never_deadlocks(run_graph: RunGraph, states: list[InstanceState]) -> None:
    verdict = execution_state(run_graph, dict(zip(KEYS, states, strict=True)))
    assert not verdict.reason.startswith("deadlock")


@given(dags(), st.lists(st.sampled_from(sorted(TERMINAL_INSTANCE_STATES)), min_size=5, max_size=5))
def test_property_a_finished_run_is_decided(
    run_graph: RunGraph, states: list[InstanceState]
) -> None:
    verdict = execution_state(run_graph, dict(zip(KEYS, states, strict=True)))
    assert verdict.state in (SUCCESS, FAILED)


def test_a_cancel_ends_as_the_instances_say() -> None:
    chain = graph(task("a"), task("b", "a"))
    assert after_cancel(chain, {"a": S, "b": R}) is None
    stopped = after_cancel(chain, {"a": S, "b": InstanceState.CANCELLED})
    assert stopped is not None
    assert (stopped.state, stopped.reason) == (
        RunExecutionState.CANCELLED,
        "cancelled; every instance stopped",
    )
    too_late = after_cancel(chain, {"a": S, "b": S})
    assert too_late is not None
    assert too_late.state is SUCCESS
    assert too_late.reason.startswith("every leaf succeeded")
    assert "the cancel came too late" in too_late.reason
    failed = after_cancel(chain, {"a": S, "b": F})
    assert failed is not None
    assert failed.state is FAILED
    assert "leaf b failed" in failed.reason and "too late" in failed.reason


# -- mapped groups ---------------------------------------------------------------------------


def mapped_graph() -> RunGraph:
    return graph(task("list"), task("load", "list"), task("report", "load"))


def test_an_expanded_mapped_task_is_one_node_per_instance_and_its_downstream_waits_for_all() -> (
    None
):
    expanded = mapped_graph().expanded({"load": 3})
    assert expanded.keys == ("list", "load[0]", "load[1]", "load[2]", "report")
    assert expanded.node("load[1]").after == ("list",)
    assert expanded.node("report").after == ("load[0]", "load[1]", "load[2]")
    assert mapped_graph().expanded({}) == mapped_graph()


def test_the_run_waits_for_every_instance_of_a_group_and_a_failed_one_fails_a_leaf_group() -> None:
    leaves = graph(task("list"), task("load", "list")).expanded({"load": 2})
    running = {"list": S, "load": S, "load[0]": S, "load[1]": R}
    assert execution_state(leaves, running).state is RUNNING
    failed = {"list": S, "load": S, "load[0]": S, "load[1]": F}
    verdict = execution_state(leaves, failed)
    assert (verdict.state, verdict.reason) == (FAILED, "leaf load[1] failed")
    done = {"list": S, "load": S, "load[0]": S, "load[1]": S}
    assert execution_state(leaves, done).state is SUCCESS


@given(st.lists(st.sampled_from([S, F, K]), min_size=1, max_size=8))
def test_trigger_rules_see_a_group_as_all_of_its_instances(ends: list[InstanceState]) -> None:
    expanded = mapped_graph().expanded({"load": len(ends)})
    states = {f"load[{i}]": s for i, s in enumerate(ends)}
    node = expanded.node("report")
    upstream = {key: states[key] for key in node.after}
    outcome = evaluate(node.trigger_rule, upstream).outcome
    if F in ends:
        assert outcome is RuleOutcome.UPSTREAM_FAILED
    elif K in ends:
        assert outcome is RuleOutcome.SKIP
    else:
        assert outcome is RuleOutcome.RUN


def test_what_instances_imply_counts_a_mapped_task_as_each_of_its_instances() -> None:
    # One mapped instance failed; the last one by map index succeeded. The group is what
    # decides, never whichever instance was read last (verify read it so once).
    pipeline = graph(task("split"), task("fan", "split"))
    instances = [("split", -1, S), ("fan", -1, S), ("fan", 0, S), ("fan", 1, F), ("fan", 2, S)]

    verdict = implied_by_instances(pipeline, instances)

    assert verdict.state is FAILED
    assert "fan[1] failed" in verdict.reason
    assert implied_by_instances(pipeline, [("split", -1, S), ("fan", -1, S)]).state is SUCCESS


def test_a_large_runs_evidence_names_its_counts_and_what_did_not_succeed() -> None:
    states = {f"t{i:05d}": InstanceState.SUCCESS for i in range(20_000)}
    states["t00007"] = InstanceState.FAILED
    evidence = run_state.states_evidence(states)
    assert evidence["instance_counts"] == {"SUCCESS": 19_999, "FAILED": 1}
    assert evidence["instances"] == {"t00007": "FAILED"}
    assert evidence["instances_not_named"] == 19_999
    small = run_state.states_evidence({"a": InstanceState.SUCCESS})
    assert small == {"instances": {"a": "SUCCESS"}}
