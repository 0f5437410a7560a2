"""Properties of the fold over simulated histories (the guarantees of
docs/outcomes-and-fencing.md).

Each property runs the ``ci`` profile's 2,000 examples (``make fuzz`` runs many more). The
simulator (``simulation.py``) generates true executions, the events each actor would send, and
a network that delays, duplicates and reorders them.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from datetime import timedelta

from hypothesis import given
from hypothesis import strategies as st

from tests.unit.simulation import T0, TERMINAL_TRUTH, Fate, Scenario, Simulation, simulate
from veritask.core import codec, transitions
from veritask.core.events import KIND_RULES, ErrorCategory, Event, EventKind, Level, OpenReason
from veritask.core.facts import merge
from veritask.core.fold import InstanceSnapshot, derive, empty, fold
from veritask.core.jsontypes import JSONObject
from veritask.core.judge import Outcome
from veritask.core.policy import OnUnknown, RetryPolicy, TaskPolicy
from veritask.core.states import AttemptState, EngineState, InstanceState

FATES = st.sampled_from(list(Fate))
DURATIONS = st.integers(min_value=1, max_value=10)

scenarios = st.builds(
    Scenario,
    fates=st.tuples(FATES, FATES, FATES, FATES, FATES, FATES),
    durations=st.tuples(DURATIONS, DURATIONS, DURATIONS, DURATIONS, DURATIONS, DURATIONS),
    max_retries=st.integers(min_value=0, max_value=3),
    on_unknown=st.sampled_from(list(OnUnknown)),
    timeout=st.none() | st.integers(min_value=4, max_value=20),
    max_delay=st.integers(min_value=0, max_value=6),
    duplicate_rate=st.sampled_from([0.0, 0.2, 0.5]),
    cancel_at=st.none() | st.integers(min_value=1, max_value=60),
    override_at_end=st.booleans(),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
    steps=st.just(100),
    requires_commit=st.booleans(),
)


def _projection(snapshot: InstanceSnapshot) -> tuple[object, ...]:
    """What the instance shows, without the records of its attempts."""
    current = snapshot.current
    return (
        snapshot.state,
        snapshot.epoch,
        snapshot.retry_at,
        None if current is None else current.state,
    )


@given(scenarios, st.randoms(use_true_random=False))
def test_property_convergence_in_any_order_with_duplicates(
    scenario: Scenario, rnd: random.Random
) -> None:
    sim = simulate(scenario)
    events = sim.events
    canonical = fold(sim.snapshot.instance_id, events, sim.policy)
    shuffled = events + rnd.sample(events, k=len(events) // 3)
    rnd.shuffle(shuffled)
    facts = empty(sim.snapshot.instance_id)
    for event in shuffled:
        facts = merge(facts, event)
    assert derive(facts, sim.policy) == canonical
    assert sim.snapshot == canonical


@given(scenarios)
def test_property_facts_survive_the_json_codec(scenario: Scenario) -> None:
    sim = simulate(scenario)
    for r in sim.recorded[:: max(1, len(sim.recorded) // 8)]:
        stored = json.loads(json.dumps(codec.facts_to_json(r.after.facts)))
        assert codec.facts_from_json(stored) == r.after.facts


@given(scenarios)
def test_property_fencing_old_attempts_never_change_the_instance(scenario: Scenario) -> None:
    sim = simulate(scenario)
    for r in sim.recorded:
        older = 0 < r.event.attempt_no < r.before.epoch
        if r.outcome is Outcome.STALE or (older and r.event.kind is not EventKind.OVERRIDE):
            assert _projection(r.after) == _projection(r.before), r.event


@given(scenarios)
def test_property_every_recorded_history_is_a_path_of_the_table(scenario: Scenario) -> None:
    sim = simulate(scenario)
    for r in sim.recorded:
        transitions.check_instance_edge(r.before.state, r.after.state, r.event.kind)
        before = r.before.attempt(r.event.attempt_no)
        after = r.after.attempt(r.event.attempt_no)
        if before is not None and after is not None:
            transitions.check_attempt_edge(before.state, after.state, r.event.kind)


@given(scenarios)
def test_property_heartbeat_loss_alone_never_decides(scenario: Scenario) -> None:
    sim = simulate(scenario)
    silent_kinds = {EventKind.LEASE_EXPIRED, EventKind.HEARTBEAT, EventKind.STARTED}
    for r in sim.recorded:
        decided = r.after.state in (InstanceState.FAILED, InstanceState.SUCCESS)
        if decided and r.before.state is not r.after.state:
            assert r.event.kind not in silent_kinds, r.event
    for view in sim.snapshot.attempts:
        facts = sim.snapshot.facts.attempt(view.attempt_no)
        assert facts is not None
        if view.state in (AttemptState.SUCCESS, AttemptState.FAILED):
            assert facts.completions, f"attempt {view.attempt_no} decided without a completion"
    if scenario.on_unknown is OnUnknown.WAIT and not scenario.override_at_end:
        assert not any(
            r.event.kind is EventKind.FENCED for r in sim.recorded if r.outcome is Outcome.APPLIED
        )


@given(scenarios)
def test_property_a_retry_never_changes_an_earlier_attempts_record(scenario: Scenario) -> None:
    sim = simulate(scenario)
    for r in sim.recorded:
        for view in r.before.attempts:
            if view.attempt_no != r.event.attempt_no:
                assert r.after.attempt(view.attempt_no) == view, r.event
    opened = Counter(
        r.event.attempt_no for r in sim.recorded if r.event.kind is EventKind.ATTEMPT_OPENED
    )
    assert all(count == 1 for count in opened.values()), opened


@given(scenarios)
def test_property_the_outcome_agrees_with_the_truth(scenario: Scenario) -> None:
    sim = simulate(scenario)
    for view in sim.snapshot.attempts:
        truth = sim.attempts[view.attempt_no]
        ended_by_itself = truth.category in ("none", "task_error", "skipped")
        if truth.fate not in TERMINAL_TRUTH or not ended_by_itself:
            continue
        if view.state in (AttemptState.ABANDONED, AttemptState.NOT_RECEIVED):
            assert view.late, "a late completion must stay visible on the record"
            continue
        assert view.state is TERMINAL_TRUTH[truth.fate], (view.attempt_no, view.reason)
    _assert_instance_agrees(sim)


def _assert_instance_agrees(sim: Simulation) -> None:
    snapshot = sim.snapshot
    current = snapshot.current
    if current is None or snapshot.override is not None:
        return
    # A cancel taken while it waited to retry decides the instance, whatever came late.
    if snapshot.facts.decision(snapshot.epoch, EventKind.CANCEL_REQUESTED) is not None:
        assert snapshot.state is InstanceState.CANCELLED
        return
    if current.state is AttemptState.SUCCESS:
        assert snapshot.state is InstanceState.SUCCESS
    if current.state is AttemptState.FAILED:
        assert snapshot.state in (InstanceState.FAILED, InstanceState.UP_FOR_RETRY)


@given(scenarios)
def test_property_stops_are_confirmed(scenario: Scenario) -> None:
    sim = simulate(scenario)
    for view in sim.snapshot.attempts:
        if view.state in (AttemptState.CANCELLED, AttemptState.TIMEOUT):
            facts = sim.snapshot.facts.attempt(view.attempt_no)
            assert facts is not None
            assert facts.cancel_confirmed is not None or facts.completions, view.reason
    if sim.snapshot.state is InstanceState.CANCELLED and sim.snapshot.current is not None:
        current = sim.snapshot.current
        nothing_ran = sim.snapshot.facts.decision(sim.snapshot.epoch, EventKind.CANCEL_REQUESTED)
        assert nothing_ran is not None or current.state is AttemptState.CANCELLED


def _evidence_for(kind: EventKind, draw: st.DrawFn) -> JSONObject:
    """Valid evidence with the values that decide things drawn at random."""
    categories = st.sampled_from([c.value for c in ErrorCategory])
    engine_states = st.sampled_from([s.value for s in EngineState])
    small = st.integers(min_value=0, max_value=5)
    match kind:
        case EventKind.ATTEMPT_OPENED:
            return {
                "token_hash": "h",
                "reason": draw(st.sampled_from([r.value for r in OpenReason])),
                "retry_index": draw(small),
                "resubmit_index": draw(small),
            }
        case EventKind.COMPLETED:
            return {
                "exit_code": draw(st.none() | small),
                "error_category": draw(categories),
                "commit_marker": draw(st.none() | st.just("m1") | st.just("m2")),
            }
        case EventKind.ENGINE_OBSERVED | EventKind.CANCEL_CONFIRMED | EventKind.NEVER_RECEIVED:
            return {
                "engine_state": draw(engine_states),
                "source": draw(st.sampled_from(["exit_record", "engine"])),
                "exit_code": draw(st.none() | small),
            }
        case EventKind.LEASE_EXPIRED:
            return {"last_report_seq": draw(small), "lease_expires_at": "t"}
        case EventKind.OVERRIDE:
            return {
                "to_state": draw(st.sampled_from(["SUCCESS", "FAILED"])),
                "reason": "r",
                "scope": "instance",
            }
        case EventKind.PROGRESS:
            return {"phase": draw(st.sampled_from(["a", "b"])), "done": draw(small)}
        case EventKind.CANCEL_REQUESTED:
            return {"reason": "r", "nothing_running": draw(st.booleans())}
        case EventKind.FENCED:
            return {
                "reason": "r",
                "on_unknown": draw(st.sampled_from(["retry", "fail"])),
                "gathered": {},
            }
        case _:
            rule = KIND_RULES[kind]
            evidence: JSONObject = {}
            for key, types in rule.evidence.items():
                if bool in types:
                    evidence[key] = draw(st.booleans())
                elif int in types:
                    evidence[key] = draw(small)
                else:
                    evidence[key] = draw(st.sampled_from(["x", "y"]))
            return evidence


@st.composite
def event_soups(draw: st.DrawFn) -> list[Event]:
    """Arbitrary well-formed events about one instance, many of the same kind."""
    count = draw(st.integers(min_value=1, max_value=40))
    soup = []
    for n in range(count):
        kind = draw(st.sampled_from(list(EventKind)))
        rule = KIND_RULES[kind]
        instance_level = rule.level is Level.INSTANCE
        attempt_no = draw(st.integers(min_value=0 if instance_level else 1, max_value=3))
        actor = draw(st.sampled_from(sorted(a.value for a in rule.actors)))
        if actor == "operator":
            actor = "operator:alice"
        report = actor == "worker"
        soup.append(
            Event(
                event_id=f"e{n:03d}",
                instance_id="i",
                attempt_no=attempt_no,
                kind=kind,
                actor=actor,
                event_time=T0 + timedelta(seconds=draw(st.integers(min_value=0, max_value=9))),
                evidence=_evidence_for(kind, draw),
                seq=draw(st.integers(min_value=1, max_value=6)) if report else None,
            )
        )
    return soup


@given(event_soups(), st.randoms(use_true_random=False))
def test_property_merge_is_a_set_function_for_any_events(
    soup: list[Event], rnd: random.Random
) -> None:
    policy = TaskPolicy(retry=RetryPolicy(max_retries=2))
    reordered = soup + rnd.sample(soup, k=len(soup) // 2)
    rnd.shuffle(reordered)
    facts = empty("i")
    for event in reordered:
        facts = merge(facts, event)
    canonical = fold("i", soup, policy)
    assert facts == canonical.facts
    assert derive(facts, policy) == canonical
