"""Trigger rules (docs/trigger-rules.md): whether a task runs, is skipped, fails upstream, or waits.

A rule reads the states of a task's *direct* upstream instances and decides one of four things.
The decisions are the ones Airflow 3's scheduler takes (its ``TriggerRuleDep``), including
which of failed, upstream_failed and skipped wins when they mix (docs/trigger-rules.md has the
table, the mapping of Veritask's states and where Airflow's code and documentation disagree).
How upstream states count:

* **succeeded**: ``SUCCESS``;
* **failed**: ``FAILED``, ``START_FAILED``, ``TIMEOUT`` and ``CANCELLED`` (each is an attempt
  that ended without its output);
* **upstream failed**: ``UPSTREAM_FAILED`` (counted apart: some rules name it, some do not);
* **skipped**: ``SKIPPED``;
* **removed**: ``REMOVED`` upstreams are left out, as if the edge were gone: the task no
  longer exists in this version of the definition;
* **unfinished**: every other state (``CREATED`` … ``UP_FOR_RETRY``, ``LOST``,
  ``CANCELLING``, ``CANCEL_FAILED``): it may still end either way.

When a rule can no longer be met the task ends at once, without waiting for the rest:
``UPSTREAM_FAILED`` when the rule needed a success that failures took away, ``SKIPPED``
otherwise. So ``evaluate`` never answers ``WAIT`` once every upstream is finished.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import assert_never

from veritask.core import reasons
from veritask.core.errors import VeritaskError
from veritask.core.states import InstanceState


class TriggerRule(StrEnum):
    """When a task runs, from the states of its direct upstream tasks."""

    ALL_SUCCESS = "all_success"
    """(default) Every upstream succeeded. A failure upstream makes it UPSTREAM_FAILED and a skip
    makes it SKIPPED, as soon as either happens."""
    ALL_FAILED = "all_failed"
    """Every upstream failed or is UPSTREAM_FAILED. A success or a skip upstream makes it
    SKIPPED."""
    ALL_DONE = "all_done"
    """Every upstream finished, whatever its outcome."""
    ALL_DONE_SETUP_SUCCESS = "all_done_setup_success"
    """Every upstream finished and at least one upstream setup task succeeded (the rule of
    teardown tasks). All setups skipped: SKIPPED; none succeeded: UPSTREAM_FAILED. With no
    setup upstream it is all_done."""
    ALL_DONE_MIN_ONE_SUCCESS = "all_done_min_one_success"
    """Every upstream finished and at least one succeeded. A skip upstream makes it SKIPPED
    as soon as it happens (as Airflow 3 does); all finished, none succeeded: UPSTREAM_FAILED."""
    ONE_SUCCESS = "one_success"
    """At least one upstream succeeded; runs as soon as one does, without waiting for the
    rest."""
    ONE_FAILED = "one_failed"
    """At least one upstream failed or is UPSTREAM_FAILED; runs as soon as one is."""
    ONE_DONE = "one_done"
    """At least one upstream succeeded or failed; runs as soon as one does."""
    NONE_FAILED = "none_failed"
    """No upstream failed or is UPSTREAM_FAILED: each succeeded or was skipped."""
    NONE_FAILED_MIN_ONE_SUCCESS = "none_failed_min_one_success"
    """No upstream failed or is UPSTREAM_FAILED, and at least one succeeded (the rule for a
    join after a branch)."""
    NONE_SKIPPED = "none_skipped"
    """Every upstream finished and none was skipped: each succeeded, failed or is
    UPSTREAM_FAILED."""
    ALWAYS = "always"
    """No dependency at all: runs at any time, even before its upstream tasks finish."""
    ALL_SKIPPED = "all_skipped"
    """Every upstream was skipped. Any other outcome upstream makes it SKIPPED."""


class RuleOutcome(StrEnum):
    """What a trigger rule decided for a task instance that has not started."""

    RUN = "RUN"
    """The rule is met: the scheduler may open an attempt."""
    SKIP = "SKIP"
    """The rule can no longer be met and no failure is to blame: the instance is SKIPPED."""
    UPSTREAM_FAILED = "UPSTREAM_FAILED"
    """The rule can no longer be met because upstream tasks failed: UPSTREAM_FAILED."""
    WAIT = "WAIT"
    """Not decided yet: an unfinished upstream may still change the answer."""


@dataclass(frozen=True)
class RuleDecision:
    """A rule's outcome and a sentence that says why, for the ``skipped`` and
    ``upstream_failed`` events and for a person looking at a waiting task."""

    outcome: RuleOutcome
    reason: str

    @property
    def state(self) -> InstanceState | None:
        """The instance state this decision sets, if it ends the instance."""
        if self.outcome is RuleOutcome.SKIP:
            return InstanceState.SKIPPED
        if self.outcome is RuleOutcome.UPSTREAM_FAILED:
            return InstanceState.UPSTREAM_FAILED
        return None


class InvalidBranch(VeritaskError, ValueError):
    """A branch task chose a task that is not directly downstream of it."""


#: Attempts that ended without their output. CANCELLED counts: the work was not done.
FAILED_STATES = frozenset(
    {
        InstanceState.FAILED,
        InstanceState.START_FAILED,
        InstanceState.TIMEOUT,
        InstanceState.CANCELLED,
    }
)


@dataclass(frozen=True)
class _Tally:
    """The direct upstreams of one task, sorted by how they count."""

    succeeded: tuple[str, ...]
    failed: tuple[str, ...]
    upstream_failed: tuple[str, ...]
    skipped: tuple[str, ...]
    unfinished: tuple[str, ...]

    @classmethod
    def of(cls, upstream: Mapping[str, InstanceState]) -> _Tally:
        buckets: dict[str, list[str]] = {
            "succeeded": [],
            "failed": [],
            "upstream_failed": [],
            "skipped": [],
            "unfinished": [],
        }
        for key in sorted(upstream):
            state = upstream[key]
            if state is InstanceState.REMOVED:
                continue
            if state is InstanceState.SUCCESS:
                buckets["succeeded"].append(key)
            elif state in FAILED_STATES:
                buckets["failed"].append(key)
            elif state is InstanceState.UPSTREAM_FAILED:
                buckets["upstream_failed"].append(key)
            elif state is InstanceState.SKIPPED:
                buckets["skipped"].append(key)
            else:
                buckets["unfinished"].append(key)
        return cls(**{name: tuple(keys) for name, keys in buckets.items()})

    @property
    def count(self) -> int:
        return (
            len(self.succeeded)
            + len(self.failed)
            + len(self.upstream_failed)
            + len(self.skipped)
            + len(self.unfinished)
        )

    @property
    def any_failure(self) -> tuple[str, ...]:
        return tuple(sorted(self.failed + self.upstream_failed))


def evaluate(
    rule: TriggerRule,
    upstream: Mapping[str, InstanceState],
    *,
    setup_upstreams: frozenset[str] = frozenset(),
) -> RuleDecision:
    """Decide what ``rule`` says about a task whose direct upstream instances are ``upstream``.

    ``setup_upstreams`` names the upstream keys that are setup tasks (only
    ``all_done_setup_success`` reads it; keys not in ``upstream`` are ignored). A task with no
    upstream (a root), or whose upstreams were all removed, runs.
    """
    t = _Tally.of(upstream)
    if t.count == 0:
        return _run(reasons.NO_UPSTREAM.format())
    match rule:
        case TriggerRule.ALWAYS:
            return _run(reasons.ALWAYS_RUNS.format())
        case TriggerRule.ALL_SUCCESS:
            if t.any_failure:
                return _upstream_failed(reasons.UPSTREAM_FAILED.format(tasks=_names(t.any_failure)))
            if t.skipped:
                return _skip(reasons.UPSTREAM_SKIPPED.format(tasks=_names(t.skipped)))
            if t.unfinished:
                return _wait(t)
            return _run(reasons.ALL_SUCCEEDED.format())
        case TriggerRule.ALL_FAILED:
            if t.succeeded or t.skipped:
                others = tuple(sorted(t.succeeded + t.skipped))
                return _skip(reasons.UPSTREAM_DID_NOT_FAIL.format(tasks=_names(others)))
            if t.unfinished:
                return _wait(t)
            return _run(reasons.ALL_FAILED.format())
        case TriggerRule.ALL_DONE:
            if t.unfinished:
                return _wait(t)
            return _run(reasons.ALL_DONE.format())
        case TriggerRule.ALL_DONE_SETUP_SUCCESS:
            return _all_done_setup_success(t, upstream, setup_upstreams)
        case TriggerRule.ALL_DONE_MIN_ONE_SUCCESS:
            # As Airflow 3 decides it: a skipped upstream settles the rule as SKIPPED at once,
            # before anything else is looked at (docs/trigger-rules.md).
            if t.skipped:
                return _skip(reasons.UPSTREAM_SKIPPED.format(tasks=_names(t.skipped)))
            if t.unfinished:
                return _wait(t)
            if t.succeeded:
                return _run(reasons.ALL_DONE_AND_SUCCEEDED.format(tasks=_names(t.succeeded)))
            # Everything finished, nothing skipped, nothing succeeded: only failures are left.
            return _upstream_failed(reasons.NONE_SUCCEEDED.format(tasks=_names(t.any_failure)))
        case TriggerRule.ONE_SUCCESS:
            if t.succeeded:
                return _run(reasons.UPSTREAM_SUCCEEDED.format(tasks=_names(t.succeeded)))
            if t.unfinished:
                return _wait(t)
            if t.any_failure:
                return _upstream_failed(reasons.NONE_SUCCEEDED.format(tasks=_names(t.any_failure)))
            return _skip(reasons.EVERY_UPSTREAM_SKIPPED.format())
        case TriggerRule.ONE_FAILED:
            # UPSTREAM_FAILED counts as a failure here, as in Airflow 3.
            if t.any_failure:
                return _run(reasons.UPSTREAM_FAILED.format(tasks=_names(t.any_failure)))
            if t.unfinished:
                return _wait(t)
            return _skip(reasons.NO_UPSTREAM_FAILED.format())
        case TriggerRule.ONE_DONE:
            done = tuple(sorted(t.succeeded + t.failed))
            if done:
                return _run(reasons.UPSTREAM_FINISHED.format(tasks=_names(done)))
            if t.unfinished:
                return _wait(t)
            return _skip(reasons.NONE_FINISHED.format())
        case TriggerRule.NONE_FAILED:
            if t.any_failure:
                return _upstream_failed(reasons.UPSTREAM_FAILED.format(tasks=_names(t.any_failure)))
            if t.unfinished:
                return _wait(t)
            return _run(reasons.NO_UPSTREAM_FAILED.format())
        case TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS:
            if t.any_failure:
                return _upstream_failed(reasons.UPSTREAM_FAILED.format(tasks=_names(t.any_failure)))
            if t.unfinished:
                return _wait(t)
            if t.succeeded:
                return _run(reasons.NONE_FAILED_AND_SUCCEEDED.format(tasks=_names(t.succeeded)))
            return _skip(reasons.EVERY_UPSTREAM_SKIPPED.format())
        case TriggerRule.NONE_SKIPPED:
            if t.skipped:
                return _skip(reasons.UPSTREAM_SKIPPED.format(tasks=_names(t.skipped)))
            if t.unfinished:
                return _wait(t)
            return _run(reasons.NONE_SKIPPED.format())
        case TriggerRule.ALL_SKIPPED:
            not_skipped = tuple(sorted(t.succeeded + t.failed + t.upstream_failed))
            if not_skipped:
                return _skip(reasons.UPSTREAM_NOT_SKIPPED.format(tasks=_names(not_skipped)))
            if t.unfinished:
                return _wait(t)
            return _run(reasons.ALL_SKIPPED.format())
        case _:
            assert_never(rule)


def _all_done_setup_success(
    t: _Tally, upstream: Mapping[str, InstanceState], setup_upstreams: frozenset[str]
) -> RuleDecision:
    if t.unfinished:
        return _wait(t)
    setups = sorted(
        key
        for key in setup_upstreams
        if key in upstream and upstream[key] is not InstanceState.REMOVED
    )
    if not setups:
        return _run(reasons.ALL_DONE_NO_SETUP.format())
    succeeded = [key for key in setups if upstream[key] is InstanceState.SUCCESS]
    if succeeded:
        return _run(reasons.SETUP_SUCCEEDED.format(tasks=_names(succeeded)))
    if all(upstream[key] is InstanceState.SKIPPED for key in setups):
        return _skip(reasons.SETUP_SKIPPED.format(tasks=_names(setups)))
    return _upstream_failed(reasons.NO_SETUP_SUCCEEDED.format(tasks=_names(setups)))


def branch_skips(downstream_of_branch: Collection[str], chosen: Collection[str]) -> frozenset[str]:
    """The direct downstream tasks of a branch task that it did not choose (they are SKIPPED).

    Raises :class:`InvalidBranch` naming every chosen task that is not directly downstream.
    Choosing nothing skips every direct downstream task.
    """
    downstream = frozenset(downstream_of_branch)
    bad = sorted(set(chosen) - downstream)
    if bad:
        allowed = ", ".join(sorted(downstream)) or "none"
        raise InvalidBranch(
            reasons.BRANCH_NOT_DOWNSTREAM.format(tasks=_names(bad), allowed=allowed)
        )
    return downstream - frozenset(chosen)


def _run(reason: str) -> RuleDecision:
    return RuleDecision(RuleOutcome.RUN, reason)


def _skip(reason: str) -> RuleDecision:
    return RuleDecision(RuleOutcome.SKIP, reason)


def _upstream_failed(reason: str) -> RuleDecision:
    return RuleDecision(RuleOutcome.UPSTREAM_FAILED, reason)


def _wait(t: _Tally) -> RuleDecision:
    return RuleDecision(RuleOutcome.WAIT, reasons.WAITING_FOR.format(what=_names(t.unfinished)))


def _names(keys: Iterable[str], limit: int = 5) -> str:
    items = list(keys)
    if len(items) > limit:
        return reasons.AND_MORE.format(tasks=", ".join(items[:limit]), count=len(items) - limit)
    return ", ".join(items)
