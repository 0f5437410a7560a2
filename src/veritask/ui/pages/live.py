"""Server-sent events that tell a page its data changed; the page fetches itself again.

The stream polls the ledger's newest event position (of one run or instance, or of all)
once a second — an indexed ``max(position)`` — and sends ``changed`` when it grew. Alerts are
not events: with ``alerts=1`` it polls :attr:`~veritask.services.alerts.AlertCounts.changes`
instead, a number that grows with every alert raised, acknowledged or resolved; with
``definitions=1`` (the definitions pages) one that also grows when a definition is applied,
disabled, enabled or deleted. It sends
no data a page could not read anyway. Each stream ends after :data:`STREAM_SECONDS`
(``EventSource`` reconnects by itself, with ``Last-Event-ID``), so that a server being
stopped never waits long for an open browser tab.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Final

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from veritask.services import activity, alerts
from veritask.services.platform import Platform
from veritask.ui import context
from veritask.ui.pages.routing import UiRoute

router = APIRouter(prefix="/ui/live", route_class=UiRoute, include_in_schema=False)
POLL_SECONDS: Final = 1.0
STREAM_SECONDS: Final = 25.0
RECONNECT_MILLISECONDS: Final = 1000


@router.get("")
def stream(
    request: Request,
    run: Annotated[str | None, Query(max_length=128)] = None,
    instance: Annotated[str | None, Query(max_length=256)] = None,
    watch_alerts: Annotated[bool, Query(alias="alerts")] = False,
    watch_definitions: Annotated[bool, Query(alias="definitions")] = False,
    since: Annotated[int, Query(ge=0)] = 0,
) -> Response:
    found = context.page(request)
    last_seen = request.headers.get("last-event-id", "")
    start = max(since, int(last_seen) if last_seen.isdigit() else 0)
    if watch_alerts:
        measure = alert_changes(found.platform)
    elif watch_definitions:
        measure = definition_changes(found.platform)
    else:
        measure = event_position(found.platform, run=run, instance=instance)
    return StreamingResponse(
        changes(measure, request, since=start),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


def event_position(
    platform: Platform, *, run: str | None, instance: str | None
) -> Callable[[], int]:
    """The newest event position of the run, the instance, or the whole ledger."""
    return lambda: activity.latest_position(platform, run_id=run, instance_id=instance)


def definition_changes(platform: Platform) -> Callable[[], int]:
    """A number that grows with every event and every change of a definition."""
    return lambda: activity.definitions_mark(platform)


def alert_changes(platform: Platform) -> Callable[[], int]:
    """A number that grows with every alert raised, acknowledged or resolved."""
    return lambda: alerts.count_alerts(platform).changes


async def changes(
    measure: Callable[[], int],
    request: Request,
    *,
    since: int,
    poll_seconds: float = POLL_SECONDS,
    stream_seconds: float = STREAM_SECONDS,
) -> AsyncIterator[str]:
    """``changed`` messages (with the new position as their id) until the stream's time is up."""
    yield f"retry: {RECONNECT_MILLISECONDS}\n\n"
    seen = since
    loop = asyncio.get_running_loop()
    ends = loop.time() + stream_seconds
    while loop.time() < ends:
        if await request.is_disconnected():
            return
        position = await run_in_threadpool(measure)
        if position > seen:
            seen = position
            yield f"id: {position}\nevent: changed\ndata: {position}\n\n"
        else:
            yield ": idle\n\n"  # a comment keeps proxies from closing a quiet stream
        await asyncio.sleep(poll_seconds)
