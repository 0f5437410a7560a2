"""Keeping refused events as evidence, within bounds: ``rejected_events`` is append-only.

A refused event is kept so that an operator can see what was sent and why it was refused. The
table refuses UPDATE and DELETE (only the retention purge deletes from it), so what one sender
can make it hold is bounded here: each stored report at most ``MAX_PAYLOAD_BYTES`` of JSON
(a larger one keeps its envelope and the start of its text, marked truncated) and a reason of
at most ``MAX_REASON_CHARS``; each attempt at most ``MAX_PER_ATTEMPT`` rows. Past that count a
refusal is only counted (``veritask_rejected_events_dropped`` on ``/metrics``) and logged.

A refused event is often refused for what the tables cannot hold (a time without its offset, a
number past 64 bits, a NUL character, an id longer than its column), so what is stored is made
storable first: each column gets what it can hold (NULL, or the text cut to its width) and the
payload keeps the rest as text. Storing the evidence of a refusal never fails on what was sent.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Collection
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from veritask.core.jsontypes import JSONObject, JSONValue
from veritask.ledger import metric_values, schema

log = logging.getLogger(__name__)

#: The most JSON text one stored refused report keeps.
MAX_PAYLOAD_BYTES: Final = 16 * 1024
#: What a truncated report keeps of its JSON text.
KEPT_HEAD_CHARS: Final = 4 * 1024
MAX_REASON_CHARS: Final = 2000
#: The most refused events kept per attempt (per instance, for events about no attempt).
MAX_PER_ATTEMPT: Final = 100
DROPPED_METRIC: Final = "rejected_events_dropped_total"

_ENVELOPE: Final = ("event_id", "instance_id", "attempt_no", "kind", "actor", "event_time", "seq")


def store(connection: Connection, row: dict[str, object]) -> bool:
    """Insert one ``rejected_events`` row within the bounds; False when only counted."""
    x = schema.rejected_events.c
    row = storable_row(row)
    held = connection.execute(
        sa.select(sa.func.count()).where(
            x.instance_id == row["instance_id"], x.attempt_no == row["attempt_no"]
        )
    ).scalar_one()
    if held >= MAX_PER_ATTEMPT:
        metric_values.PROCESS_TALLY.add(DROPPED_METRIC, {"kind": str(row["kind"])})
        log.warning(
            "not storing another refused %s event of attempt %s of instance %s: %d kept already",
            row["kind"],
            row["attempt_no"],
            row["instance_id"],
            held,
        )
        return False
    payload = row["payload"]
    stored = dict(row)
    if isinstance(payload, dict):
        stored["payload"] = bounded_payload(_storable(payload, 0))  # type: ignore[arg-type]
    reason = _clean(str(row["reason"]))
    if len(reason) > MAX_REASON_CHARS:
        stored["reason"] = reason[: MAX_REASON_CHARS - 1] + "…"
    connection.execute(schema.rejected_events.insert(), stored)
    return True


@dataclass(frozen=True)
class RejectedEventRow:
    """A refused event as kept: what was sent (perhaps truncated, see ``bounded_payload``)
    and why it was refused."""

    position: int
    event_id: str | None
    attempt_no: int | None
    kind: str | None
    actor: str | None
    event_time: datetime | None
    observed_at: datetime
    payload: JSONValue
    reason: str


def of_instance(
    connection: Connection,
    instance_id: str,
    *,
    limit: int,
    newest_first: bool = False,
    kinds: Collection[str] | None = None,
) -> list[RejectedEventRow]:
    """The events refused for this instance, oldest first (or newest first), only of
    ``kinds`` when given (at most ``limit``)."""
    x = schema.rejected_events.c
    statement = (
        sa.select(schema.rejected_events)
        .where(x.instance_id == instance_id)
        .order_by(x.position.desc() if newest_first else x.position)
        .limit(limit)
    )
    if kinds is not None:
        statement = statement.where(x.kind.in_(list(kinds)))
    rows = connection.execute(statement).all()
    return [
        RejectedEventRow(
            row.position,
            row.event_id,
            row.attempt_no,
            row.kind,
            row.actor,
            row.event_time,
            row.observed_at,
            row.payload,
            row.reason,
        )
        for row in rows
    ]


def bounded_payload(payload: JSONObject) -> JSONObject:
    """``payload`` itself when small; else its envelope, its size and the start of its text."""
    text = json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
    if len(text.encode()) <= MAX_PAYLOAD_BYTES:
        return payload
    kept: JSONObject = {key: _short(payload[key]) for key in _ENVELOPE if key in payload}
    kept.update(truncated=True, original_bytes=len(text.encode()), head=text[:KEPT_HEAD_CHARS])
    return kept


#: Integer columns of ``rejected_events`` and their range (INTEGER).
_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)
#: How deep a stored payload nests before the rest is kept as text.
_MAX_DEPTH = 32


def storable_row(row: dict[str, object]) -> dict[str, object]:
    """``row`` with each column's value one the column can hold: a time without its offset
    (or out of range) and a number out of range become NULL, a text is cut to its width and
    loses its NUL characters and unpaired surrogates. The payload still tells what was sent."""
    columns = schema.rejected_events.c
    fixed = dict(row)
    for name, value in row.items():
        if name == "payload" or name not in columns:
            continue
        column_type = columns[name].type
        if isinstance(value, str):
            width = getattr(column_type, "length", None)
            fixed[name] = _clean(value)[:width] if width else _clean(value)
        elif isinstance(value, bool):
            continue
        elif isinstance(value, int) and not _INT32[0] <= value <= _INT32[1]:
            fixed[name] = None
        elif isinstance(value, datetime):
            fixed[name] = _aware_utc(value)
    return fixed


def _aware_utc(moment: datetime) -> datetime | None:
    if moment.tzinfo is None or moment.utcoffset() is None:
        return None
    try:
        return moment.astimezone(UTC)
    except OverflowError:
        return None


def _clean(text: str) -> str:
    """The text without what no column or JSON document of the ledger stores: NUL characters
    and unpaired surrogates become their escapes, as text."""
    if "\x00" in text:
        text = text.replace("\x00", "\\u0000")
    if not text.isascii():
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def _storable(value: object, depth: int) -> JSONValue:
    """A JSON value any of the ledger's databases stores: what one would refuse (NaN, an
    integer past 64 bits, a NUL, a surrogate, a deep nest) is kept as its text."""
    if isinstance(value, str):
        return _clean(value)
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if _INT64[0] <= value <= _INT64[1] else str(value)[:256]
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if depth >= _MAX_DEPTH:
        return _clean(str(value)[:256])
    if isinstance(value, list):
        return [_storable(item, depth + 1) for item in value]
    if isinstance(value, dict):
        return {_clean(str(key)): _storable(item, depth + 1) for key, item in value.items()}
    return _clean(str(value)[:256])


def _short(value: object) -> str | int | float | bool | None:
    if isinstance(value, str):
        return value[:256]
    if value is None or isinstance(value, bool | int | float):
        return value
    return str(value)[:256]
