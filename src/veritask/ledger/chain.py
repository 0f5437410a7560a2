"""The hash chain: every recorded event carries the hash of its content linked to the hash of
the event before it of the same subject (docs/integrity.md).

A subject is what an event is about: a definition, a run, or an instance (``subject_type``,
``subject_id``). Its events, in ``position`` order, form one chain::

    chain_hash(e1) = SHA-256(encoding(e1, prev=""))
    chain_hash(en) = SHA-256(encoding(en, prev=chain_hash(en-1)))

:func:`encoding` is the canonical encoding, and a contract: changing it breaks every chain
already recorded. The subject's row (``task_instances``, ``runs``, ``definitions``) keeps the
chain's head in ``chain_head``, written in the same transaction as the event, under the
concurrency control that already orders the subject's appends: the instance's compare-and-set
on ``version``, a row lock on the run or the definition. No extra statement is needed to
append an instance's event: the head is read with the snapshot and written with it.
"""

from __future__ import annotations

import hashlib
import json
import operator
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Final

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from veritask.core.jsontypes import JSONObject
from veritask.ledger import schema, vocabulary

#: An event's columns: the row about to be inserted, or one read back.
Row = Mapping[str, object] | sa.RowMapping

#: The ``prev`` of a subject's first event.
GENESIS: Final = ""

#: The stored columns the hash covers (``position`` is not one: an export replayed elsewhere
#: gets new positions and keeps its chains). Every other column of ``events`` is here.
CHAINED_COLUMNS: Final = (
    "event_id",
    "subject_type",
    "subject_id",
    "run_id",
    "instance_id",
    "attempt_no",
    "kind",
    "actor",
    "seq",
    "from_state",
    "to_state",
    "event_time",
    "observed_at",
    "evidence",
    "outcome",
    "reason",
    "fingerprint",
)

#: The table whose row keeps each subject type's head.
_SUBJECT_TABLES: Final = {
    vocabulary.SubjectType.INSTANCE.value: schema.task_instances,
    vocabulary.SubjectType.RUN.value: schema.runs,
    vocabulary.SubjectType.DEFINITION.value: schema.definitions,
}


_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND: Final = timedelta(microseconds=1)
_columns = operator.itemgetter(*CHAINED_COLUMNS)
#: Where the times and the evidence sit in the encoded array (``prev`` is first).
_TIMES: Final = tuple(1 + CHAINED_COLUMNS.index(name) for name in ("event_time", "observed_at"))
_EVIDENCE: Final = 1 + CHAINED_COLUMNS.index("evidence")
_encode = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode


def _number(value: object) -> object:
    """An integral float as an integer: PostgreSQL's JSONB gives 1e16 back as 10000000000000000."""
    kind = type(value)
    if kind is dict:
        return {key: _number(item) for key, item in value.items()}  # type: ignore[attr-defined]
    if kind is list or kind is tuple:
        return [_number(item) for item in value]  # type: ignore[attr-defined]
    if kind is float and value.is_integer():  # type: ignore[attr-defined]
        return int(value)  # type: ignore[call-overload]
    return value


def encoding(row: Row, prev: str) -> bytes:
    """The canonical encoding of one event: the JSON array ``[prev, *columns]`` with the
    columns in :data:`CHAINED_COLUMNS` order; times as integer microseconds since
    1970-01-01T00:00:00Z; the evidence with its keys sorted and integral floats as integers;
    no spaces; non-ASCII escaped (so the bytes are ASCII and UTF-8 alike)."""
    values: list[object] = [prev, *_columns(row)]
    for place in _TIMES:
        moment = values[place]
        if not isinstance(moment, datetime):
            raise TypeError(f"{CHAINED_COLUMNS[place - 1]}: a datetime, not {moment!r}")
        values[place] = (moment - _EPOCH) // _MICROSECOND
    values[_EVIDENCE] = _number(values[_EVIDENCE])
    return _encode(values).encode()


def link(row: Row, prev: str | None) -> str:
    """The event's ``chain_hash``, hex: SHA-256 of :func:`encoding`."""
    return hashlib.sha256(encoding(row, prev or GENESIS)).hexdigest()


def head_for_update(connection: Connection, subject_type: str, subject_id: str) -> str | None:
    """The subject's head, its row locked until the transaction ends (PostgreSQL; SQLite has
    one writer), so that two appends to it never chain to the same predecessor. A subject
    without a row (none of the built-in writers makes one) chains on its last event."""
    table = _SUBJECT_TABLES[subject_type]
    row = connection.execute(
        sa.select(table.c.chain_head).where(table.c.id == subject_id).with_for_update()
    ).first()
    if row is not None:
        return None if row.chain_head is None else str(row.chain_head)
    e = schema.events.c
    last = connection.execute(
        sa.select(e.chain_hash)
        .where(e.subject_type == subject_type, e.subject_id == subject_id)
        .order_by(e.position.desc())
        .limit(1)
    ).scalar()
    return None if last is None else str(last)


def write_head(connection: Connection, subject_type: str, subject_id: str, head: str) -> None:
    table = _SUBJECT_TABLES[subject_type]
    connection.execute(table.update().where(table.c.id == subject_id).values(chain_head=head))


# -- verification ---------------------------------------------------------------------------


Subject = tuple[str, str]


@dataclass(frozen=True)
class Break:
    """The first link of a subject's chain that does not hold."""

    subject_type: str
    subject_id: str
    #: The event's place in its subject's chain, from 1; and its ``events.position``.
    index: int | None
    position: int | None
    problem: str

    def __str__(self) -> str:
        parts = [] if self.index is None else [f"event {self.index}"]
        if self.position is not None:
            parts.append(f"position {self.position}")
        where = ", ".join(parts) or "its head"
        return f"{self.subject_type} {self.subject_id}: chain broken at {where}: {self.problem}"

    def as_json(self) -> JSONObject:
        return {
            "subject_type": self.subject_type,
            "subject_id": self.subject_id,
            "index": self.index,
            "position": self.position,
            "problem": self.problem,
        }


@dataclass
class _Walk:
    head: str | None = None
    count: int = 0
    last_position: int | None = None
    broken: bool = False


@dataclass
class Chains:
    """Every subject's chain as walked: heads, lengths, and the hashes anything sealed."""

    events: int = 0
    breaks: list[Break] = field(default_factory=list)
    walks: dict[Subject, _Walk] = field(default_factory=dict)
    #: (subject, hash) -> (index, position) for the hashes asked about (sealed heads).
    found: dict[tuple[Subject, str], tuple[int, int]] = field(default_factory=dict)

    def head(self, subject: Subject) -> str | None:
        walk = self.walks.get(subject)
        return None if walk is None else walk.head


@dataclass(frozen=True)
class Anchor:
    """What a purge removed of a subject: events up to ``last_position``, ending in ``head``."""

    last_position: int
    head: str


def walk(
    connection: Connection,
    *,
    wanted: set[tuple[Subject, str]],
    anchors: Mapping[Subject, list[Anchor]],
) -> Chains:
    """Recompute every chain, in position order, and name each subject's first broken link.

    A subject whose events before some point were purged starts again from the purge's
    anchor (the head hash of what it removed); ``wanted`` are the (subject, hash) pairs the
    checkpoints sealed, found here with their index and position if the chain still holds them.
    """
    found = Chains()
    e = schema.events
    columns = [e.c.position, e.c.chain_hash, *(e.c[name] for name in CHAINED_COLUMNS)]
    statement = sa.select(*columns).order_by(e.c.position)
    for row in _rows(connection, statement):
        data = row._mapping
        subject: Subject = (str(data["subject_type"]), str(data["subject_id"]))
        state = found.walks.get(subject)
        if state is None:
            state = found.walks[subject] = _Walk()
        found.events += 1
        state.count += 1
        prev = state.head
        for anchor in anchors.get(subject, ()):
            if (state.last_position or 0) < anchor.last_position < data["position"]:
                prev = anchor.head
        stored = data["chain_hash"]
        expected = link(data, prev)
        if stored != expected and not state.broken:
            state.broken = True
            problem = (
                "it has no hash (written without the chain)"
                if stored is None
                else "its content or its predecessor is not what was hashed "
                "(an event changed, deleted or moved)"
            )
            found.breaks.append(Break(*subject, state.count, data["position"], problem))
        # Go on from the stored hash: one tampering is one break, not every later link.
        state.head = stored if isinstance(stored, str) else expected
        state.last_position = data["position"]
        if (subject, state.head) in wanted:
            found.found[(subject, state.head)] = (state.count, data["position"])
    return found


def check_rows(connection: Connection, chains: Chains) -> list[Break]:
    """Each subject row's recorded head against its chain's last event: a last event deleted
    (and not sealed yet) leaves the row's head pointing at nothing."""
    breaks = []
    for subject_type, table in _SUBJECT_TABLES.items():
        statement = sa.select(table.c.id, table.c.chain_head)
        for row in _rows(connection, statement):
            subject = (subject_type, str(row.id))
            walk_of = chains.walks.get(subject)
            if row.chain_head == chains.head(subject):
                continue
            count = 0 if walk_of is None else walk_of.count
            problem = (
                f"its row records head {row.chain_head}, its last event is "
                f"{chains.head(subject) or 'none'} (its last events deleted?)"
            )
            breaks.append(Break(subject_type, str(row.id), count + 1, None, problem))
    return breaks


def _rows(connection: Connection, statement: sa.Select[tuple[object, ...]]) -> Iterator[sa.Row]:  # type: ignore[type-arg]
    # Streamed in pages (a server-side cursor on PostgreSQL): a ledger may hold millions.
    yield from connection.execute(statement.execution_options(yield_per=5000))


def restore_heads(connection: Connection) -> None:
    """Set every subject row's head to its last event's hash (after a replay of an export,
    whose rows were written before their events)."""
    e = schema.events.c
    for subject_type, table in _SUBJECT_TABLES.items():
        last = (
            sa.select(e.chain_hash)
            .where(e.subject_type == subject_type, e.subject_id == table.c.id)
            .order_by(e.position.desc())
            .limit(1)
            .scalar_subquery()
        )
        connection.execute(table.update().values(chain_head=last))
