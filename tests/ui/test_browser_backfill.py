"""The definition page's *Backfill…* in Chromium against a real ``veritask up``: fill in the
range and a reason, read the preview, confirm, land on the backfill's page."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import httpx
import pytest

from tests.ui.test_browser import admin_token, browser, signed_in, up

if TYPE_CHECKING:
    from playwright.sync_api import Browser

    from tests.acceptance.conftest import Veritask

pytestmark = pytest.mark.slow
__all__ = ["browser", "up"]  # the module's fixtures: one `up` and one Chromium

NIGHTLY = """\
name: nightly
concurrency: allow
schedule: {cron: "0 0 * * *", timezone: UTC}
tasks:
  load: {run: "echo load"}
"""


def test_backfill_from_the_definition_page_after_its_preview(
    browser: Browser, up: Veritask
) -> None:
    from playwright.sync_api import expect

    with httpx.Client(
        base_url=up.url, headers={"Authorization": f"Bearer {admin_token(up)}"}
    ) as api:
        assert api.post("/api/v2/definitions", json={"source": NIGHTLY}).status_code in (200, 201)
    page = signed_in(browser, up, admin_token(up))
    page.goto(f"{up.url}/ui/definitions/nightly")
    page.click("#backfill-open")
    page.fill("#backfill-from", "2026-01-01T00:00:00Z")
    page.fill("#backfill-to", "2026-01-03T00:00:00Z")
    page.fill("#backfill-reason", "reload January")
    page.click("#backfill-preview")
    rows = page.locator("#backfill-intervals .backfill-interval")
    expect(rows).to_have_count(2)
    expect(rows.first.locator(".action")).to_have_text("create a run")
    page.click("#backfill-confirm")
    page.wait_for_url(re.compile(r".*/ui/backfills/[0-9a-f-]+$"))
    expect(page.locator("#backfill-intervals .backfill-interval")).to_have_count(2)
    expect(page.locator("#backfill-progress")).to_contain_text("2 intervals:")
