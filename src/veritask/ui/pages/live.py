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

A stream ends with its session: signing out or revoking the token in this process ends it at
once (``services.sessions.watching``); a session ended by another API process is noticed when
the stream reads the session again, every :data:`RECHECK_SECONDS`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Annotated, Final

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from veritask.core.errors import VeritaskError
from veritask.services import activity, alerts, sessions
from veritask.services.platform import Platform
from veritask.ui import context
from veritask.ui.pages.routing import UiRoute

router = APIRouter(prefix="/ui/live", route_class=UiRoute, include_in_schema=False)
POLL_SECONDS: Final = 1.0
STREAM_SECONDS: Final = 25.0
#: How often a stream reads its session again (ended by another process, or expired).
RECHECK_SECONDS: Final = 3.0
RECONNECT_MILLISECONDS: Final = 1000
log = logging.getLogger(__name__)


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
    session_id, token_id = found.session.session_id, found.session.token_id or ""

    def signed_in() -> bool:
        return sessions.principal_of(found.platform, session_id, token_id) is not None

    return StreamingResponse(
        changes(
            measure,
            request,
            since=start,
            session=Signed(session_id, token_id, signed_in),
        ),
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


@dataclass(frozen=True)
class Signed:
    """The session a stream serves, and how to ask whether it still counts."""

    session_id: str
    token_id: str
    still_signed_in: Callable[[], bool]


async def changes(
    measure: Callable[[], int],
    request: Request,
    *,
    since: int,
    session: Signed,
    poll_seconds: float = POLL_SECONDS,
    stream_seconds: float = STREAM_SECONDS,
    recheck_seconds: float = RECHECK_SECONDS,
) -> AsyncIterator[str]:
    """``changed`` messages (with the new position as their id) until the stream's time is up
    or its session ends."""
    loop = asyncio.get_running_loop()
    ended = asyncio.Event()
    timing = (poll_seconds, stream_seconds, recheck_seconds)

    def wake() -> None:
        loop.call_soon_threadsafe(ended.set)

    with sessions.watching(session.session_id, session.token_id, wake):
        yield f"retry: {RECONNECT_MILLISECONDS}\n\n"
        try:
            async for message in _watch(measure, request, since, session, ended, timing):
                yield message
        except VeritaskError as exc:
            if not exc.retryable:
                raise
            # The database went away: end the stream whole; the browser's reconnection gets
            # the 503 (with Retry-After) until it is back.
            log.warning("live stream ended: %s", exc)


async def _watch(
    measure: Callable[[], int],
    request: Request,
    since: int,
    session: Signed,
    ended: asyncio.Event,
    timing: tuple[float, float, float],
) -> AsyncIterator[str]:
    """The stream's messages after its first, until its time is up or its session ends."""
    poll_seconds, stream_seconds, recheck_seconds = timing
    loop = asyncio.get_running_loop()
    seen = since
    ends = loop.time() + stream_seconds
    # Read at once: the session may have ended between the page's check and the watch.
    recheck = loop.time()
    while loop.time() < ends and not ended.is_set():
        if await request.is_disconnected():
            return
        if loop.time() >= recheck:
            if not await run_in_threadpool(session.still_signed_in):
                return
            recheck = loop.time() + recheck_seconds
        position = await run_in_threadpool(measure)
        if position > seen:
            seen = position
            yield f"id: {position}\nevent: changed\ndata: {position}\n\n"
        else:
            yield ": idle\n\n"  # a comment keeps proxies from closing a quiet stream
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(ended.wait(), timeout=poll_seconds)
