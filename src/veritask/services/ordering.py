"""The order a run's instances are listed in, everywhere they are listed: pipeline order.

Each task after every task it waits for, tasks ready at the same point in the definition's
order (``core.run_state.pipeline_order``), then the publication steps in their own order
(the checks as the definition lists them, then the commit). The instances of a mapped task
stay together, by index. A stored definition version never changes, so its order is kept
per (definition id, version): a live page of a run of 1,000 tasks does not parse its
definition again on every refresh.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Final, TypeVar

from veritask.core.run_state import pipeline_order
from veritask.definitions import parse
from veritask.definitions.model import Definition
from veritask.ledger import queries
from veritask.ledger.database import Connection
from veritask.scheduling import publication

Item = TypeVar("Item")


def task_order(definition: Definition) -> tuple[str, ...]:
    """Every task key a run of the definition has, in the order its instances are listed."""
    return (
        *pipeline_order(definition.run_graph()),
        *publication.check_keys(definition),
        *((publication.COMMIT_KEY,) if definition.publish is not None else ()),
    )


def version_order(connection: Connection, definition_id: str, version: int) -> tuple[str, ...]:
    """The task order of a stored definition version (empty if it is not stored)."""
    kept = cached_order(definition_id, version)
    if kept is not None:
        return kept
    stored = queries.get_definition_version(
        connection, definition_id=definition_id, version=version
    )
    if stored is None:
        return ()
    order = task_order(parse.definition_from_json(stored.spec))
    remember_order(definition_id, version, order)
    return order


def in_pipeline_order(
    items: Iterable[Item],
    order: Iterable[str],
    *,
    task: Callable[[Item], str],
    index: Callable[[Item], int],
) -> list[Item]:
    """The items by their task's place in ``order``, then by map index; a task ``order``
    does not name (a version no longer stored) comes after, by name."""
    position = {key: place for place, key in enumerate(order)}
    unknown = len(position)
    return sorted(
        items, key=lambda item: (position.get(task(item), unknown), task(item), index(item))
    )


#: Task orders by (definition id, version): a version never changes once stored.
_ORDERS: dict[tuple[str, int], tuple[str, ...]] = {}
_ORDERS_KEPT: Final = 256
_LOCK = threading.Lock()  # pages render in a thread pool


def cached_order(definition_id: str, version: int) -> tuple[str, ...] | None:
    """The version's order if it is kept."""
    with _LOCK:
        return _ORDERS.get((definition_id, version))


def remember_order(definition_id: str, version: int, order: tuple[str, ...]) -> None:
    """Keep the version's order (the oldest kept is forgotten first)."""
    with _LOCK:
        _ORDERS[(definition_id, version)] = order
        while len(_ORDERS) > _ORDERS_KEPT:
            _ORDERS.pop(next(iter(_ORDERS)))
