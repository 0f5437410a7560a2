"""Bugs found while proving the scheduler, in code that the scheduling package does not own.

Each test states the behaviour the design asks for and is expected to fail until the bug is
fixed (``xfail(strict=True)``: a fix makes it pass, and then the marker must go).
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.scheduling.harness import Harness
from veritask.core.states import InstanceState, RunExecutionState, TriggerKind
from veritask.definitions.parse import parse_definition
from veritask.scheduling import triggers


@pytest.mark.xfail(
    strict=True,
    reason=(
        "BUG (scheduling/triggers.py): a run that is never started - refused by "
        "concurrency: forbid, or cancelled while QUEUED - is recorded CANCELLED but its "
        "instances stay CREATED ('waiting for dependencies, concurrency or time') for ever; "
        "no scheduler advances a terminal run, so nothing will ever close them"
    ),
)
def test_no_instance_of_a_run_that_never_started_is_left_waiting(harness: Harness) -> None:
    harness.apply(
        """\
name: waits
concurrency: forbid
tasks:
  work: {run: "sleep 30"}
"""
    )
    first = harness.trigger("waits")
    harness.until(
        lambda: harness.states(first)["work"] is InstanceState.RUNNING, what="work to run"
    )
    refused = triggers.trigger(
        harness.ledger, name="waits", kind=TriggerKind.MANUAL, actor="operator:test"
    )
    assert refused.execution_state is RunExecutionState.CANCELLED
    for _ in range(5):
        harness.tick()

    assert all(state.is_terminal for state in harness.states(refused.run_id).values()), (
        harness.states(refused.run_id)
    )


@pytest.mark.xfail(
    strict=True,
    reason=(
        "BUG (definitions/parse.py): a definition cannot set cancel_window (TaskPolicy has "
        "it, default 2 min, and the reconciler's CANCEL_FAILED decision uses it), so every "
        "task waits 2 minutes for a stop confirmation; only the scheduler's Settings can "
        "override it"
    ),
)
def test_a_definition_can_set_the_cancel_window() -> None:
    definition = parse_definition(
        """\
name: windows
tasks:
  work: {run: "true", cancel_window: 3s}
"""
    )

    assert definition.tasks["work"].policy.cancel_window == timedelta(seconds=3)
