"""Time-ordered ids (UUIDv7): version and variant bits, order by time, uniqueness."""

from __future__ import annotations

import time
import uuid

import pytest

from veritask import ids
from veritask.ids import time_ordered_id


def test_an_id_is_a_version_7_uuid_carrying_its_millisecond() -> None:
    made = uuid.UUID(time_ordered_id(unix_ms=1_767_225_600_123))
    assert made.version == 7
    assert made.variant == uuid.RFC_4122
    assert made.int >> 80 == 1_767_225_600_123


def test_ids_of_later_milliseconds_sort_later_as_text() -> None:
    base = 1_767_225_600_000
    made = [time_ordered_id(unix_ms=base + step) for step in (0, 1, 2, 1000, 86_400_000)]
    assert made == sorted(made)


def test_the_clock_is_used_when_no_time_is_given() -> None:
    before = time.time_ns() // 1_000_000
    made = uuid.UUID(time_ordered_id()).int >> 80
    after = time.time_ns() // 1_000_000
    assert before <= made <= after


def test_ids_of_the_same_millisecond_are_distinct() -> None:
    made = {time_ordered_id(unix_ms=1_767_225_600_000) for _ in range(10_000)}
    assert len(made) == 10_000


@pytest.mark.parametrize("unix_ms", [-1, 1 << 48])
def test_a_time_outside_48_bits_is_refused(unix_ms: int) -> None:
    with pytest.raises(ValueError, match="48 bits"):
        time_ordered_id(unix_ms=unix_ms)


def test_short_forms_of_ids_of_the_same_millisecond_differ() -> None:
    made = [time_ordered_id(unix_ms=1_767_225_600_000) for _ in range(100)]
    shorts = {ids.short(one) for one in made}
    assert len(shorts) == 100
    assert all(one.endswith(ids.short(one)) and len(ids.short(one)) == 8 for one in made)
