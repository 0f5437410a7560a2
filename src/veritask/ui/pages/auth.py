"""Sign in with an API token, sign out, and choose the language and the theme."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from veritask.services import sessions, tokens
from veritask.ui import context, i18n, session
from veritask.ui.pages.routing import UiRoute

router = APIRouter(route_class=UiRoute, include_in_schema=False)
YEAR = 365 * 24 * 3600


@router.get("/")
def root() -> RedirectResponse:
    """The address ``veritask up`` prints leads to the UI (and so to sign-in)."""
    return RedirectResponse("/ui/", status_code=303)


@router.get("/ui")
@router.get("/ui/")
def start(request: Request) -> RedirectResponse:
    found = context.visitor(request)
    target = "/ui/definitions" if found.principal else "/ui/sign-in"
    return RedirectResponse(target, status_code=303)


@router.get("/ui/sign-in")
def sign_in_page(
    request: Request, next: Annotated[str | None, Query(max_length=2000)] = None
) -> Response:
    found = context.visitor(request)
    return context.render(found, "sign_in.html", next=context.safe_next(next), error=None)


@router.post("/ui/sign-in")
async def sign_in(request: Request) -> Response:
    found, form = await context.submitted_anonymously(request)
    token = str(form.get("token") or "").strip()
    target = context.safe_next(str(form.get("next") or ""))
    principal = await run_in_threadpool(tokens.authenticate, found.platform, token)
    if principal is None:
        return context.render(
            found, "sign_in.html", status=401, next=target, error=found.t("sign_in.refused")
        )
    response = RedirectResponse(target, status_code=303)
    # A new session (and CSRF token) at sign-in: one planted before cannot be reused.
    fresh = session.Session.new(principal.token_id, found.platform.now())
    await run_in_threadpool(
        sessions.open_session, found.platform, fresh.session_id, principal.token_id, fresh.expires
    )
    context.set_session_cookie(response, request, fresh, found.platform)
    return response


@router.post("/ui/sign-out")
async def sign_out(request: Request) -> Response:
    found, _ = await context.submitted(request)
    # Ended on the server: a copy of this cookie no longer signs anyone in.
    await run_in_threadpool(sessions.end_session, found.platform, found.session.session_id)
    response = RedirectResponse("/ui/sign-in", status_code=303)
    anonymous = session.Session.new(None, found.platform.now())
    context.set_session_cookie(response, request, anonymous, found.platform)
    return response


@router.post("/ui/language")
async def choose_language(request: Request) -> Response:
    _, form = await context.submitted_anonymously(request)
    chosen = str(form.get("language") or "")
    language = i18n.Language(chosen) if chosen in set(i18n.Language) else i18n.DEFAULT_LANGUAGE
    response = RedirectResponse(context.safe_next(str(form.get("next") or "")), status_code=303)
    response.set_cookie(
        context.LANGUAGE_COOKIE, language.value, max_age=YEAR, path="/", samesite="lax"
    )
    return response


@router.post("/ui/theme")
async def choose_theme(request: Request) -> Response:
    _, form = await context.submitted_anonymously(request)
    theme = context.theme_of(str(form.get("theme") or ""))
    response = RedirectResponse(context.safe_next(str(form.get("next") or "")), status_code=303)
    response.set_cookie(context.THEME_COOKIE, theme, max_age=YEAR, path="/", samesite="lax")
    return response
