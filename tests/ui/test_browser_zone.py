"""The viewer's time zone as Chromium reports it: the page's own script writes the cookie
(percent-encoded, as ``encodeURIComponent`` does) and from then on the server renders every
time in that zone. The sign-in page shows no time, so it is not loaded again: a token pasted
into its form stays. Nothing here sets the cookie by hand."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import httpx
import pytest

from tests.ui.test_browser import WAIT_MS, admin_token, browser, up

if TYPE_CHECKING:
    from playwright.sync_api import Browser

    from tests.acceptance.conftest import Veritask

pytestmark = pytest.mark.slow
__all__ = ["browser", "up"]  # the module's fixtures: one `up` and one Chromium


def test_the_zone_the_browser_reports_is_the_zone_the_pages_show(
    browser: Browser, up: Veritask
) -> None:
    from playwright.sync_api import expect

    with httpx.Client(
        base_url=up.url, headers={"Authorization": f"Bearer {admin_token(up)}"}
    ) as api:
        answer = api.post("/api/v2/definitions/quick/runs", json={})
        assert answer.status_code == 202, answer.text
        run_id = answer.json()["run_id"]
    context = browser.new_context(timezone_id="Asia/Shanghai", locale="en-US")
    try:
        assert context.cookies() == []
        page = context.new_page()
        page.set_default_timeout(WAIT_MS)
        page.goto(up.url + "/ui/sign-in")
        page.fill("#token", admin_token(up))  # at once, as a person pasting it would
        page.wait_for_function("() => document.cookie.includes('veritask_tz=')")
        written = {c["name"]: c["value"] for c in context.cookies()}
        assert written.get("veritask_tz") == "Asia%2FShanghai"
        page.wait_for_timeout(500)  # a reload, had there been one, would have wiped the token
        assert page.evaluate("() => sessionStorage.getItem('veritask-tz-reload')") is None
        assert page.input_value("#token") == admin_token(up)

        page.click("form[action='/ui/sign-in'] button[type=submit]")
        page.wait_for_url("**/ui/definitions")
        page.goto(f"{up.url}/ui/runs/{run_id}")
        shown = page.locator("time").first
        expect(shown).to_have_text(re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d CST$"))
        utc_text = shown.get_attribute("title") or ""
        assert utc_text.endswith(" UTC")
        utc = datetime.strptime(utc_text, "%Y-%m-%d %H:%M:%S UTC")
        local = datetime.strptime(shown.inner_text(), "%Y-%m-%d %H:%M:%S CST")
        assert local - utc == timedelta(hours=8)
    finally:
        context.close()
