"""What every page needs from its request: the session, who signed in, language, time zone.

Pages call :func:`page` (or :func:`visitor` for the sign-in page), then :func:`render`; forms
call :func:`submitted`, which refuses a missing or wrong CSRF token before anything else
reads the form. Refusals are exceptions that ``ui.app`` turns into pages.
"""

from __future__ import annotations

import urllib.parse
import zoneinfo
from dataclasses import dataclass
from typing import Final

from fastapi import Request
from fastapi.responses import HTMLResponse
from starlette.datastructures import FormData
from starlette.responses import Response

from veritask.services import alerts, sessions, tokens, views
from veritask.services.platform import Platform
from veritask.services.tokens import TokenRole
from veritask.ui import i18n, rendering, session

LANGUAGE_COOKIE: Final = "veritask_lang"
THEME_COOKIE: Final = "veritask_theme"
#: ``auto`` follows the system's light or dark preference; the others hold either one.
THEMES: Final = ("auto", "light", "dark")
ZONE_COOKIE: Final = "veritask_tz"
UTC_ZONE: Final = zoneinfo.ZoneInfo("UTC")


class SignInRequired(Exception):
    """No session, or it ended (sign-out) or its token was revoked: the page sends the
    visitor to sign in."""

    def __init__(self, next_path: str) -> None:
        super().__init__(next_path)
        self.next_path = next_path


class Refused(Exception):
    """The request is refused with a translated message (403 for roles and CSRF)."""

    def __init__(self, status: int, message_key: str, **values: object) -> None:
        super().__init__(message_key)
        self.status = status
        self.message_key = message_key
        self.values = values


@dataclass(frozen=True)
class Page:
    """One request's view of the UI."""

    request: Request
    platform: Platform
    session: session.Session
    principal: views.Principal | None
    t: i18n.Translator
    zone: zoneinfo.ZoneInfo
    issue_cookie: bool
    """The session is new (anonymous, or after sign-in): the response sets the cookie."""
    theme: str = "auto"
    """One of :data:`THEMES`, as the viewer chose it."""

    def may(self, role: TokenRole) -> bool:
        return self.principal is not None and tokens.allows(self.principal, role)

    def require(self, role: TokenRole) -> views.Principal:
        """The signed-in principal if its role includes ``role``; else refuse (403)."""
        if self.principal is None:
            raise SignInRequired(self.request.url.path)
        if not tokens.allows(self.principal, role):
            raise Refused(403, "error.role", role=self.t(f"role.{role.value}"))
        return self.principal


def platform_of(request: Request) -> Platform:
    found: Platform = request.app.state.platform
    return found


def visitor(request: Request) -> Page:
    """The page of anyone, signed in or not; an anonymous session is issued if there is none."""
    platform = platform_of(request)
    now = platform.now()
    key = tokens.session_key(platform)
    found = session.decode(request.cookies.get(session.COOKIE), key, now)
    issue = found is None
    current = found or session.Session.new(None, now)
    principal = None
    if current.token_id:
        principal = sessions.principal_of(platform, current.session_id, current.token_id)
    language = i18n.pick_language(
        request.cookies.get(LANGUAGE_COOKIE), request.headers.get("accept-language")
    )
    return Page(
        request,
        platform,
        current,
        principal,
        i18n.Translator(language),
        zone_of(request.cookies.get(ZONE_COOKIE)),
        issue,
        theme_of(request.cookies.get(THEME_COOKIE)),
    )


def page(request: Request) -> Page:
    """The page of a signed-in person; others are sent to sign in."""
    found = visitor(request)
    if found.principal is None:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        raise SignInRequired(target)
    return found


async def submitted(request: Request) -> tuple[Page, FormData]:
    """A posted form of a signed-in person, its CSRF token checked first."""
    found = visitor(request)
    form = await request.form()
    token = form.get("csrf")
    if not session.check_csrf(found.session if not found.issue_cookie else None, _text(token)):
        raise Refused(403, "error.csrf")
    if found.principal is None:
        raise SignInRequired("/ui/")
    return found, form


async def submitted_anonymously(request: Request) -> tuple[Page, FormData]:
    """A posted form that needs no sign-in (sign-in itself, the language), CSRF checked."""
    found = visitor(request)
    form = await request.form()
    if found.issue_cookie or not session.check_csrf(found.session, _text(form.get("csrf"))):
        raise Refused(403, "error.csrf")
    return found, form


def render(found: Page, template: str, *, status: int = 200, **values: object) -> HTMLResponse:
    """The page rendered in the viewer's language and time zone; sets the session if new.

    A signed-in page's header shows how many alerts are open, so every such page counts them
    (one grouped count over a small table)."""
    open_alerts = alerts.count_alerts(found.platform).open if found.principal else 0
    html = rendering.render(
        template,
        t=found.t,
        zone=found.zone,
        now=found.platform.now(),
        principal=found.principal,
        csrf=found.session.csrf,
        may_operate=found.may(TokenRole.OPERATOR),
        may_administer=found.may(TokenRole.ADMIN),
        path=found.request.url.path,
        open_alerts=open_alerts,
        theme=found.theme,
        themes=THEMES,
        **values,
    )
    response = HTMLResponse(html, status_code=status)
    if found.issue_cookie:
        set_session_cookie(response, found.request, found.session, found.platform)
    return response


def set_session_cookie(
    response: Response, request: Request, current: session.Session, platform: Platform
) -> None:
    """Set the signed session cookie: HttpOnly, SameSite=Lax, Secure over HTTPS."""
    response.set_cookie(
        session.COOKIE,
        session.encode(current, tokens.session_key(platform)),
        max_age=int(session.LIFETIME.total_seconds()),
        path="/",
        httponly=True,
        samesite="lax",
        secure=request.url.scheme == "https",
    )


def theme_of(cookie: str | None) -> str:
    """The viewer's chosen theme; ``auto`` when none or an unknown one."""
    return cookie if cookie in THEMES else "auto"


def zone_of(name: str | None) -> zoneinfo.ZoneInfo:
    """The viewer's time zone as the browser reported it; UTC when unknown or invalid.

    The page's script stores the zone percent-encoded (``Asia%2FShanghai``). A name that is
    not a zone file (``Europe`` is a directory, which ``ZoneInfo`` answers with an OSError)
    is as unknown as one that does not exist."""
    if not name:
        return UTC_ZONE
    decoded = urllib.parse.unquote(name)
    if not decoded or len(decoded) > 64:
        return UTC_ZONE
    try:
        return zoneinfo.ZoneInfo(decoded)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        return UTC_ZONE


def safe_next(target: str | None) -> str:
    """A place inside the UI to go back to; anything else (another site) becomes the start."""
    if target and target.startswith("/ui") and not target.startswith("//"):
        return target
    return "/ui/"


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None
