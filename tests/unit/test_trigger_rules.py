"""Trigger rules, one table per rule, deciding as Airflow 3's scheduler does.

Each case lists the direct upstream states and the outcome. Codes: ``S`` success, ``F`` failed,
``UF`` upstream_failed, ``K`` skipped, ``U`` unfinished (running). docs/trigger-rules.md has
the same table in words, and the cases where Airflow's code differs from its docs;
test_trigger_rules_parity.py tries every mix of upstream states against every rule.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from veritask import docgen
from veritask.core.states import TERMINAL_INSTANCE_STATES, InstanceState
from veritask.core.trigger_rules import (
    FAILED_STATES,
    InvalidBranch,
    RuleOutcome,
    TriggerRule,
    branch_skips,
    evaluate,
)

S = InstanceState.SUCCESS
F = InstanceState.FAILED
UF = InstanceState.UPSTREAM_FAILED
K = InstanceState.SKIPPED
U = InstanceState.RUNNING

RUN = RuleOutcome.RUN
SKIP = RuleOutcome.SKIP
UPF = RuleOutcome.UPSTREAM_FAILED
WAIT = RuleOutcome.WAIT

Case = tuple[tuple[InstanceState, ...], RuleOutcome]


def upstream_of(states: tuple[InstanceState, ...]) -> dict[str, InstanceState]:
    return {f"u{i}": state for i, state in enumerate(states)}


def check(rule: TriggerRule, states: tuple[InstanceState, ...], expected: RuleOutcome) -> None:
    decision = evaluate(rule, upstream_of(states))
    assert decision.outcome is expected, decision.reason


def cases(*rows: Case) -> pytest.MarkDecorator:
    return pytest.mark.parametrize(
        ("states", "expected"),
        rows,
        ids=["+".join(s.name.lower() for s in row[0]) or "none" for row in rows],
    )


# -- one table per rule ------------------------------------------------------------------------


@cases(
    ((S, S), RUN),
    ((F, S), UPF),
    ((UF, S), UPF),
    ((K, S), SKIP),
    ((U, S), WAIT),
    ((F, U), UPF),  # does not wait: the rule can no longer be met
    ((K, U), SKIP),
    ((F, K), UPF),  # a failure outweighs a skip
    ((K, K), SKIP),
)
def test_all_success(states: tuple[InstanceState, ...], expected: RuleOutcome) -> None:
    check(TriggerRule.ALL_SUCCESS, states, expected)


@cases(
    ((F, F), RUN),
    ((F, UF), RUN),
    ((UF, UF), RUN),
    ((F, S), SKIP),
    ((F, K), SKIP),  # skips cascade through all_failed
    ((S, S), SKIP),
    ((F, U), WAIT),
    ((S, U), SKIP),
    ((K, K), SKIP),
)
def test_all_failed(states: tuple[InstanceState, ...], expected: RuleOutcome) -> None:
    check(TriggerRule.ALL_FAILED, states, expected)


@cases(
    ((S, S), RUN),
    ((F, UF), RUN),
    ((K, K), RUN),
    ((S, F, UF, K), RUN),
    ((S, U), WAIT),
    ((F, U), WAIT),
)
def test_all_done(states: tuple[InstanceState, ...], expected: RuleOutcome) -> None:
    check(TriggerRule.ALL_DONE, states, expected)


@cases(
    ((S, S), RUN),
    ((S, F), RUN),
    ((F, UF), UPF),
    ((K, K), SKIP),
    ((S, K), SKIP),  # as Airflow 3: any skipped upstream skips it, before anything else
    ((F, K), SKIP),
    ((UF, K), SKIP),
    ((S, U), WAIT),
    ((K, U), SKIP),  # does not wait: the skip already settles it
)
def test_all_done_min_one_success(states: tuple[InstanceState, ...], expected: RuleOutcome) -> None:
    check(TriggerRule.ALL_DONE_MIN_ONE_SUCCESS, states, expected)


@cases(
    ((S, U), RUN),  # does not wait for the rest
    ((S, F), RUN),
    ((F, F), UPF),
    ((UF, K), UPF),
    ((F, K), UPF),
    ((K, K), SKIP),
    ((F, U), WAIT),
    ((K, U), WAIT),
)
def test_one_success(states: tuple[InstanceState, ...], expected: RuleOutcome) -> None:
    check(TriggerRule.ONE_SUCCESS, states, expected)


@cases(
    ((F, U), RUN),  # does not wait for the rest
    ((F, S), RUN),
    ((S, S), SKIP),
    ((K, K), SKIP),
    ((S, K), SKIP),
    ((UF, S), RUN),  # as Airflow 3: UPSTREAM_FAILED counts as a failure
    ((UF, UF), RUN),
    ((S, U), WAIT),
    ((UF, U), RUN),
)
def test_one_failed(states: tuple[InstanceState, ...], expected: RuleOutcome) -> None:
    check(TriggerRule.ONE_FAILED, states, expected)


@cases(
    ((S, U), RUN),
    ((F, U), RUN),
    ((S, F), RUN),
    ((K, K), SKIP),
    ((UF, K), SKIP),  # upstream_failed is neither a success nor a failure of the upstream
    ((UF, UF), SKIP),
    ((K, U), WAIT),
    ((UF, U), WAIT),
)
def test_one_done(states: tuple[InstanceState, ...], expected: RuleOutcome) -> None:
    check(TriggerRule.ONE_DONE, states, expected)


@cases(
    ((S, S), RUN),
    ((S, K), RUN),
    ((K, K), RUN),  # all skipped still runs (none failed)
    ((F, S), UPF),
    ((UF, K), UPF),
    ((F, U), UPF),  # does not wait once something failed
    ((S, U), WAIT),
    ((K, U), WAIT),
)
def test_none_failed(states: tuple[InstanceState, ...], expected: RuleOutcome) -> None:
    check(TriggerRule.NONE_FAILED, states, expected)


@cases(
    ((S, S), RUN),
    ((S, K), RUN),  # the join after a branch
    ((K, K), SKIP),
    ((F, S), UPF),
    ((UF, K), UPF),
    ((F, U), UPF),
    ((S, U), WAIT),
    ((K, U), WAIT),
)
def test_none_failed_min_one_success(
    states: tuple[InstanceState, ...], expected: RuleOutcome
) -> None:
    check(TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS, states, expected)


@cases(
    ((S, S), RUN),
    ((S, F), RUN),
    ((F, UF), RUN),
    ((S, K), SKIP),
    ((K, K), SKIP),
    ((K, U), SKIP),  # a skip already settles it
    ((S, U), WAIT),
    ((F, U), WAIT),
)
def test_none_skipped(states: tuple[InstanceState, ...], expected: RuleOutcome) -> None:
    check(TriggerRule.NONE_SKIPPED, states, expected)


@cases(
    ((K, K), RUN),
    ((K, S), SKIP),
    ((K, F), SKIP),
    ((K, UF), SKIP),
    ((S, S), SKIP),
    ((S, U), SKIP),  # a non-skip already settles it
    ((K, U), WAIT),
)
def test_all_skipped(states: tuple[InstanceState, ...], expected: RuleOutcome) -> None:
    check(TriggerRule.ALL_SKIPPED, states, expected)


@cases(
    ((U, U), RUN),
    ((F, UF), RUN),
    ((K, K), RUN),
    ((S, U), RUN),
)
def test_always(states: tuple[InstanceState, ...], expected: RuleOutcome) -> None:
    check(TriggerRule.ALWAYS, states, expected)


@pytest.mark.parametrize(
    ("setup_state", "work_state", "expected"),
    [
        (S, S, RUN),
        (S, F, RUN),  # a teardown runs even when the work failed
        (S, UF, RUN),
        (S, K, RUN),
        (K, K, SKIP),  # every setup skipped: the teardown is skipped too
        (F, UF, UPF),  # no setup succeeded
        (UF, UF, UPF),
        (S, U, WAIT),
        (U, U, WAIT),
    ],
)
def test_all_done_setup_success(
    setup_state: InstanceState, work_state: InstanceState, expected: RuleOutcome
) -> None:
    decision = evaluate(
        TriggerRule.ALL_DONE_SETUP_SUCCESS,
        {"setup": setup_state, "work": work_state},
        setup_upstreams=frozenset({"setup"}),
    )
    assert decision.outcome is expected, decision.reason


@pytest.mark.parametrize(
    ("setups", "expected"),
    [
        ((S, F), RUN),  # at least one setup succeeded
        ((K, K), SKIP),
        ((K, F), UPF),  # neither all skipped nor one success
    ],
)
def test_all_done_setup_success_with_several_setups(
    setups: tuple[InstanceState, InstanceState], expected: RuleOutcome
) -> None:
    upstream = {"s1": setups[0], "s2": setups[1], "work": S}
    decision = evaluate(
        TriggerRule.ALL_DONE_SETUP_SUCCESS, upstream, setup_upstreams=frozenset({"s1", "s2"})
    )
    assert decision.outcome is expected


def test_all_done_setup_success_without_a_setup_upstream_is_all_done() -> None:
    upstream = {"a": F, "b": K}
    assert evaluate(TriggerRule.ALL_DONE_SETUP_SUCCESS, upstream).outcome is RUN
    upstream_waiting = {"a": F, "b": U}
    assert evaluate(TriggerRule.ALL_DONE_SETUP_SUCCESS, upstream_waiting).outcome is WAIT


# -- how Veritask's states count --------------------------------------------------------------


@pytest.mark.parametrize("rule", list(TriggerRule))
def test_a_task_without_upstream_runs(rule: TriggerRule) -> None:
    assert evaluate(rule, {}).outcome is RUN


@pytest.mark.parametrize("rule", list(TriggerRule))
def test_removed_upstreams_are_left_out(rule: TriggerRule) -> None:
    with_removed = {"gone": InstanceState.REMOVED, "a": S, "b": K}
    assert evaluate(rule, with_removed) == evaluate(rule, {"a": S, "b": K})
    assert evaluate(rule, {"gone": InstanceState.REMOVED}).outcome is RUN


@pytest.mark.parametrize("state", sorted(FAILED_STATES))
def test_every_failure_state_counts_as_failed(state: InstanceState) -> None:
    assert evaluate(TriggerRule.ALL_SUCCESS, {"a": state}).outcome is UPF
    assert evaluate(TriggerRule.ONE_FAILED, {"a": state, "b": U}).outcome is RUN
    assert evaluate(TriggerRule.ALL_FAILED, {"a": state}).outcome is RUN


@pytest.mark.parametrize(
    "state", sorted(set(InstanceState) - TERMINAL_INSTANCE_STATES), ids=lambda s: s.name
)
def test_unfinished_states_are_not_finished(state: InstanceState) -> None:
    for rule in (TriggerRule.ALL_SUCCESS, TriggerRule.ALL_DONE, TriggerRule.ONE_FAILED):
        assert evaluate(rule, {"a": S, "b": state}).outcome is WAIT


def test_the_reason_names_the_upstream_tasks() -> None:
    assert evaluate(TriggerRule.ALL_SUCCESS, {"extract": S, "load": U}).reason == (
        "waiting for load"
    )
    failed = evaluate(TriggerRule.ALL_SUCCESS, {"extract": F, "load": S})
    assert failed.reason == "upstream extract failed"
    assert failed.state is InstanceState.UPSTREAM_FAILED
    skipped = evaluate(TriggerRule.ALL_SUCCESS, {"extract": K})
    assert skipped.state is InstanceState.SKIPPED
    assert evaluate(TriggerRule.ALL_SUCCESS, {"extract": S}).state is None


def test_every_rule_has_a_meaning() -> None:
    docs = docgen.member_docs(TriggerRule)
    assert set(docs) == {rule.name for rule in TriggerRule}
    assert all(docs.values())


# -- branches ----------------------------------------------------------------------------------


def test_a_branch_skips_the_direct_downstream_tasks_it_did_not_choose() -> None:
    assert branch_skips(["a", "b", "c"], ["b"]) == frozenset({"a", "c"})
    assert branch_skips(["a", "b"], ["a", "b"]) == frozenset()
    assert branch_skips(["a", "b"], []) == frozenset({"a", "b"})


def test_a_branch_may_choose_only_direct_downstream_tasks() -> None:
    with pytest.raises(InvalidBranch, match="the branch chose load, not directly downstream"):
        branch_skips(["a", "b"], ["a", "load"])


# -- properties --------------------------------------------------------------------------------

states = st.sampled_from(sorted(InstanceState))
terminal = st.sampled_from(sorted(TERMINAL_INSTANCE_STATES))
upstreams = st.dictionaries(st.sampled_from(["a", "b", "c", "d", "e"]), states, max_size=5)
rules = st.sampled_from(list(TriggerRule))


@given(upstreams, st.sampled_from(sorted(FAILED_STATES)))
def test_property_all_success_never_runs_after_a_failure(
    upstream: dict[str, InstanceState], failure: InstanceState
) -> None:
    upstream = {**upstream, "failed": failure}
    assert evaluate(TriggerRule.ALL_SUCCESS, upstream).outcome is not RUN


@given(rules, st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), terminal, max_size=4))
def test_property_never_waits_once_every_upstream_finished(
    rule: TriggerRule, upstream: dict[str, InstanceState]
) -> None:
    setups = frozenset(k for k in upstream if k in ("a", "b"))
    assert evaluate(rule, upstream, setup_upstreams=setups).outcome is not WAIT


@given(rules, upstreams, st.data())
def test_property_a_run_decision_holds_whatever_the_rest_becomes(
    rule: TriggerRule, upstream: dict[str, InstanceState], data: st.DataObject
) -> None:
    if evaluate(rule, upstream).outcome is not RUN:
        return
    finished = {
        key: state if state.is_terminal else data.draw(terminal, label=key)
        for key, state in upstream.items()
    }
    assert evaluate(rule, finished).outcome is RUN
