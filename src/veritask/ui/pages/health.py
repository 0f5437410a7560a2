"""The health panel: schedulers alive, executor slots in use, queue depth, reconciler
decisions in the last hour, and whether the database is ready."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from veritask.services import activity, health
from veritask.ui import context
from veritask.ui.pages.routing import UiRoute

router = APIRouter(prefix="/ui/health", route_class=UiRoute, include_in_schema=False)


@router.get("")
def health_page(request: Request) -> Response:
    found = context.page(request)
    position = activity.latest_position(found.platform)
    return context.render(
        found,
        "health.html",
        activity=activity.platform_activity(found.platform),
        readiness=health.readiness(found.platform),
        position=position,
        live=f"/ui/live?since={position}",
    )
