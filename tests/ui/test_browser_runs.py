"""The runs list and the grid in Chromium against a real ``veritask up``: filter the list,
watch a new run appear without a reload, and click through the grid to an instance."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import httpx
import pytest

from tests.ui.test_browser import (
    LIVE_MARK,
    STILL_MARKED,
    WAIT_MS,
    admin_token,
    browser,
    signed_in,
    trigger_from_page,
    up,
)

if TYPE_CHECKING:
    from playwright.sync_api import Browser

    from tests.acceptance.conftest import Veritask

pytestmark = pytest.mark.slow
__all__ = ["browser", "up"]  # the module's fixtures: one `up` and one Chromium


def test_filter_the_runs_list_see_it_live_and_click_through_the_grid(
    browser: Browser, up: Veritask
) -> None:
    from playwright.sync_api import expect

    page = signed_in(browser, up, admin_token(up))
    quick = []
    for _ in range(2):  # one after the other: `quick` forbids overlapping runs
        quick.append(trigger_from_page(page, up, "quick"))
        expect(page.locator("#run-states .run-execution [data-state]")).to_have_attribute(
            "data-state", "SUCCESS", timeout=WAIT_MS
        )
    page.click("#nav-runs")
    page.wait_for_url("**/ui/runs")
    page.select_option("#filter-definition", "quick")
    page.select_option("#filter-execution", "SUCCESS")
    page.click("#run-filters button[type=submit]")
    page.wait_for_url(re.compile(r".*/ui/runs\?.*definition=quick.*execution_state=SUCCESS"))
    rows = page.locator("#runs tbody tr")
    expect(rows).to_have_count(2)
    expect(page.locator("#runs tbody tr[data-execution-state='SUCCESS']")).to_have_count(2)
    expect(page.locator(f"#runs tr[data-run='{quick[1]}']")).to_be_visible()

    page.evaluate(LIVE_MARK)
    with httpx.Client(
        base_url=up.url, headers={"Authorization": f"Bearer {admin_token(up)}"}
    ) as api:
        answer = api.post("/api/v2/definitions/quick/runs", json={})
        assert answer.status_code == 202, answer.text
        third = answer.json()["run_id"]
    expect(page.locator(f"#runs tr[data-run='{third}']")).to_be_visible(timeout=WAIT_MS)
    assert page.evaluate(STILL_MARKED), "the page was reloaded instead of updated"
    expect(rows.first).to_have_attribute("data-run", third)

    page.locator(f"#runs tr[data-run='{third}'] a.grid-link").click()
    page.wait_for_url("**/ui/definitions/quick/grid")
    expect(page.locator("#run-grid tbody tr")).to_have_count(2)
    expect(page.locator("#run-grid tbody tr").first).to_have_attribute("data-task", "first")
    newest_first_task = page.locator("#run-grid tbody tr[data-task='first'] a.cell").last
    expect(newest_first_task).to_have_attribute("data-state", "SUCCESS", timeout=WAIT_MS)
    assert "exit 0" in (newest_first_task.get_attribute("title") or "")
    newest_first_task.click()
    page.wait_for_url("**/ui/instances/**")
    expect(page.locator("#log")).to_contain_text("first step output")
    assert third in page.content()
