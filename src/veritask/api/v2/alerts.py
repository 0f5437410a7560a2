"""``/api/v2/alerts``: list alerts by owner category, status and owner; acknowledge; resolve."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import Field, JsonValue

from veritask.api import problems, schemas
from veritask.api.security import Operator, PlatformDep, Viewer
from veritask.ledger.vocabulary import DeliveryState
from veritask.services import alerts
from veritask.services.alerts import AlertCategory, AlertStatus

router = APIRouter(tags=["alerts"])


class Alert(schemas.Out):
    """One alert: what, whose (owner category and owner), where, and who handled it when."""

    id: int
    category: AlertCategory = Field(description="Who owns the problem (docs/scheduling.md, 7)")
    status: AlertStatus
    message: str
    evidence: dict[str, JsonValue]
    owner: str | None = Field(description="The definition's owner: whom it is routed to")
    definition: str | None
    run_id: str | None
    instance_id: str | None
    attempt_no: int | None
    opened_at: datetime
    acknowledged_at: datetime | None
    acknowledged_by: str | None
    resolved_at: datetime | None
    resolved_by: str | None
    delivery_state: DeliveryState | None = Field(
        description="The webhook delivery: pending, delivered, failed, unrouted (null: none)"
    )


class AlertPage(schemas.Out):
    items: list[Alert]
    next_before: int | None = Field(description="Pass as `before` for the next page")


@router.get(
    "/alerts",
    response_model=AlertPage,
    responses=problems.documented(422),
    summary="List alerts, newest first (unresolved ones unless `status` says otherwise)",
)
def list_alerts(
    platform: PlatformDep,
    _: Viewer,
    status: Annotated[list[AlertStatus] | None, Query()] = None,
    category: Annotated[list[AlertCategory] | None, Query()] = None,
    owner: Annotated[str | None, Query(max_length=128)] = None,
    run_id: Annotated[str | None, Query(max_length=64)] = None,
    before: Annotated[int | None, Query(ge=1, le=2**62)] = None,
    limit: Annotated[int, Query(ge=1, le=alerts.MAX_PAGE)] = 100,
) -> AlertPage:
    found = alerts.list_alerts(
        platform,
        statuses=status or (),
        categories=category or (),
        owner=owner,
        run_id=run_id,
        before_id=before,
        limit=limit,
    )
    next_before = found[-1].id if len(found) == limit else None
    return AlertPage(items=[Alert.model_validate(item) for item in found], next_before=next_before)


@router.get(
    "/alerts/{alert_id}",
    response_model=Alert,
    responses=problems.documented(404),
    summary="Show one alert",
)
def get_alert(alert_id: int, platform: PlatformDep, _: Viewer) -> Alert:
    return Alert.model_validate(alerts.get_alert(platform, alert_id))


@router.post(
    "/alerts/{alert_id}/acknowledge",
    response_model=Alert,
    responses=problems.documented(404, 409),
    summary="Take an alert (operator); it stays unresolved",
)
def acknowledge(alert_id: int, platform: PlatformDep, principal: Operator) -> Alert:
    """Records who took it and when; 409 if it is already resolved."""
    return Alert.model_validate(alerts.acknowledge(platform, alert_id, actor=principal.actor))


@router.post(
    "/alerts/{alert_id}/resolve",
    response_model=Alert,
    responses=problems.documented(404, 409),
    summary="Close an alert (operator); the same condition may be raised again",
)
def resolve(alert_id: int, platform: PlatformDep, principal: Operator) -> Alert:
    """Records who closed it and when; 409 if it is already resolved."""
    return Alert.model_validate(alerts.resolve(platform, alert_id, actor=principal.actor))
