"""Pools: list them, create or resize one, delete one (docs/scheduling.md, section 11).

A pool's size takes effect at the next opening: growing it lets waiting tasks open at once;
shrinking it below the slots in use stops nothing (running attempts finish and free their
slots). Deleting a pool leaves what names it waiting, saying that the pool is not defined.
"""

from __future__ import annotations

from veritask.core import refusals
from veritask.definitions.model import SLUG
from veritask.ledger import dialects
from veritask.ledger import pools as store
from veritask.ledger.pools import PoolRow
from veritask.services.errors import InvalidInput, NotFound
from veritask.services.platform import Platform

__all__ = ["MAX_SLOTS", "PoolRow", "delete_pool", "get_pool", "list_pools", "set_pool"]

#: The largest pool a request may ask for (a bound, not a recommendation).
MAX_SLOTS = 1_000_000


def list_pools(platform: Platform) -> list[PoolRow]:
    """Every defined pool and the default one, with the slots in use and the tasks waiting."""
    with dialects.read_transaction(platform.engine) as connection:
        return store.list_pools(connection, now=platform.now())


def get_pool(platform: Platform, name: str) -> PoolRow:
    with dialects.read_transaction(platform.engine) as connection:
        found = store.list_pools(connection, now=platform.now(), name=name)
    if not found:
        raise NotFound(refusals.NO_POOL.format(name=name))
    return found[0]


def set_pool(platform: Platform, name: str, *, slots: int, actor: str) -> tuple[PoolRow, bool]:
    """Create or resize a pool; the pool and whether it was created."""
    if not SLUG.fullmatch(name):
        raise InvalidInput.about("name", refusals.NOT_A_POOL_NAME.format(name=name))
    if isinstance(slots, bool) or not 0 <= slots <= MAX_SLOTS:
        raise InvalidInput.about("slots", refusals.BETWEEN.format(low=0, high=MAX_SLOTS))
    with platform.engine.begin() as connection:
        created = store.set_pool(
            connection, name=name, slots=slots, actor=actor, now=platform.now()
        )
    return get_pool(platform, name), created


def delete_pool(platform: Platform, name: str) -> None:
    with platform.engine.begin() as connection:
        if not store.delete_pool(connection, name):
            raise NotFound(refusals.NO_POOL.format(name=name))
