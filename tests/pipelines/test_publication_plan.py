"""The publication state a run's instances imply (docs/definitions.md, Publish), case by case."""

from __future__ import annotations

import pytest

from veritask.core.states import InstanceState as I
from veritask.core.states import PublicationState as P
from veritask.core.states import RunExecutionState as R
from veritask.definitions.parse import parse_definition
from veritask.scheduling import publication

PUBLISHING = parse_definition(
    """
name: users
tasks:
  load: {run: "true"}
publish:
  checks:
    - {name: row_count, run: "true"}
    - {name: no_nulls, run: "true"}
  commit: {run: "true"}
"""
)
NO_CHECKS = parse_definition(
    """
name: plain
tasks:
  load: {run: "true"}
publish:
  commit: {run: "true"}
"""
)
NOTHING = parse_definition("name: quiet\ntasks:\n  load: {run: 'true'}\n")
ROW, NULLS, COMMIT = "publish.check.row_count", "publish.check.no_nulls", "publish.commit"


def test_a_definition_without_publish_never_requires_it() -> None:
    plan = publication.plan(NOTHING, R.SUCCESS, P.NOT_REQUIRED, {})
    assert plan.state is P.NOT_REQUIRED


@pytest.mark.parametrize("execution", [R.RUNNING, R.FAILED, R.CANCELLED])
def test_publication_waits_for_execution_success(execution: R) -> None:
    plan = publication.plan(PUBLISHING, execution, P.PENDING, {})
    assert plan.state is P.PENDING
    assert plan.open_now == ()


def test_checks_open_first_and_the_commit_waits_for_them() -> None:
    plan = publication.plan(PUBLISHING, R.SUCCESS, P.PENDING, {"load": I.SUCCESS})
    assert plan.state is P.CHECKING
    assert set(plan.open_now) == {ROW, NULLS}
    half = publication.plan(PUBLISHING, R.SUCCESS, P.CHECKING, {ROW: I.SUCCESS, NULLS: I.RUNNING})
    assert half.state is P.CHECKING
    assert COMMIT not in half.open_now


def test_a_failed_check_leaves_execution_green_and_publication_check_failed() -> None:
    plan = publication.plan(PUBLISHING, R.SUCCESS, P.CHECKING, {ROW: I.SUCCESS, NULLS: I.FAILED})
    assert plan.state is P.CHECK_FAILED
    assert "no_nulls" in plan.reason


def test_a_check_waiting_to_retry_is_still_checking() -> None:
    plan = publication.plan(PUBLISHING, R.SUCCESS, P.CHECKING, {ROW: I.UP_FOR_RETRY})
    assert plan.state is P.CHECKING


def test_the_commit_opens_after_every_check_and_publishes_on_success() -> None:
    checks = {ROW: I.SUCCESS, NULLS: I.SUCCESS}
    opening = publication.plan(PUBLISHING, R.SUCCESS, P.CHECKING, checks)
    assert (opening.state, opening.open_now) == (P.PUBLISHING, (COMMIT,))
    done = publication.plan(PUBLISHING, R.SUCCESS, P.PUBLISHING, {**checks, COMMIT: I.SUCCESS})
    assert done.state is P.PUBLISHED
    failed = publication.plan(PUBLISHING, R.SUCCESS, P.PUBLISHING, {**checks, COMMIT: I.FAILED})
    assert failed.state is P.PUBLISH_FAILED


def test_without_checks_the_commit_opens_at_once() -> None:
    plan = publication.plan(NO_CHECKS, R.SUCCESS, P.PENDING, {"load": I.SUCCESS})
    assert (plan.state, plan.open_now) == (P.PUBLISHING, (COMMIT,))


def test_a_finished_publication_does_not_move_again() -> None:
    plan = publication.plan(PUBLISHING, R.SUCCESS, P.PUBLISHED, {COMMIT: I.FAILED})
    assert plan.state is P.PUBLISHED


def test_publication_steps_are_tasks_with_reserved_keys() -> None:
    steps = publication.steps(PUBLISHING)
    assert set(steps) == {ROW, NULLS, COMMIT}
    assert all(publication.is_publication_key(key) for key in steps)
    assert not any(publication.is_publication_key(key) for key in PUBLISHING.tasks)
