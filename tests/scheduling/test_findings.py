"""Bugs found while proving the scheduler, in code the scheduling loop does not own; fixed.

Each test states the behaviour the design asks for; they were strict xfails until the fixes.
"""

from __future__ import annotations

from datetime import timedelta

from tests.scheduling.harness import Harness
from veritask.core.states import InstanceState, RunExecutionState, TriggerKind
from veritask.definitions.parse import parse_definition
from veritask.scheduling import triggers


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


def test_a_definition_can_set_the_cancel_window() -> None:
    definition = parse_definition(
        """\
name: windows
tasks:
  work: {run: "true", cancel_window: 3s}
"""
    )

    assert definition.tasks["work"].policy.cancel_window == timedelta(seconds=3)
