"""The coarse ``/api/v1`` vocabulary: four values, always with ``raw_state``."""

from __future__ import annotations

import pytest

from veritask.core.states import InstanceState
from veritask.core.vocabulary import V1_STATE, CoarseState, to_v1

# Written by hand from the v1 contract, independently of veritask.core.vocabulary (whose
# table docs/state-machine.md shows).
EXPECTED: dict[str, set[str]] = {
    "WAITING": {"CREATED", "SCHEDULED", "QUEUED", "UP_FOR_RETRY"},
    "RUNNING": {"RUNNING", "LOST", "CANCELLING", "CANCEL_FAILED"},
    "SUCCESS": {"SUCCESS", "SKIPPED"},
    "FAILED": {"FAILED", "START_FAILED", "TIMEOUT", "CANCELLED", "UPSTREAM_FAILED", "REMOVED"},
}


def test_the_v1_vocabulary_has_exactly_the_four_values() -> None:
    assert sorted(c.value for c in CoarseState) == sorted(EXPECTED)


def test_the_design_table_names_every_instance_state_exactly_once() -> None:
    listed = [name for names in EXPECTED.values() for name in names]
    assert len(listed) == len(set(listed))
    assert set(listed) == {s.value for s in InstanceState}


def test_every_instance_state_has_exactly_one_v1_value() -> None:
    assert set(V1_STATE) == set(InstanceState)
    for state in InstanceState:
        owners = [coarse for coarse, names in EXPECTED.items() if state.value in names]
        assert owners == [V1_STATE[state].value], state


@pytest.mark.parametrize("state", list(InstanceState), ids=str)
def test_to_v1_gives_the_coarse_value_and_always_the_raw_state(state: InstanceState) -> None:
    shown = to_v1(state)
    assert shown["raw_state"] == state.value
    assert state.value in EXPECTED[shown["state"]]
    assert set(shown) == {"state", "raw_state"}


def test_nothing_is_lost_on_the_way_down() -> None:
    seen = {tuple(sorted(to_v1(s).items())) for s in InstanceState}
    assert len(seen) == len(InstanceState)
