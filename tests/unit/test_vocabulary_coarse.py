"""Every state name of every object has one v1 value (docs/state-machine.md)."""

from __future__ import annotations

import pytest

from veritask.core.states import AttemptState, InstanceState, RunExecutionState
from veritask.core.vocabulary import CoarseState, coarse


@pytest.mark.parametrize("name", sorted({s.value for s in (*AttemptState, *RunExecutionState)}))
def test_every_attempt_and_run_state_has_a_v1_value(name: str) -> None:
    assert coarse(name) in set(CoarseState)


def test_attempt_only_states_map_as_the_instance_would_end() -> None:
    assert coarse("NOT_RECEIVED") is CoarseState.FAILED
    assert coarse("ABANDONED") is CoarseState.FAILED


def test_states_that_share_a_name_map_the_same() -> None:
    for state in InstanceState:
        assert coarse(state.value) is coarse(state.value)
    assert coarse("QUEUED") is CoarseState.WAITING
    assert coarse("CANCELLING") is CoarseState.RUNNING


def test_an_unknown_name_has_no_v1_value() -> None:
    assert coarse("EXPLODED") is None
