"""An attempt's log, a page of numbered lines at a time: search, follow, colours, download.

``GET /ui/instances/{id}/log?attempt=N`` is the viewer: the page holding ``line`` (default:
the last, where a running attempt writes), its lines numbered and linked (``#L123``), ANSI
colours as classes, the matching lines of a search marked. It works without the script (pages,
search and the attempt chooser are links and GET forms); the script follows a growing log
(``/log/more``), highlights the matches and steps through them. ``/log/download`` sends the
whole file as it is, read a chunk at a time. With ``offset``, ``/log`` answers the instance
page's own follower (JSON).
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from veritask.services import log_pages, logs, runs
from veritask.services.errors import NotFound
from veritask.ui import ansi, context
from veritask.ui.pages.routing import UiRoute

router = APIRouter(prefix="/ui/instances", route_class=UiRoute, include_in_schema=False)
#: What the instance page's follower reads at once.
LOG_CHUNK = 64 * 1024
#: The longest search a form may send.
MAX_QUERY = 200


@router.get("/{instance_id}/log")
def log_viewer(
    request: Request,
    instance_id: str,
    attempt: Annotated[int | None, Query(ge=1)] = None,
    line: Annotated[int | None, Query(ge=1)] = None,
    q: Annotated[str, Query(max_length=MAX_QUERY)] = "",
    offset: Annotated[int | None, Query(ge=0)] = None,
) -> Response:
    found = context.page(request)
    if offset is not None:
        chunk = logs.read_log(
            found.platform, instance_id, attempt_no=attempt, offset=offset, limit=LOG_CHUNK
        )
        return JSONResponse(
            {"text": chunk.text, "next_offset": chunk.next_offset, "ended": chunk.ended}
        )
    detail = runs.get_instance(found.platform, instance_id)
    held = log_pages.attempt_log(found.platform, instance_id, attempt)
    shown = log_pages.page(held, line=line, query=q)
    query = {"attempt": str(shown.attempt_no)} | ({"q": shown.query} if shown.query else {})
    base = f"/ui/instances/{instance_id}/log?{urlencode(query)}"
    hits = shown.hits_here()
    lines = []
    style = ansi.PLAIN
    for each in shown.lines:
        parts, style = ansi.segments(each.text, style)
        lines.append((each, parts, each.number in hits))
    return context.render(
        found,
        "log.html",
        instance=detail.instance,
        definition=detail.definition,
        log=shown,
        lines=lines,
        base=base,
        page_size=log_pages.PAGE_LINES,
        max_page_bytes=log_pages.MAX_PAGE_BYTES,
    )


@router.get("/{instance_id}/log/more")
def log_more(
    request: Request,
    instance_id: str,
    attempt: Annotated[int, Query(ge=1)],
    offset: Annotated[int, Query(ge=0)],
    line: Annotated[int, Query(ge=1)],
) -> Response:
    """The lines from ``offset`` (where line ``line`` starts) on, each as classed segments:
    the script adds them as text, never as markup."""
    found = context.page(request)
    held = log_pages.attempt_log(found.platform, instance_id, attempt)
    followed = log_pages.follow(held, offset=offset, line=line)
    style = ansi.PLAIN
    sent = []
    for each in followed.lines:
        parts, style = ansi.segments(each.text, style)
        sent.append({"n": each.number, "s": parts, "cut": each.cut})
    return JSONResponse(
        {
            "lines": sent,
            "next_offset": followed.next_offset,
            "next_line": followed.next_line,
            "ended": followed.ended,
            "skipped": followed.skipped,
            "more": followed.more,
        }
    )


@router.get("/{instance_id}/log/download")
async def log_download(
    request: Request, instance_id: str, attempt: Annotated[int | None, Query(ge=1)] = None
) -> Response:
    """The whole log as a plain-text attachment, as long as it was when asked for."""
    found = context.page(request)
    held = await run_in_threadpool(log_pages.attempt_log, found.platform, instance_id, attempt)
    if held.source is None:
        raise NotFound(found.t("log.not_held"))
    name = f"{instance_id}-attempt-{held.attempt_no}.log"
    headers = {"Content-Disposition": f'attachment; filename="{name}"'}
    source = held.source
    if isinstance(source, log_pages.FileSource):
        size = source.size()
        headers["Content-Length"] = str(size)
        return StreamingResponse(
            source.chunks(size), media_type="text/plain; charset=utf-8", headers=headers
        )
    return Response(
        source.read(0, source.size()), media_type="text/plain; charset=utf-8", headers=headers
    )
