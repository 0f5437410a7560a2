"""Publication: after execution succeeds, the checks and then the commit step (docs/definitions.md,
Publish).

The steps are task instances of the run like any other — the same executor, worker, token
and fencing — under reserved keys that no definition task can take (task keys are slugs
without dots): ``publish.check.<name>`` and ``publish.commit``. They are not part of the
execution graph, so they never decide ``execution_state``; they decide ``publication_state``:

    PENDING → CHECKING (checks opened) → PUBLISHING (every check succeeded; commit opened)
            → PUBLISHED (the commit succeeded)
    CHECKING → CHECK_FAILED (a check ended without success)
    PUBLISHING → PUBLISH_FAILED (the commit ended without success)

With no checks, PENDING goes straight to PUBLISHING. Each change is a ledger event.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from veritask.core import reasons
from veritask.core.jsontypes import JSONObject
from veritask.core.states import InstanceState, PublicationState, RunExecutionState
from veritask.definitions.model import Definition, TaskSpec

CHECK_PREFIX = "publish.check."
COMMIT_KEY = "publish.commit"

_SUCCEEDED = frozenset({InstanceState.SUCCESS, InstanceState.SKIPPED})


def is_publication_key(task_key: str) -> bool:
    return task_key == COMMIT_KEY or task_key.startswith(CHECK_PREFIX)


def check_keys(definition: Definition) -> list[str]:
    if definition.publish is None:
        return []
    return [CHECK_PREFIX + check.name for check in definition.publish.checks]


def steps(definition: Definition) -> dict[str, TaskSpec]:
    """The publication steps as tasks, with the definition's default policy."""
    publish = definition.publish
    if publish is None:
        return {}
    found = {
        CHECK_PREFIX + check.name: TaskSpec(
            key=CHECK_PREFIX + check.name,
            run=check.run,
            call=check.call,
            policy=definition.defaults,
        )
        for check in publish.checks
    }
    found[COMMIT_KEY] = TaskSpec(
        key=COMMIT_KEY, run=publish.commit.run, call=publish.commit.call, policy=definition.defaults
    )
    return found


def all_tasks(definition: Definition) -> dict[str, TaskSpec]:
    """Every task a run of this definition may submit: its work and its publication."""
    return {**definition.tasks, **steps(definition)}


@dataclass(frozen=True)
class PublicationPlan:
    """What the scheduler should do next about a run's publication."""

    state: PublicationState
    reason: str
    #: Publication instances (task keys) that may open now.
    open_now: tuple[str, ...] = ()
    #: The steps whose states decided it (a failed check, the commit that succeeded…).
    because: tuple[str, ...] = ()


def plan(
    definition: Definition,
    execution: RunExecutionState,
    current: PublicationState,
    states: Mapping[str, InstanceState],
) -> PublicationPlan:
    """The publication state that the instances imply, and which steps may open."""
    if definition.publish is None:
        return PublicationPlan(PublicationState.NOT_REQUIRED, reasons.PUBLISHES_NOTHING.format())
    if current in (
        PublicationState.PUBLISHED,
        PublicationState.CHECK_FAILED,
        PublicationState.PUBLISH_FAILED,
    ):
        return PublicationPlan(current, reasons.PUBLICATION_FINISHED.format())
    if execution in (RunExecutionState.FAILED, RunExecutionState.CANCELLED):
        return PublicationPlan(
            PublicationState.PENDING, reasons.NOTHING_PUBLISHED.format(state=execution)
        )
    if execution is not RunExecutionState.SUCCESS:
        return PublicationPlan(
            PublicationState.PENDING, reasons.WAITING_FOR_EXECUTION.format(state=execution)
        )
    checks = check_keys(definition)
    check_states = {key: states.get(key, InstanceState.CREATED) for key in checks}
    failed = sorted(
        key for key, state in check_states.items() if state.is_terminal and state not in _SUCCEEDED
    )
    if failed:
        names = ", ".join(key.removeprefix(CHECK_PREFIX) for key in failed)
        return PublicationPlan(
            PublicationState.CHECK_FAILED,
            reasons.CHECKS_FAILED.format(checks=names),
            because=tuple(failed),
        )
    pending = [key for key, state in check_states.items() if state is InstanceState.CREATED]
    if any(state not in _SUCCEEDED for state in check_states.values()):
        return PublicationPlan(
            PublicationState.CHECKING,
            reasons.CHECKS_RUNNING.format(count=len(checks)),
            tuple(pending),
            because=tuple(checks),
        )
    commit = states.get(COMMIT_KEY, InstanceState.CREATED)
    if commit in _SUCCEEDED:
        return PublicationPlan(
            PublicationState.PUBLISHED, reasons.COMMIT_SUCCEEDED.format(), because=(COMMIT_KEY,)
        )
    if commit.is_terminal:
        return PublicationPlan(
            PublicationState.PUBLISH_FAILED,
            reasons.COMMIT_ENDED.format(state=commit),
            because=(COMMIT_KEY,),
        )
    opening = (COMMIT_KEY,) if commit is InstanceState.CREATED else ()
    return PublicationPlan(
        PublicationState.PUBLISHING,
        reasons.COMMITTING.format(),
        opening,
        because=(*checks, COMMIT_KEY),
    )


class Step(Protocol):
    """What the evidence names of a publication step's instance."""

    @property
    def id(self) -> str: ...
    @property
    def epoch(self) -> int: ...


def evidence(
    plan: PublicationPlan,
    execution: RunExecutionState,
    steps: Mapping[str, Step],
    states: Mapping[str, InstanceState],
) -> JSONObject:
    """The evidence of a publication change: the execution state it followed and each step
    that decided it, as its instance, its attempt (0: none opened) and its state."""
    named: JSONObject = {
        key: {"instance_id": step.id, "attempt_no": step.epoch, "state": states[key].value}
        for key in plan.because
        if (step := steps.get(key)) is not None and key in states
    }
    return {"execution_state": execution.value, "steps": named}
