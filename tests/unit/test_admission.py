"""Which openings a pool admits: slots, priorities, ties, aging (core.admission, pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from veritask.core import admission
from veritask.core.admission import Claim, Pool

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
DAY = datetime(2026, 5, 1, tzinfo=UTC)


def claim(
    instance_id: str,
    *,
    priority: int = 0,
    slots: int = 1,
    logical_time: datetime = DAY,
    since: datetime = NOW,
    pool: str = "wh",
) -> Claim:
    return Claim(instance_id, pool, slots, priority, logical_time, since)


def admitted(
    candidates: list[Claim],
    *,
    slots: int | None = 2,
    used: int = 0,
    waiters: list[Claim] | None = None,
    aging: timedelta | None = None,
) -> list[str]:
    pool = Pool("wh", slots, used, ("d.a",), 1)
    verdicts = admission.admit(candidates, waiters or [], {"wh": pool}, now=NOW, aging=aging)
    return sorted(i for i, verdict in verdicts.items() if verdict.admitted)


def test_no_more_slots_than_free_are_given() -> None:
    claims = [claim(f"i{n}") for n in range(5)]
    assert admitted(claims, slots=3, used=1) == ["i0", "i1"]


def test_higher_priority_first_then_logical_time_then_creation() -> None:
    claims = [
        claim("i1", priority=0),
        claim("i2", priority=5),
        claim("i3", priority=0, logical_time=DAY - timedelta(days=1)),
        claim("i0", priority=0),
    ]
    assert admitted(claims, slots=1) == ["i2"]
    assert admitted(claims, slots=2) == ["i2", "i3"]
    assert admitted(claims, slots=3) == ["i0", "i2", "i3"]  # i0 was created before i1


def test_a_waiter_of_another_run_keeps_its_place() -> None:
    waiter = claim("other", priority=9)
    assert admitted([claim("mine")], slots=1, waiters=[waiter]) == []
    assert admitted([claim("mine")], slots=2, waiters=[waiter]) == ["mine"]
    assert admitted([claim("mine", priority=10)], slots=1, waiters=[waiter]) == ["mine"]


def test_a_large_claim_is_not_jumped_by_smaller_ones_behind_it() -> None:
    big = claim("big", priority=1, slots=2)
    small = claim("small")
    assert admitted([big, small], slots=2, used=1) == []


def test_a_claim_larger_than_the_pool_waits_without_holding_up_the_others() -> None:
    verdicts = admission.admit(
        [claim("huge", priority=5, slots=3), claim("small")],
        [],
        {"wh": Pool("wh", 2, 0)},
        now=NOW,
        aging=None,
    )
    assert verdicts["small"].admitted
    assert verdicts["huge"].reason == ("waiting for pool wh: it needs 3 slots and the pool has 2")


def test_aging_lets_a_long_wait_outrank_a_newer_higher_priority() -> None:
    old = claim("old", priority=0, since=NOW - timedelta(minutes=10))
    new = claim("new", priority=5)
    minute = timedelta(minutes=1)
    assert admission.effective_priority(old, NOW, minute) == 10
    assert admitted([old, new], slots=1, aging=minute) == ["old"]
    assert admitted([old, new], slots=1, aging=None) == ["new"]


def test_the_reason_names_the_pool_and_its_holders() -> None:
    pool = Pool("warehouse", 3, 3, ("a.load", "b.copy", "c.sync"), 3)
    verdicts = admission.admit(
        [claim("x", pool="warehouse")], [], {"warehouse": pool}, now=NOW, aging=None
    )
    assert verdicts["x"].reason == (
        "waiting for pool warehouse (3 of 3 slots used by a.load, b.copy, c.sync)"
    )
    more = Pool("warehouse", 5, 5, ("a.load", "b.copy", "c.sync"), 5)
    assert admission.full_reason(more, 1) == (
        "waiting for pool warehouse (5 of 5 slots used by a.load, b.copy, c.sync and 2 more)"
    )


def test_the_default_pool_is_unlimited_until_defined_and_others_wait_for_a_definition() -> None:
    verdicts = admission.admit(
        [claim("a", pool="default"), claim("b", pool="gpu")],
        [],
        {"default": None, "gpu": None},
        now=NOW,
        aging=None,
    )
    assert verdicts["a"].admitted
    assert not verdicts["b"].admitted
    assert verdicts["b"].reason is not None and "gpu, which is not defined" in verdicts["b"].reason


def test_a_claim_of_no_slots_opens_in_a_full_pool_and_blocks_nobody() -> None:
    """A wait task claims no slot: it opens when the pool is full, and a claim ranked after it
    that fits is not held back by it."""
    wait = claim("wait", slots=0, priority=9)
    assert admitted([wait, claim("work")], slots=1, used=1) == ["wait"]
    assert admitted([wait, claim("work")], slots=2, used=1) == ["wait", "work"]
    assert admitted([wait], slots=0) == ["wait"]
