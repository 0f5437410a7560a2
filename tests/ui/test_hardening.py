"""The UI over HTTP against a hostile browser: odd zone cookies, framing, old sessions."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from tests.ui.conftest import SignedIn, Ui, csrf_of
from veritask.ledger import schema
from veritask.services import runs, tokens
from veritask.services.tokens import TokenRole
from veritask.ui import app as ui_app

TIME = re.compile(r'<time datetime="[^"]+" title="([^"]+ UTC)">([^<]+)</time>')


@pytest.mark.parametrize("zone", ["Europe", "Europe/", "..", "Nowhere/Else", "%00", "a" * 80])
def test_an_invalid_zone_cookie_falls_back_to_utc(ui: Ui, zone: str) -> None:
    anonymous = ui.client()
    anonymous.cookies.set("veritask_tz", zone)
    assert anonymous.get("/ui/sign-in").status_code == 200

    viewer = ui.signed_in(TokenRole.VIEWER)
    runs.trigger_run(ui.platform, "pipeline", actor="test")
    viewer.http.cookies.set("veritask_tz", zone)
    page = viewer.http.get("/ui/definitions/pipeline")

    assert page.status_code == 200
    found = TIME.search(page.text)
    assert found is not None
    assert found.group(2).endswith("UTC")


def test_a_percent_encoded_zone_cookie_is_decoded(ui: Ui) -> None:
    viewer = ui.signed_in(TokenRole.VIEWER)
    runs.trigger_run(ui.platform, "pipeline", actor="test")
    viewer.http.cookies.set("veritask_tz", "Asia%2FShanghai")

    page = viewer.http.get("/ui/definitions/pipeline")

    found = TIME.search(page.text)
    assert found is not None
    assert found.group(2).endswith("CST")


def test_the_sign_in_page_still_has_a_form(ui: Ui) -> None:
    anonymous = ui.client()
    anonymous.cookies.set("veritask_tz", "Europe")
    assert csrf_of(anonymous.get("/ui/sign-in").text)


EXPECTED_HEADERS = {
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
    "x-content-type-options": "nosniff",
}
TEMPLATES = Path(ui_app.__file__).parent / "templates"


def _policy(header: str) -> dict[str, str]:
    directives = (part.strip().partition(" ") for part in header.split(";") if part.strip())
    return {name: value for name, _, value in directives}


def _assert_hardened(response: httpx.Response) -> None:
    for name, value in EXPECTED_HEADERS.items():
        assert response.headers.get(name) == value, (response.url, name)
    policy = _policy(response.headers["content-security-policy"])
    assert policy["default-src"] == "'none'"
    assert policy["script-src"] == "'self'"
    assert policy["style-src"] == "'self'"
    assert policy["frame-ancestors"] == "'none'"
    assert policy["form-action"] == "'self'"


def test_every_ui_response_carries_the_security_headers(ui: Ui) -> None:
    anonymous = ui.client()
    for path in ("/", "/ui/", "/ui/sign-in", "/ui/static/veritask.js", "/ui/no-such-page"):
        _assert_hardened(anonymous.get(path))

    operator = ui.signed_in(TokenRole.OPERATOR)
    run_id = runs.trigger_run(ui.platform, "pipeline", actor="test").run_id
    for path in ("/ui/definitions", "/ui/definitions/pipeline", f"/ui/runs/{run_id}"):
        page = operator.http.get(path)
        assert page.status_code == 200
        _assert_hardened(page)
    posted = operator.http.post("/ui/sign-out", data={"csrf": operator.csrf})
    assert posted.status_code == 303
    _assert_hardened(posted)
    with operator.http.stream("GET", f"/ui/live?run={run_id}&since=0") as stream:
        _assert_hardened(stream)


def test_the_api_keeps_its_own_headers(ui: Ui) -> None:
    # The API's documentation page loads Swagger UI from a CDN: the UI's policy is not its.
    assert "content-security-policy" not in ui.client().get("/docs").headers


@pytest.mark.parametrize("template", sorted(TEMPLATES.glob("*.html")), ids=lambda p: p.name)
def test_templates_have_nothing_inline_that_the_policy_blocks(template: Path) -> None:
    text = template.read_text()
    assert not re.search(r"<script(?![^>]*\bsrc=)", text), "inline script"
    assert not re.search(r"<style\b", text), "inline style element"
    assert not re.search(r"\sstyle=", text), "style attribute"
    assert not re.search(r"\son[a-z]+=", text), "event handler attribute"
    assert "javascript:" not in text


def _with_cookies_of(ui: Ui, signed_in: SignedIn) -> httpx.Client:
    """Another client holding a copy of this session's cookies (a stolen or kept cookie)."""
    copy = ui.client()
    for name, value in signed_in.http.cookies.items():
        copy.cookies.set(name, value)
    return copy


def _is_sent_to_sign_in(response: httpx.Response) -> bool:
    return response.status_code == 303 and response.headers["location"].startswith("/ui/sign-in")


def test_after_sign_out_the_old_cookie_signs_nobody_in(ui: Ui) -> None:
    operator = ui.signed_in(TokenRole.OPERATOR)
    kept = _with_cookies_of(ui, operator)
    other_browser = ui.signed_in(TokenRole.OPERATOR)
    assert kept.get("/ui/definitions").status_code == 200

    signed_out = operator.http.post("/ui/sign-out", data={"csrf": operator.csrf})
    assert signed_out.status_code == 303

    assert _is_sent_to_sign_in(kept.get("/ui/definitions"))
    posted = kept.post("/ui/definitions/pipeline/trigger", data={"csrf": operator.csrf})
    assert _is_sent_to_sign_in(posted)
    assert runs.list_runs(ui.platform, definition="pipeline").items == ()
    # Signing out in one browser leaves the others signed in.
    assert other_browser.http.get("/ui/definitions").status_code == 200


def test_revoking_a_token_ends_every_session_signed_in_with_it(ui: Ui) -> None:
    first, second = ui.signed_in(TokenRole.VIEWER), ui.signed_in(TokenRole.VIEWER)
    admin = ui.signed_in(TokenRole.ADMIN)
    viewer_id = next(
        token.id for token in tokens.list_tokens(ui.platform) if token.name == "viewer-user"
    )

    s = schema.ui_sessions.c
    of_viewer = sa.select(sa.func.count()).where(s.token_id == viewer_id)
    with ui.platform.engine.connect() as connection:
        assert connection.execute(of_viewer.where(s.ended_at.is_(None))).scalar_one() == 2

    revoked = ui.client().post(
        f"/api/v2/tokens/{viewer_id}/revoke",
        headers={"Authorization": f"Bearer {ui.tokens[TokenRole.ADMIN]}"},
    )

    assert revoked.status_code == 200, revoked.text
    for session in (first, second):
        assert _is_sent_to_sign_in(session.http.get("/ui/definitions"))
    assert admin.http.get("/ui/definitions").status_code == 200
    with ui.platform.engine.connect() as connection:
        assert connection.execute(of_viewer.where(s.ended_at.is_(None))).scalar_one() == 0
        assert connection.execute(of_viewer.where(s.ended_at.is_not(None))).scalar_one() == 2
