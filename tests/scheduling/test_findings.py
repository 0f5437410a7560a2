"""Bugs found while proving the scheduler, in code the scheduling loop does not own; fixed.

Each test states the behaviour the design asks for; they were strict xfails until the fixes.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.scheduling.harness import Harness
from veritask.core.states import InstanceState, TriggerKind
from veritask.definitions.parse import parse_definition
from veritask.scheduling import triggers


def test_a_run_refused_by_forbid_is_never_made_so_nothing_is_left_waiting(
    harness: Harness,
) -> None:
    # Once a refused run was made CANCELLED and its instances could be left waiting; now the
    # request itself is refused and no run (nor instance) exists to be left behind.
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
    with pytest.raises(triggers.Overlap) as refused:
        triggers.trigger(harness.ledger, name="waits", kind=TriggerKind.MANUAL, actor="operator:t")
    assert refused.value.active_run_ids == [first]
    for _ in range(5):
        harness.tick()

    assert set(harness.all_instance_ids()) == {harness.instances(first)["work"].id}


def test_a_definition_can_set_the_cancel_window() -> None:
    definition = parse_definition(
        """\
name: windows
tasks:
  work: {run: "true", cancel_window: 3s}
"""
    )

    assert definition.tasks["work"].policy.cancel_window == timedelta(seconds=3)
