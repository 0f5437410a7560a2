"""Which attempts a pool admits now: slots, priorities and aging, as pure functions.

A pool has a number of slots; an active attempt holds ``pool_slots`` of them from the
transaction that opens it until its terminal event. The ledger counts the slots in use and
hands this module the instances that may open now (the *candidates*) and those that waited
for the same pools earlier (the *waiters*, recorded by other runs' passes). The verdict for
each candidate is open or wait, with the reason a person reads.

Order: the higher effective priority first, then the earlier logical time, then the instance
created first (ids are time-ordered). The effective priority is the priority plus one for
every ``aging`` waited, so a low priority that waits long enough outranks any newcomer: no
starvation. A claim may not jump a claim ranked before it that does not fit (a task of three
slots is not starved by tasks of one); a claim that could never fit (more slots than the pool
has) waits without holding up the others.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from veritask.core import reasons

#: The pool of tasks that name none. Unlimited until someone defines it.
DEFAULT_POOL: Final = "default"
#: How many holders the reason names before it says how many more there are.
HOLDERS_NAMED: Final = 3


@dataclass(frozen=True)
class Claim:
    """An instance that wants a pool's slots (a candidate now, or a waiter from before)."""

    instance_id: str
    pool: str
    slots: int
    priority: int
    logical_time: datetime | None
    #: When it began waiting (now for a candidate that never waited).
    since: datetime


@dataclass(frozen=True)
class Pool:
    """A pool as the opening transaction sees it, locked."""

    name: str
    #: None: unlimited (the default pool while nobody defined it).
    slots: int | None
    used: int
    #: A few of the tasks holding its slots, for the reason (``definition.task``).
    holders: Sequence[str] = ()
    holder_count: int = 0


@dataclass(frozen=True)
class Verdict:
    admitted: bool
    reason: str | None = None


def effective_priority(claim: Claim, now: datetime, aging: timedelta | None) -> int:
    """The priority plus one per ``aging`` waited (``None``: no aging)."""
    if aging is None or aging <= timedelta(0) or now <= claim.since:
        return claim.priority
    return claim.priority + int((now - claim.since) / aging)


def rank(claim: Claim, now: datetime, aging: timedelta | None) -> tuple[int, datetime, str]:
    """The sort key: higher effective priority, then earlier logical time, then creation."""
    logical = claim.logical_time if claim.logical_time is not None else claim.since
    return (-effective_priority(claim, now, aging), logical, claim.instance_id)


def admit(
    candidates: Sequence[Claim],
    waiters: Sequence[Claim],
    pools: Mapping[str, Pool | None],
    *,
    now: datetime,
    aging: timedelta | None,
) -> dict[str, Verdict]:
    """The verdict for every candidate. ``pools`` maps each pool a candidate names to its
    locked state, or None when it is not defined (the candidate waits, saying so)."""
    verdicts: dict[str, Verdict] = {}
    asking = {c.instance_id for c in candidates}
    by_pool: dict[str, list[tuple[Claim, bool]]] = {}
    for claim in candidates:
        by_pool.setdefault(claim.pool, []).append((claim, True))
    for claim in waiters:
        if claim.instance_id not in asking and claim.pool in by_pool:
            by_pool[claim.pool].append((claim, False))
    for name, claims in by_pool.items():
        pool = pools.get(name)
        if pool is None:
            if name == DEFAULT_POOL:
                verdicts.update((c.instance_id, Verdict(True)) for c, new in claims if new)
                continue
            why = reasons.POOL_UNDEFINED.format(pool=name, name=name)
            verdicts.update((c.instance_id, Verdict(False, why)) for c, new in claims if new)
            continue
        if pool.slots is None:
            verdicts.update((c.instance_id, Verdict(True)) for c, new in claims if new)
            continue
        claims.sort(key=lambda pair: rank(pair[0], now, aging))
        free = pool.slots - pool.used
        blocked_by: Claim | None = None
        for claim, new in claims:
            if claim.slots == 0:
                if new:  # a claim of no slots (a wait) takes nothing and blocks nobody
                    verdicts[claim.instance_id] = Verdict(True)
                continue
            if claim.slots > pool.slots:
                if new:
                    too_big = reasons.POOL_TOO_SMALL.format(
                        pool=name, needed=claim.slots, slots=pool.slots
                    )
                    verdicts[claim.instance_id] = Verdict(False, too_big)
                continue
            if blocked_by is None and claim.slots <= free:
                # A waiter of another run keeps its place: its run opens it when read next.
                free -= claim.slots
                if new:
                    verdicts[claim.instance_id] = Verdict(True)
                continue
            if blocked_by is None:
                blocked_by = claim
            if new:
                verdicts[claim.instance_id] = Verdict(False, full_reason(pool, claim.slots))
    return verdicts


def full_reason(pool: Pool, wanted: int) -> str:
    """``waiting for pool warehouse (3 of 3 slots used by a.load, b.copy, c.sync)``."""
    holders = ", ".join(pool.holders)
    more = pool.holder_count - len(pool.holders)
    if not holders:
        # Slots free but kept for claims ranked higher (or a pool of 0 slots).
        return reasons.POOL_QUEUED.format(
            pool=pool.name, used=pool.used, slots=pool.slots, wanted=wanted
        )
    if more > 0:
        return reasons.POOL_FULL_MORE.format(
            pool=pool.name, used=pool.used, slots=pool.slots, holders=holders, more=more
        )
    return reasons.POOL_FULL.format(
        pool=pool.name, used=pool.used, slots=pool.slots, holders=holders
    )
