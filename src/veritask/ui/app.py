"""Mount the web UI on the API's application: pages under ``/ui``, static files, error pages.

``veritask up`` serves both from one process: ``/`` leads to ``/ui/``, which asks a new
visitor to sign in with the token that ``up`` printed.
"""

from __future__ import annotations

import inspect
from typing import Final

from fastapi import FastAPI, Request
from fastapi.responses import RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from veritask.ui import context
from veritask.ui.pages import (
    alerts,
    auth,
    backfills,
    definitions,
    health,
    instances,
    live,
    log_viewer,
    pools,
    reruns,
    run_list,
    runs,
)

STATIC_PATH = "/ui/static"

#: Every UI response's headers. The pages load only our own script and stylesheet (no inline
#: script, style or handler: a test checks the templates), talk only to this origin, post
#: forms only here, and are never framed (clickjacking) nor sniffed into another type.
SECURITY_HEADERS: Final = (
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        b"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
    (b"x-content-type-options", b"nosniff"),
)


def install(app: FastAPI) -> None:
    """Add the UI's routes, static files and refusal pages to ``app``."""
    for module in (
        auth,
        run_list,
        definitions,
        backfills,
        runs,
        reruns,
        instances,
        log_viewer,
        alerts,
        health,
        pools,
        live,
    ):
        app.include_router(module.router)
    app.mount(STATIC_PATH, StaticFiles(packages=[("veritask.ui", "static")]), name="ui-static")
    app.add_exception_handler(context.SignInRequired, _to_sign_in)
    app.add_exception_handler(context.Refused, _refused)
    _page_for_unknown_paths(app)
    app.add_middleware(SecurityHeaders)


class SecurityHeaders:
    """Adds ``SECURITY_HEADERS`` to every response under ``/ui`` and to ``/`` (which leads
    there). The API's own paths keep theirs: its documentation page loads a CDN's script."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if not (path == "/" or path == "/ui" or path.startswith("/ui/")):
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", [])}
                added = [header for header in SECURITY_HEADERS if header[0] not in present]
                message["headers"] = [*message.get("headers", []), *added]
            await send(message)

        await self.app(scope, receive, send_with_headers)


def _to_sign_in(request: Request, exc: Exception) -> Response:
    target = exc.next_path if isinstance(exc, context.SignInRequired) else "/ui/"
    if request.method != "GET":
        target = "/ui/"
    return RedirectResponse(
        f"/ui/sign-in?next={_quote(context.safe_next(target))}", status_code=303
    )


def _refused(request: Request, exc: Exception) -> Response:
    if not isinstance(exc, context.Refused):
        raise exc
    found = context.visitor(request)
    message = found.t(exc.message_key, **exc.values)
    return context.render(found, "error.html", status=exc.status, message=message, detail=None)


def _page_for_unknown_paths(app: FastAPI) -> None:
    """An address under ``/ui`` that no page answers (404, or a method it has none for) is an
    HTML page in the viewer's language; every other path keeps the API's problem document."""
    api_handler = app.exception_handlers.get(StarletteHTTPException)

    async def http_error(request: Request, exc: Exception) -> Response:
        path = request.url.path
        if (
            isinstance(exc, StarletteHTTPException)
            and exc.status_code in (404, 405)
            and (path == "/ui" or path.startswith("/ui/"))
        ):
            return await run_in_threadpool(_no_such_page, request, exc.status_code)
        if api_handler is None:
            raise exc
        answered = api_handler(request, exc)
        return await answered if inspect.isawaitable(answered) else answered

    app.add_exception_handler(StarletteHTTPException, http_error)


def _no_such_page(request: Request, status: int) -> Response:
    found = context.visitor(request)
    return context.render(
        found, "error.html", status=status, message=found.t("error.no_page"), detail=None
    )


def _quote(path: str) -> str:
    from urllib.parse import quote

    return quote(path, safe="/")
