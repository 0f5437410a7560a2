"""Metric values that outlive and cross processes: the ``metric_values`` table.

The API process serves ``/metrics``, but much of what it reports happens elsewhere: the
scheduler applies most events, its loop ticks, its reconciler decides. Each process counts in
memory (:class:`Tally`, cheap: no I/O on the hot path) and adds its counts to the table now
and then (:func:`flush`); ``/metrics`` reads the table. Every API process so reports the same
platform-wide totals. Labels are bounded sets (kinds, outcomes, definition names), never ids.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from veritask.ledger import dialects, schema

Labels = tuple[tuple[str, str], ...]


def labels_key(labels: Mapping[str, str]) -> str:
    """The canonical text of a label set: ``k=v,k=v`` sorted by key."""
    return ",".join(f"{key}={labels[key]}" for key in sorted(labels))


def parse_labels(text: str) -> dict[str, str]:
    """The inverse of :func:`labels_key` (values never hold ``,`` or ``=``: see ``add``)."""
    if not text:
        return {}
    return dict(part.split("=", 1) for part in text.split(","))


class Tally:
    """Counter increments of this process not yet added to the table. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, str], float] = {}

    def add(self, name: str, labels: Mapping[str, str], amount: float = 1.0) -> None:
        clean = {key: value.replace(",", "_").replace("=", "_") for key, value in labels.items()}
        key = (name, labels_key(clean))
        with self._lock:
            self._pending[key] = self._pending.get(key, 0.0) + amount

    def take(self) -> dict[tuple[str, str], float]:
        """The pending increments, which this tally forgets."""
        with self._lock:
            taken, self._pending = self._pending, {}
        return taken

    def give_back(self, taken: Mapping[tuple[str, str], float]) -> None:
        """Increments whose flush failed: kept for the next one."""
        with self._lock:
            for key, amount in taken.items():
                self._pending[key] = self._pending.get(key, 0.0) + amount


#: This process's tally: the ledger counts event outcomes into it.
PROCESS_TALLY = Tally()


def flush(engine: Engine, tally: Tally, now: datetime) -> int:
    """Add the tally's pending increments to the table; how many values changed."""
    taken = tally.take()
    if not taken:
        return 0
    try:
        with engine.begin() as connection:
            add_many(connection, taken, now)
    except Exception:
        tally.give_back(taken)
        raise
    return len(taken)


def add(connection: Connection, name: str, labels: str, amount: float, now: datetime) -> None:
    add_many(connection, {(name, labels): amount}, now)


def add_many(
    connection: Connection, amounts: Mapping[tuple[str, str], float], now: datetime
) -> None:
    """Add each ``(name, labels)``'s amount, in one statement; sorted, so that concurrent
    writers lock the rows in one order."""
    dialects.upsert_adding_many(
        connection,
        schema.metric_values,
        [
            {"name": name, "labels": labels, "value": amount, "updated_at": now}
            for (name, labels), amount in sorted(amounts.items())
        ],
        key_columns=("name", "labels"),
        add_column="value",
        set_columns=("updated_at",),
    )


def set_value(connection: Connection, name: str, labels: str, value: float, now: datetime) -> None:
    """A gauge: overwrite the value."""
    m = schema.metric_values.c
    updated = connection.execute(
        schema.metric_values.update()
        .where(m.name == name, m.labels == labels)
        .values(value=value, updated_at=now)
    ).rowcount
    if not updated:
        add(connection, name, labels, value, now)


@dataclass(frozen=True)
class Value:
    name: str
    labels: dict[str, str]
    value: float
    updated_at: datetime


def read(connection: Connection, names: tuple[str, ...]) -> list[Value]:
    m = schema.metric_values.c
    rows = connection.execute(
        sa.select(m.name, m.labels, m.value, m.updated_at)
        .where(m.name.in_(names))
        .order_by(m.name, m.labels)
    )
    return [Value(row.name, parse_labels(row.labels), row.value, row.updated_at) for row in rows]


def mark(connection: Connection, name: str) -> int:
    """A high-water mark kept as the unlabelled value ``name``; 0 before the first."""
    m = schema.metric_values.c
    value = connection.execute(
        sa.select(m.value).where(m.name == name, m.labels == "")
    ).scalar_one_or_none()
    return 0 if value is None else int(value)


def move_mark(connection: Connection, name: str, seen: int, new: int, now: datetime) -> bool:
    """Compare-and-set the mark ``name`` from ``seen`` to ``new``; False if another process
    moved it first. The first mark is inserted: a racing first insert raises ``DuplicateKey``."""
    m = schema.metric_values.c
    if seen == 0 and mark(connection, name) == 0:
        exists = connection.execute(sa.select(m.name).where(m.name == name, m.labels == "")).first()
        if exists is None:
            connection.execute(
                schema.metric_values.insert().values(
                    name=name, labels="", value=float(new), updated_at=now
                )
            )
            return True
    moved = connection.execute(
        schema.metric_values.update()
        .where(m.name == name, m.labels == "", m.value == float(seen))
        .values(value=float(new), updated_at=now)
    ).rowcount
    return bool(moved == 1)
