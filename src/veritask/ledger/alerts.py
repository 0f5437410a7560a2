"""Alerts: one unresolved alert per condition, each with its owner category (docs/operations.md).

An alert is routed by the owner of the definition it is about: when the raiser knows only the
run, the definition and its owner are looked up here, so every alert carries both. Its life is
open -> acknowledged -> resolved (or open -> resolved); who moved it and when are kept.
A resolved alert frees its dedup key: the same condition may be raised again.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from veritask.core import refusals
from veritask.core.jsontypes import JSONObject
from veritask.ledger import dialects, errors, schema
from veritask.ledger.ledger import Ledger
from veritask.ledger.vocabulary import AlertCategory, AlertStatus, DeliveryState

log = logging.getLogger(__name__)


def raise_alert(
    ledger: Ledger,
    *,
    category: AlertCategory,
    dedup_key: str,
    message: str,
    evidence: JSONObject,
    run_id: str | None = None,
    instance_id: str | None = None,
    attempt_no: int | None = None,
    definition_id: str | None = None,
    owner: str | None = None,
) -> bool:
    """Open an alert unless one for the same condition is still unresolved; True if new."""
    with ledger.engine.begin() as connection:
        if run_id is not None and definition_id is None:
            definition_id, found_owner = _definition_of_run(connection, run_id)
            owner = owner or found_owner
        now = ledger.clock()
        return dialects.insert_ignoring_conflict(
            connection,
            schema.alerts,
            {
                "category": category.value,
                "dedup_key": dedup_key,
                "status": AlertStatus.OPEN.value,
                "message": message,
                "evidence": evidence,
                "run_id": run_id,
                "instance_id": instance_id,
                "attempt_no": attempt_no,
                "definition_id": definition_id,
                "owner": owner,
                "opened_at": now,
                "delivery_state": DeliveryState.PENDING.value,
                "next_delivery_at": now,
            },
            conflict_columns=[],
        )


def raise_quietly(
    ledger: Ledger,
    *,
    category: AlertCategory,
    dedup_key: str,
    message: str,
    evidence: JSONObject,
    run_id: str | None = None,
    instance_id: str | None = None,
    attempt_no: int | None = None,
) -> None:
    """:func:`raise_alert` for the loops: a database error is logged, never raised, so that
    failing to alert about one object never stops the work on the others."""
    try:
        raise_alert(
            ledger,
            category=category,
            dedup_key=dedup_key,
            message=message,
            evidence=evidence,
            run_id=run_id,
            instance_id=instance_id,
            attempt_no=attempt_no,
        )
    except errors.LedgerError:
        log.exception("could not raise the alert %s", dedup_key)


def _definition_of_run(connection: Connection, run_id: str) -> tuple[str | None, str | None]:
    r, d = schema.runs.c, schema.definitions.c
    row = connection.execute(
        sa.select(d.id, d.owner).join(schema.runs, r.definition_id == d.id).where(r.id == run_id)
    ).first()
    return (None, None) if row is None else (row.id, row.owner)


# -- the lifecycle -----------------------------------------------------------------------------


@dataclass(frozen=True)
class AlertRow:
    """One alert as stored."""

    id: int
    category: AlertCategory
    status: AlertStatus
    message: str
    evidence: JSONObject
    dedup_key: str
    owner: str | None
    definition_id: str | None
    definition: str | None
    run_id: str | None
    instance_id: str | None
    attempt_no: int | None
    opened_at: datetime
    acknowledged_at: datetime | None
    acknowledged_by: str | None
    resolved_at: datetime | None
    resolved_by: str | None
    delivery_state: DeliveryState | None


class AlertNotFound(errors.LedgerError):
    """There is no alert with this id."""


class AlertClosed(errors.LedgerError):
    """The alert is already resolved: it cannot be acknowledged or resolved again."""


def _select() -> sa.Select[tuple[object, ...]]:
    a, d = schema.alerts.c, schema.definitions.c
    return sa.select(schema.alerts, d.name.label("definition")).select_from(
        schema.alerts.outerjoin(schema.definitions, d.id == a.definition_id)
    )


def _row(found: sa.Row[tuple[object, ...]]) -> AlertRow:
    m = found._mapping
    state = m["delivery_state"]
    return AlertRow(
        id=int(m["id"]),
        category=AlertCategory(m["category"]),
        status=AlertStatus(m["status"]),
        message=str(m["message"]),
        evidence=dict(m["evidence"] or {}),
        dedup_key=str(m["dedup_key"]),
        owner=m["owner"],
        definition_id=m["definition_id"],
        definition=m["definition"],
        run_id=m["run_id"],
        instance_id=m["instance_id"],
        attempt_no=m["attempt_no"],
        opened_at=m["opened_at"],
        acknowledged_at=m["acknowledged_at"],
        acknowledged_by=m["acknowledged_by"],
        resolved_at=m["resolved_at"],
        resolved_by=m["resolved_by"],
        delivery_state=None if state is None else DeliveryState(state),
    )


def list_alerts(
    connection: Connection,
    *,
    statuses: Sequence[AlertStatus] = (),
    categories: Sequence[AlertCategory] = (),
    owner: str | None = None,
    run_id: str | None = None,
    before_id: int | None = None,
    limit: int = 100,
) -> list[AlertRow]:
    """Alerts newest first, filtered; ``before_id`` continues a listing (keyset on the id)."""
    a = schema.alerts.c
    statement = _select().order_by(a.id.desc()).limit(limit)
    if statuses:
        statement = statement.where(a.status.in_([s.value for s in statuses]))
    if categories:
        statement = statement.where(a.category.in_([c.value for c in categories]))
    if owner is not None:
        statement = statement.where(a.owner == owner)
    if run_id is not None:
        statement = statement.where(a.run_id == run_id)
    if before_id is not None:
        statement = statement.where(a.id < before_id)
    return [_row(found) for found in connection.execute(statement)]


def count_by_status(connection: Connection) -> dict[AlertStatus, int]:
    """How many alerts are in each status (every status present, zero included)."""
    a = schema.alerts.c
    found = dict.fromkeys(AlertStatus, 0)
    for status, count in connection.execute(
        sa.select(a.status, sa.func.count()).group_by(a.status)
    ):
        found[AlertStatus(status)] = int(count)
    return found


def unresolved_by_category(connection: Connection) -> list[tuple[str, str, int]]:
    """How many unresolved alerts there are of each (category, status), in that order."""
    a = schema.alerts.c
    rows = connection.execute(
        sa.select(a.category, a.status, sa.func.count())
        .where(a.status != AlertStatus.RESOLVED.value)
        .group_by(a.category, a.status)
        .order_by(a.category, a.status)
    ).all()
    return [(row[0], row[1], int(row[2])) for row in rows]


def get_alert(connection: Connection, alert_id: int) -> AlertRow | None:
    found = connection.execute(_select().where(schema.alerts.c.id == alert_id)).first()
    return None if found is None else _row(found)


def acknowledge(ledger: Ledger, alert_id: int, *, actor: str) -> AlertRow:
    """open -> acknowledged, recording who and when; acknowledging twice changes nothing."""
    a = schema.alerts.c
    with ledger.engine.begin() as connection:
        current = _current(connection, alert_id)
        if current.status is AlertStatus.OPEN:
            connection.execute(
                schema.alerts.update()
                .where(a.id == alert_id, a.status == AlertStatus.OPEN.value)
                .values(
                    status=AlertStatus.ACKNOWLEDGED.value,
                    acknowledged_at=ledger.clock(),
                    acknowledged_by=actor,
                )
            )
        elif current.status is AlertStatus.RESOLVED:
            raise AlertClosed(refusals.ALERT_RESOLVED.format(alert_id=alert_id))
        return _current(connection, alert_id)


def resolve(ledger: Ledger, alert_id: int, *, actor: str) -> AlertRow:
    """open|acknowledged -> resolved, recording who and when; a pending delivery is dropped."""
    a = schema.alerts.c
    with ledger.engine.begin() as connection:
        current = _current(connection, alert_id)
        if current.status is AlertStatus.RESOLVED:
            raise AlertClosed(refusals.ALERT_RESOLVED.format(alert_id=alert_id))
        connection.execute(
            schema.alerts.update()
            .where(a.id == alert_id, a.status == current.status.value)
            .values(
                status=AlertStatus.RESOLVED.value,
                resolved_at=ledger.clock(),
                resolved_by=actor,
                delivery_state=sa.case(
                    (a.delivery_state == DeliveryState.PENDING.value, None),
                    else_=a.delivery_state,
                ),
            )
        )
        return _current(connection, alert_id)


def _current(connection: Connection, alert_id: int) -> AlertRow:
    found = get_alert(connection, alert_id)
    if found is None:
        raise AlertNotFound(refusals.NO_ALERT.format(alert_id=alert_id))
    return found


# -- webhook delivery ---------------------------------------------------------------------------


def due_deliveries(
    connection: Connection, now: datetime, *, limit: int
) -> list[tuple[int, datetime]]:
    """(alert id, when its delivery fell due) of the pending deliveries due by ``now``, the
    longest waiting first."""
    a = schema.alerts.c
    rows = connection.execute(
        sa.select(a.id, a.next_delivery_at)
        .where(a.delivery_state == DeliveryState.PENDING.value, a.next_delivery_at <= now)
        .order_by(a.next_delivery_at)
        .limit(limit)
    ).all()
    return [(row.id, row.next_delivery_at) for row in rows]


def claim_delivery(
    connection: Connection, alert_id: int, *, seen: datetime, until: datetime
) -> bool:
    """Compare-and-set the pending delivery's due time from ``seen`` to ``until``: whoever
    moves it sends it; False if another process claimed it first."""
    a = schema.alerts.c
    claimed = connection.execute(
        schema.alerts.update()
        .where(
            a.id == alert_id,
            a.delivery_state == DeliveryState.PENDING.value,
            a.next_delivery_at == seen,
        )
        .values(next_delivery_at=until)
    ).rowcount
    return bool(claimed == 1)


def count_deliveries(connection: Connection, alert_id: int) -> int:
    """How many delivery attempts the alert has had."""
    d = schema.alert_deliveries.c
    found: int = connection.execute(
        sa.select(sa.func.count()).where(d.alert_id == alert_id)
    ).scalar_one()
    return found


def record_delivery(
    connection: Connection,
    alert_id: int,
    *,
    target: str,
    attempt_no: int,
    attempted_at: datetime,
    delivered: bool,
    status_code: int | None,
    error: str | None,
) -> None:
    """Record one delivery attempt of the alert."""
    connection.execute(
        schema.alert_deliveries.insert().values(
            alert_id=alert_id,
            target=target,
            attempt_no=attempt_no,
            attempted_at=attempted_at,
            delivered=delivered,
            status_code=status_code,
            error=error,
        )
    )


def settle_delivery(
    connection: Connection, alert_id: int, state: DeliveryState, next_at: datetime | None
) -> None:
    """Set the alert's delivery state, and when to try again (None: not again)."""
    connection.execute(
        schema.alerts.update()
        .where(schema.alerts.c.id == alert_id)
        .values(delivery_state=state.value, next_delivery_at=next_at)
    )
