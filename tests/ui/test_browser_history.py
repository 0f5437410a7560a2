"""An instance's history in Chromium: newest first, the recorded order a link away, filtered
by a form, a real worker's heartbeats and progress reports folded into one row that opens,
and no box of its own; by keyboard, in English and Chinese."""

from __future__ import annotations

import json
import re
import sys
import time
from typing import TYPE_CHECKING

import httpx
import pytest

from tests.ui.test_browser import WAIT_MS, admin_token, browser, signed_in, up

if TYPE_CHECKING:
    from playwright.sync_api import Browser

    from tests.acceptance.conftest import Veritask

pytestmark = pytest.mark.slow
__all__ = ["browser", "up"]  # the module's fixtures: one `up` and one Chromium

# A lease of 3 s makes the worker beat every second; the task reports progress twice.
PROGRESS = (
    "from veritask.execution import task_api as t; "
    "t.report_progress('load', 1, 2); t.report_progress('load', 2, 2)"
)
BEATING = f"""\
name: beating
concurrency: allow
tasks:
  beat:
    run: {json.dumps(f'sleep 2; {sys.executable} -c "{PROGRESS}"; sleep 3')}
    lease: 3s
"""
TEXT = {
    "en": {
        "fold": r"\d+ heartbeats and 2 progress reports from .+ to .+",
        "none": "No event matches.",
        "newest": "Newest first",
    },
    "zh": {
        "fold": r"\d+ 次心跳和2 次进度报告，从 .+ 到 .+",
        "none": "没有符合条件的事件。",
        "newest": "最新的在前",
    },
}
TOP_ROWS = "#instance-history > table > tbody > tr"


def _finished_instance(up: Veritask) -> str:
    with httpx.Client(
        base_url=up.url, headers={"Authorization": f"Bearer {admin_token(up)}"}, timeout=30
    ) as api:
        applied = api.post(
            "/api/v2/definitions", content=BEATING, headers={"Content-Type": "application/yaml"}
        )
        assert applied.status_code in (200, 201), applied.text
        answer = api.post("/api/v2/definitions/beating/runs", json={})
        assert answer.status_code == 202, answer.text
        run_id = answer.json()["run_id"]
        give_up = time.monotonic() + WAIT_MS / 1000
        while time.monotonic() < give_up:
            instance = api.get(f"/api/v2/runs/{run_id}").json()["instances"][0]
            if instance["state"] == "SUCCESS":
                return str(instance["id"])
            time.sleep(0.3)
    raise AssertionError("the task did not finish")


@pytest.mark.parametrize("language", ["en", "zh"])
def test_the_history_is_newest_first_folded_filtered_and_unboxed(
    browser: Browser, up: Veritask, language: str
) -> None:
    from playwright.sync_api import expect

    instance_id = _finished_instance(up)
    page = signed_in(browser, up, admin_token(up), language=language)
    try:
        page.goto(f"{up.url}/ui/instances/{instance_id}")
        expect(page.locator("#history-newest")).to_have_text(TEXT[language]["newest"])
        expect(page.locator("#history-newest")).to_have_attribute("aria-current", "true")
        positions = [
            int(p)
            for p in page.locator(f"{TOP_ROWS}.event").evaluate_all(
                "rows => rows.map(r => r.dataset.position)"
            )
        ]
        assert positions == sorted(positions, reverse=True)

        fold = page.locator(f"{TOP_ROWS}.fold")
        expect(fold).to_have_count(1)
        summary = fold.locator("details[id^='fold-'] > summary")
        assert re.fullmatch(TEXT[language]["fold"], summary.inner_text()), summary.inner_text()
        inner = fold.locator("tr.event")
        expect(inner.first).to_be_hidden()
        summary.focus()
        page.keyboard.press("Enter")  # a fold opens by keyboard
        expect(inner.first).to_be_visible()
        assert set(inner.evaluate_all("rows => rows.map(r => r.dataset.kind)")) == {
            "heartbeat",
            "progress",
        }

        # No box of its own: the page scrolls, the history never hides rows below a fold.
        history = page.locator("#instance-history")
        assert history.evaluate("e => getComputedStyle(e).maxHeight") == "none"
        assert history.evaluate("e => e.scrollHeight <= e.clientHeight + 1")

        page.focus("#history-oldest")
        page.keyboard.press("Enter")
        page.wait_for_url("**order=oldest#history")
        expect(page.locator(f"{TOP_ROWS}.event").first).to_have_attribute(
            "data-kind", "instance_created"
        )

        page.select_option("#history-kind", "heartbeat")
        page.focus("#history-filter")
        page.keyboard.press("Enter")
        page.wait_for_url("**kind=heartbeat**")
        assert "order=oldest" in page.url
        expect(page.locator(f"{TOP_ROWS}.fold")).to_have_count(0)
        kinds = page.locator(f"{TOP_ROWS}.event").evaluate_all(
            "rows => rows.map(r => r.dataset.kind)"
        )
        assert len(kinds) >= 2 and set(kinds) == {"heartbeat"}

        page.select_option("#history-outcome", "stale")
        page.focus("#history-filter")
        page.keyboard.press("Enter")
        page.wait_for_url("**outcome=stale**")
        expect(page.locator("#history-none")).to_have_text(TEXT[language]["none"])
        page.focus("#history-clear")
        page.keyboard.press("Enter")
        page.wait_for_url(re.compile(r".*/ui/instances/[^?]+\?order=oldest#history$"))
        expect(page.locator(f"{TOP_ROWS}.fold")).to_have_count(1)
    finally:
        page.context.close()
