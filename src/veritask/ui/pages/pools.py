"""The pools page: every pool with its slots in use out of its size, and the tasks waiting
(read-only: pools are set with ``veritask pool set`` or ``PUT /api/v2/pools/{name}``)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from veritask.services import pools
from veritask.ui import context
from veritask.ui.pages.routing import UiRoute

router = APIRouter(prefix="/ui/pools", route_class=UiRoute, include_in_schema=False)


@router.get("")
def pools_page(request: Request) -> Response:
    found = context.page(request)
    return context.render(found, "pools.html", pools=pools.list_pools(found.platform))
