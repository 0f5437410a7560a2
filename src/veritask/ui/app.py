"""Mount the web UI on the API's application: pages under ``/ui``, static files, error pages.

``veritask up`` serves both from one process: ``/`` leads to ``/ui/``, which asks a new
visitor to sign in with the token that ``up`` printed.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from veritask.ui import context
from veritask.ui.pages import alerts, auth, definitions, health, instances, live, runs

STATIC_PATH = "/ui/static"


def install(app: FastAPI) -> None:
    """Add the UI's routes, static files and refusal pages to ``app``."""
    for module in (auth, definitions, runs, instances, alerts, health, live):
        app.include_router(module.router)
    app.mount(STATIC_PATH, StaticFiles(packages=[("veritask.ui", "static")]), name="ui-static")
    app.add_exception_handler(context.SignInRequired, _to_sign_in)
    app.add_exception_handler(context.Refused, _refused)


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


def _quote(path: str) -> str:
    from urllib.parse import quote

    return quote(path, safe="/")
