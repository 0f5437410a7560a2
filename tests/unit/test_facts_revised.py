"""The fold's fast copy of a frozen record (core/facts.py) refuses a field the record lacks."""

from __future__ import annotations

import pytest

from veritask.core import facts
from veritask.core.facts import AttemptFacts, InstanceFacts


def test_a_misspelled_field_fails_and_names_it() -> None:
    attempt = AttemptFacts(1)
    with pytest.raises(TypeError, match="AttemptFacts has no field progres_seq"):
        facts._revised(attempt, progres_seq=3)


def test_a_misspelled_field_of_an_instance_fails_too() -> None:
    with pytest.raises(TypeError, match="InstanceFacts has no field atempts"):
        facts._revised(InstanceFacts("inst"), atempts=())


def test_a_known_field_is_copied_and_the_original_kept() -> None:
    attempt = AttemptFacts(1)
    revised = facts._revised(attempt, progress_seq=3)
    assert revised.progress_seq == 3
    assert attempt.progress_seq == 0
    assert revised == AttemptFacts(1, progress_seq=3)
