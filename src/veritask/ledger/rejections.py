"""Keeping refused events as evidence, within bounds: ``rejected_events`` is append-only.

A refused event is kept so that an operator can see what was sent and why it was refused. The
table refuses UPDATE and DELETE (only the retention purge deletes from it), so what one sender
can make it hold is bounded here: each stored report at most ``MAX_PAYLOAD_BYTES`` of JSON
(a larger one keeps its envelope and the start of its text, marked truncated) and a reason of
at most ``MAX_REASON_CHARS``; each attempt at most ``MAX_PER_ATTEMPT`` rows. Past that count a
refusal is only counted (``veritask_rejected_events_dropped`` on ``/metrics``) and logged.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
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
        stored["payload"] = bounded_payload(payload)
    reason = str(row["reason"])
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


def _short(value: object) -> str | int | float | bool | None:
    if isinstance(value, str):
        return value[:256]
    if value is None or isinstance(value, bool | int | float):
        return value
    return str(value)[:256]
