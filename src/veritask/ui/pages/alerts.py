"""Alerts: grouped by owner category (docs/scheduling.md, 7), filtered by status, category, owner;
operators acknowledge and resolve them, and who did it when is shown beside each one."""

from __future__ import annotations

from typing import Annotated, Final
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from veritask.services import alerts
from veritask.services.alerts import AlertCategory, AlertRow, AlertStatus
from veritask.services.tokens import TokenRole
from veritask.ui import context
from veritask.ui.pages.routing import UiRoute

router = APIRouter(prefix="/ui/alerts", route_class=UiRoute, include_in_schema=False)
#: How many alerts one page lists; older ones follow by ``before``.
PAGE_SIZE: Final = 200
#: The status filter's choices: the two unresolved statuses together (the default, as in
#: the API), each status alone, or everything.
UNRESOLVED: Final = "unresolved"
EVERY_STATUS: Final = "all"
STATUS_CHOICES: Final = (UNRESOLVED, *(status.value for status in AlertStatus), EVERY_STATUS)


@router.get("")
def alerts_page(
    request: Request,
    status: Annotated[str, Query(max_length=16)] = UNRESOLVED,
    category: Annotated[str, Query(max_length=32)] = "",
    owner: Annotated[str, Query(max_length=128)] = "",
    before: Annotated[int | None, Query(ge=1, le=2**62)] = None,
) -> Response:
    found = context.page(request)
    chosen_status = status if status in STATUS_CHOICES else UNRESOLVED
    chosen_category = category if category in set(AlertCategory) else ""
    listed = alerts.list_alerts(
        found.platform,
        statuses=_statuses(chosen_status),
        categories=(AlertCategory(chosen_category),) if chosen_category else (),
        owner=owner.strip() or None,
        before_id=before,
        limit=PAGE_SIZE,
    )
    filters = {"status": chosen_status, "category": chosen_category, "owner": owner.strip()}
    older = None
    if len(listed) == PAGE_SIZE:
        older = "/ui/alerts?" + urlencode({**filters, "before": listed[-1].id})
    changes = alerts.count_alerts(found.platform).changes
    return context.render(
        found,
        "alerts.html",
        groups=group_by_category(listed),
        filters=filters,
        status_choices=STATUS_CHOICES,
        categories=[c.value for c in AlertCategory],
        here=request.url.path + (f"?{request.url.query}" if request.url.query else ""),
        older=older,
        live=f"/ui/live?alerts=1&since={changes}",
    )


@router.post("/{alert_id}/acknowledge")
async def acknowledge(request: Request, alert_id: int) -> Response:
    found, form = await context.submitted(request)
    principal = found.require(TokenRole.OPERATOR)
    await run_in_threadpool(alerts.acknowledge, found.platform, alert_id, actor=principal.actor)
    return RedirectResponse(_back(form.get("next")), status_code=303)


@router.post("/{alert_id}/resolve")
async def resolve(request: Request, alert_id: int) -> Response:
    found, form = await context.submitted(request)
    principal = found.require(TokenRole.OPERATOR)
    await run_in_threadpool(alerts.resolve, found.platform, alert_id, actor=principal.actor)
    return RedirectResponse(_back(form.get("next")), status_code=303)


def group_by_category(listed: list[AlertRow]) -> list[tuple[str, list[AlertRow]]]:
    """The alerts under their owner category, in the order ``AlertCategory`` declares them;
    within a category, newest first (as listed)."""
    grouped: dict[str, list[AlertRow]] = {category.value: [] for category in AlertCategory}
    for alert in listed:
        grouped[alert.category.value].append(alert)
    return [(category, found) for category, found in grouped.items() if found]


def _statuses(chosen: str) -> tuple[AlertStatus, ...]:
    if chosen == EVERY_STATUS:
        return tuple(AlertStatus)
    if chosen == UNRESOLVED:
        return (AlertStatus.OPEN, AlertStatus.ACKNOWLEDGED)
    return (AlertStatus(chosen),)


def _back(target: object) -> str:
    """Back to the listing the form was on (its filters kept), never outside the alerts."""
    text = target if isinstance(target, str) else ""
    return text if text.startswith("/ui/alerts") and not text.startswith("//") else "/ui/alerts"
