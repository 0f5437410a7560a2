"""Alerts for people: list them by owner category, status and owner; acknowledge; resolve.

Acknowledging and resolving are operator decisions: the actor (``operator:<name>``) and the
time are recorded on the alert. An alert is never deleted: resolving it keeps its record and
lets the same condition be raised again (docs/operations.md, Alerts).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from veritask.core import refusals
from veritask.ledger import alerts, dialects
from veritask.ledger.alerts import AlertRow
from veritask.ledger.vocabulary import AlertCategory, AlertStatus
from veritask.services.errors import Conflict, InvalidInput, NotFound
from veritask.services.platform import Platform

__all__ = [
    "MAX_PAGE",
    "AlertCategory",
    "AlertCounts",
    "AlertRow",
    "AlertStatus",
    "acknowledge",
    "count_alerts",
    "get_alert",
    "list_alerts",
    "resolve",
]

MAX_PAGE: Final = 500
#: Alert ids are 64-bit (BIGINT): a larger number names no alert. It is a 404, not a 422:
#: the path is a well-formed id, and which ids exist is the store's business, not the client's.
MAX_ALERT_ID: Final = 2**63 - 1


def list_alerts(
    platform: Platform,
    *,
    statuses: Sequence[AlertStatus] = (),
    categories: Sequence[AlertCategory] = (),
    owner: str | None = None,
    run_id: str | None = None,
    before_id: int | None = None,
    limit: int = 100,
) -> list[AlertRow]:
    """Alerts newest first; with no status given, the unresolved ones (open and acknowledged)."""
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidInput.about("limit", refusals.BETWEEN.format(low=1, high=MAX_PAGE))
    wanted = tuple(statuses) or (AlertStatus.OPEN, AlertStatus.ACKNOWLEDGED)
    with dialects.read_transaction(platform.engine) as connection:
        return alerts.list_alerts(
            connection,
            statuses=wanted,
            categories=categories,
            owner=owner,
            run_id=run_id,
            before_id=before_id,
            limit=limit,
        )


@dataclass(frozen=True)
class AlertCounts:
    """How many alerts are open, acknowledged and resolved."""

    open: int
    acknowledged: int
    resolved: int

    @property
    def changes(self) -> int:
        """A number that grows whenever an alert is raised, acknowledged or resolved.

        Alerts are never deleted and only move forward (open -> acknowledged -> resolved),
        so weighting each status by its place in that order makes every change add at
        least one: a page polls this to learn cheaply that the alerts changed.
        """
        return self.open + 2 * self.acknowledged + 3 * self.resolved


def count_alerts(platform: Platform) -> AlertCounts:
    """The alerts per status, in one grouped count."""
    with dialects.read_transaction(platform.engine) as connection:
        found = alerts.count_by_status(connection)
    return AlertCounts(
        found[AlertStatus.OPEN], found[AlertStatus.ACKNOWLEDGED], found[AlertStatus.RESOLVED]
    )


def _refuse_if_no_such_id(alert_id: int) -> None:
    if not 1 <= alert_id <= MAX_ALERT_ID:
        raise NotFound(refusals.NO_ALERT.format(alert_id=alert_id))


def get_alert(platform: Platform, alert_id: int) -> AlertRow:
    _refuse_if_no_such_id(alert_id)
    with dialects.read_transaction(platform.engine) as connection:
        found = alerts.get_alert(connection, alert_id)
    if found is None:
        raise NotFound(refusals.NO_ALERT.format(alert_id=alert_id))
    return found


def acknowledge(platform: Platform, alert_id: int, *, actor: str) -> AlertRow:
    """Someone took the alert; it stays unresolved (and still blocks a duplicate)."""
    _refuse_if_no_such_id(alert_id)
    try:
        return alerts.acknowledge(platform.ledger, alert_id, actor=actor)
    except alerts.AlertNotFound as exc:
        raise NotFound(str(exc)) from None
    except alerts.AlertClosed as exc:
        raise Conflict(str(exc), current_state=AlertStatus.RESOLVED.value) from None


def resolve(platform: Platform, alert_id: int, *, actor: str) -> AlertRow:
    """The condition is over or handled; the same condition may be raised again later."""
    _refuse_if_no_such_id(alert_id)
    try:
        return alerts.resolve(platform.ledger, alert_id, actor=actor)
    except alerts.AlertNotFound as exc:
        raise NotFound(str(exc)) from None
    except alerts.AlertClosed as exc:
        raise Conflict(str(exc), current_state=AlertStatus.RESOLVED.value) from None
