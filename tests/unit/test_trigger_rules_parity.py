"""Every rule against every mix of upstream states, expected as Airflow 3's scheduler decides.

The expectation is a hand-written precedence table: for each rule, an ordered list of
conditions on how many upstreams are in each class, the first that holds deciding. Each line
says which behaviour of Airflow 3's ``TriggerRuleDep`` (``ti_deps/deps/trigger_rule_dep.py``,
evaluated with ``flag_upstream_failed`` as the scheduler does) it follows. The combinations are
generated: every multiset of one to three upstream classes, each tried with every Veritask
state of its class. Nothing here asks ``evaluate`` what to expect.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import combinations_with_replacement

import pytest

from veritask.core.states import InstanceState
from veritask.core.trigger_rules import RuleOutcome, TriggerRule, evaluate

St = InstanceState
RUN = RuleOutcome.RUN
SKIP = RuleOutcome.SKIP
UPF = RuleOutcome.UPSTREAM_FAILED
WAIT = RuleOutcome.WAIT

#: How Veritask's states map onto Airflow's: S success, F failed (Airflow has one failed state;
#: a start failure, a timeout and a cancel all end there), UF upstream_failed, K skipped,
#: U not finished (Airflow's unfinished states, up_for_retry among them), R removed.
MEMBERS: dict[str, tuple[InstanceState, ...]] = {
    "S": (St.SUCCESS,),
    "F": (St.FAILED, St.START_FAILED, St.TIMEOUT, St.CANCELLED),
    "UF": (St.UPSTREAM_FAILED,),
    "K": (St.SKIPPED,),
    "U": (
        St.CREATED,
        St.SCHEDULED,
        St.QUEUED,
        St.RUNNING,
        St.LOST,
        St.CANCELLING,
        St.CANCEL_FAILED,
        St.UP_FOR_RETRY,
    ),
    "R": (St.REMOVED,),
}
VARIANTS = max(len(states) for states in MEMBERS.values())


@dataclass(frozen=True)
class Counts:
    """Upstreams per class. Removed upstreams are not counted: Airflow takes them off the
    upstream count of a mapped instance, and Veritask does so for every task."""

    s: int
    f: int
    uf: int
    k: int
    u: int

    @property
    def total(self) -> int:
        return self.s + self.f + self.uf + self.k + self.u


def counts_of(codes: tuple[str, ...]) -> Counts:
    return Counts(*(codes.count(code) for code in ("S", "F", "UF", "K", "U")))


Line = tuple[Callable[[Counts], bool], RuleOutcome]


def otherwise(c: Counts) -> bool:
    return True


PRECEDENCE: dict[TriggerRule, tuple[Line, ...]] = {
    TriggerRule.ALL_SUCCESS: (
        # failed or upstream_failed -> upstream_failed, checked first and without waiting
        (lambda c: c.f + c.uf > 0, UPF),
        # only then does a skipped upstream make it skipped, also without waiting
        (lambda c: c.k > 0, SKIP),
        # it passes only when every upstream is a success
        (lambda c: c.u > 0, WAIT),
        (otherwise, RUN),
    ),
    TriggerRule.ALL_FAILED: (
        # a success or a skip -> skipped at once
        (lambda c: c.s + c.k > 0, SKIP),
        # passes when every upstream is failed or upstream_failed
        (lambda c: c.u > 0, WAIT),
        (otherwise, RUN),
    ),
    TriggerRule.ALL_DONE: (
        # sets no state; passes once every upstream is done
        (lambda c: c.u > 0, WAIT),
        (otherwise, RUN),
    ),
    TriggerRule.ALL_DONE_MIN_ONE_SUCCESS: (
        # any skipped upstream -> skipped, checked first, finished or not
        (lambda c: c.k > 0, SKIP),
        # otherwise it waits until every (non-skipped) upstream is done
        (lambda c: c.u > 0, WAIT),
        # all done and no success -> upstream_failed
        (lambda c: c.s == 0, UPF),
        (otherwise, RUN),
    ),
    TriggerRule.ONE_SUCCESS: (
        # passes on the first success, whatever the rest
        (lambda c: c.s > 0, RUN),
        # sets a state only once every upstream is done
        (lambda c: c.u > 0, WAIT),
        # done and every upstream skipped -> skipped
        (lambda c: c.k == c.total, SKIP),
        # done, no success, not all skipped -> upstream_failed
        (otherwise, UPF),
    ),
    TriggerRule.ONE_FAILED: (
        # passes on the first failed OR upstream_failed upstream
        (lambda c: c.f + c.uf > 0, RUN),
        (lambda c: c.u > 0, WAIT),
        # done with neither -> skipped
        (otherwise, SKIP),
    ),
    TriggerRule.ONE_DONE: (
        # passes on the first success or failed; upstream_failed counts as neither
        (lambda c: c.s + c.f > 0, RUN),
        (lambda c: c.u > 0, WAIT),
        # done with neither -> skipped
        (otherwise, SKIP),
    ),
    TriggerRule.NONE_FAILED: (
        # failed or upstream_failed -> upstream_failed without waiting
        (lambda c: c.f + c.uf > 0, UPF),
        # passes when every upstream is success or skipped, all skipped included
        (lambda c: c.u > 0, WAIT),
        (otherwise, RUN),
    ),
    TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS: (
        # failed or upstream_failed -> upstream_failed without waiting, before any skip
        (lambda c: c.f + c.uf > 0, UPF),
        # skipped only when every upstream is skipped
        (lambda c: c.k == c.total, SKIP),
        # otherwise passes when every upstream is success or skipped
        (lambda c: c.u > 0, WAIT),
        (otherwise, RUN),
    ),
    TriggerRule.NONE_SKIPPED: (
        # a skipped upstream -> skipped at once
        (lambda c: c.k > 0, SKIP),
        # passes once every upstream is done
        (lambda c: c.u > 0, WAIT),
        (otherwise, RUN),
    ),
    TriggerRule.ALL_SKIPPED: (
        # a success, failed or upstream_failed -> skipped at once
        (lambda c: c.s + c.f + c.uf > 0, SKIP),
        # passes when every upstream is skipped
        (lambda c: c.u > 0, WAIT),
        (otherwise, RUN),
    ),
    TriggerRule.ALWAYS: (
        # passes before anything upstream is looked at
        (otherwise, RUN),
    ),
}


def expected(rule: TriggerRule, codes: tuple[str, ...]) -> RuleOutcome:
    c = counts_of(codes)
    if c.total == 0:
        # a task without upstream passes (here: every upstream was removed)
        return RUN
    return next(outcome for holds, outcome in PRECEDENCE[rule] if holds(c))


def concrete(codes: tuple[str, ...], variant: int) -> dict[str, InstanceState]:
    """The upstreams of ``codes``, each class member picked by ``variant`` (shifted by
    position, so that two upstreams of one class get different states)."""
    return {
        f"u{i}": MEMBERS[code][(variant + i) % len(MEMBERS[code])] for i, code in enumerate(codes)
    }


MIXES = [mix for size in (1, 2, 3) for mix in combinations_with_replacement(MEMBERS, size)]


def test_the_classes_cover_every_state_once() -> None:
    listed = [state for states in MEMBERS.values() for state in states]
    assert sorted(listed) == sorted(InstanceState)


def test_every_rule_but_the_teardown_rule_has_a_precedence_line() -> None:
    assert set(PRECEDENCE) == set(TriggerRule) - {TriggerRule.ALL_DONE_SETUP_SUCCESS}


@pytest.mark.parametrize("rule", sorted(PRECEDENCE), ids=str)
@pytest.mark.parametrize("codes", MIXES, ids="+".join)
def test_every_mix_decides_as_airflow(rule: TriggerRule, codes: tuple[str, ...]) -> None:
    want = expected(rule, codes)
    for variant in range(VARIANTS):
        upstream = concrete(codes, variant)
        decision = evaluate(rule, upstream)
        assert decision.outcome is want, (upstream, decision.reason)


def expected_teardown(setups: tuple[str, ...], work: tuple[str, ...]) -> RuleOutcome:
    """all_done_setup_success, from the direct-relatives branch of Airflow 3's rule."""
    setup, everything = counts_of(setups), counts_of(setups + work)
    if everything.total == 0:
        return RUN  # no upstream left at all
    if everything.u > 0:
        return WAIT  # it sets a state and passes only once every upstream is done
    if setup.total == 0:
        return RUN  # with no setup upstream it is all_done
    if setup.s > 0:
        return RUN  # one setup succeeded: it runs, whatever the work did
    if setup.k == setup.total:
        return SKIP  # every setup skipped -> skipped (checked before upstream_failed)
    return UPF  # setups done, none succeeded, not all skipped -> upstream_failed


SETUP_MIXES = [mix for size in (1, 2) for mix in combinations_with_replacement(MEMBERS, size)]
WORK_MIXES = [mix for size in (0, 1, 2) for mix in combinations_with_replacement(MEMBERS, size)]


@pytest.mark.parametrize("setups", SETUP_MIXES, ids="+".join)
@pytest.mark.parametrize("work", WORK_MIXES, ids=lambda mix: "+".join(mix) or "none")
def test_every_teardown_mix_decides_as_airflow(
    setups: tuple[str, ...], work: tuple[str, ...]
) -> None:
    want = expected_teardown(setups, work)
    for variant in range(VARIANTS):
        upstream = {
            **{f"setup_{k}": v for k, v in concrete(setups, variant).items()},
            **{f"work_{k}": v for k, v in concrete(work, variant).items()},
        }
        setup_keys = frozenset(key for key in upstream if key.startswith("setup_"))
        decision = evaluate(
            TriggerRule.ALL_DONE_SETUP_SUCCESS, upstream, setup_upstreams=setup_keys
        )
        assert decision.outcome is want, (upstream, decision.reason)
