"""The log viewer in Chromium: a real task's log, followed while it grows (and left alone
once you scroll up), searched with the matches marked and stepped through, linked by line,
coloured, downloaded; and all of it by keyboard, in English and Chinese."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import httpx
import pytest

from tests.ui.test_browser import WAIT_MS, admin_token, browser, signed_in, up

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

    from tests.acceptance.conftest import Veritask

pytestmark = pytest.mark.slow
__all__ = ["browser", "up"]  # the module's fixtures: one `up` and one Chromium

# Quiet for a few seconds (the viewer says so), then 1,500 lines at once, then a line every
# half second for a while: enough to scroll, and to keep growing while the test reads it.
DRIP = """\
name: drip
concurrency: allow
tasks:
  drip: {run: 'sleep 4; printf "\\033[1;31mERROR\\033[0m first\\n"; seq -f "line %g" 1 1500;
    i=0; while [ $i -lt 40 ]; do i=$((i+1)); echo "tick $i"; sleep 0.5; done'}
"""
# A finished log of 2,501 lines (three pages) with "needle" on lines 6, 1501, 2101 and 2201.
NEEDLES = """\
name: needles
concurrency: allow
tasks:
  needles: {run: 'printf "\\033[32mgreen start\\033[0m\\n"; seq -f "line %g" 1 2500 |
    sed -e "5s/$/ needle/" -e "1500s/$/ NEEDLE/" -e "2100s/$/ needle/" -e "2200s/$/ needle/"'}
"""
TEXT = {
    "en": {
        "empty": "No output yet.",
        "paused": "Paused while you read further up.",
        "hit": "Match 2 of 2 on this page",
        "done": "The attempt has ended: the log is complete.",
    },
    "zh": {
        "empty": "尚无输出。",
        "paused": "您在向上阅读，已暂停跟随。",
        "hit": "本页第 2 处匹配，共 2 处",
        "done": "这次尝试已结束：日志已完整。",
    },
}
AT_BOTTOM = "v => v.scrollTop + v.clientHeight >= v.scrollHeight - 4"


def _api(up: Veritask) -> httpx.Client:
    return httpx.Client(
        base_url=up.url, headers={"Authorization": f"Bearer {admin_token(up)}"}, timeout=30
    )


def _start(up: Veritask, source: str, name: str) -> str:
    """Apply and trigger ``name``; its instance, once its first attempt is open."""
    with _api(up) as api:
        applied = api.post(
            "/api/v2/definitions", content=source, headers={"Content-Type": "application/yaml"}
        )
        assert applied.status_code in (200, 201), applied.text
        answer = api.post(f"/api/v2/definitions/{name}/runs", json={})
        assert answer.status_code == 202, answer.text
        run_id = answer.json()["run_id"]
        give_up = time.monotonic() + WAIT_MS / 1000
        while time.monotonic() < give_up:
            instance = api.get(f"/api/v2/runs/{run_id}").json()["instances"][0]
            if instance["attempts"]:
                return str(instance["id"])
            time.sleep(0.1)
    raise AssertionError("no attempt opened")


def _finished(up: Veritask, instance_id: str) -> None:
    with _api(up) as api:
        give_up = time.monotonic() + WAIT_MS / 1000
        while time.monotonic() < give_up:
            if api.get(f"/api/v2/instances/{instance_id}").json()["state"] == "SUCCESS":
                return
            time.sleep(0.2)
    raise AssertionError("the task did not finish")


def _press(page: Page, selector: str, key: str = "Enter") -> None:
    """Reach ``selector`` by keyboard focus and press ``key`` on it."""
    page.focus(selector)
    page.keyboard.press(key)


@pytest.mark.parametrize("language", ["en", "zh"])
def test_the_log_follows_until_you_scroll_up_and_resumes_on_request(
    browser: Browser, up: Veritask, language: str
) -> None:
    from playwright.sync_api import expect

    instance_id = _start(up, DRIP, "drip")
    page = signed_in(browser, up, admin_token(up), language=language)
    try:
        page.goto(f"{up.url}/ui/instances/{instance_id}")
        _press(page, "#open-log-viewer")
        page.wait_for_url(f"**/ui/instances/{instance_id}/log?attempt=1")
        view = page.locator("#log-view")
        expect(page.locator("#log-empty")).to_contain_text(TEXT[language]["empty"])

        expect(page.locator("#L1501")).to_have_text("1501line 1500", timeout=WAIT_MS)
        expect(page.locator("#log-empty")).to_have_count(0)
        expect(page.locator("#L1 .a-f1.a-bold")).to_have_text("ERROR")  # colours, as classes
        expect(page.locator("#log-view .tx", has_text="tick 2")).to_have_count(1)
        assert view.evaluate(AT_BOTTOM), "following keeps the newest line in sight"

        view.evaluate("v => { v.scrollTop = 0; }")  # the reader goes up
        expect(page.locator("#log-paused")).to_have_text(TEXT[language]["paused"])
        expect(page.locator("#log-resume")).to_be_visible()
        seen = page.locator("#log-lines .line").count()
        expect(page.locator("#log-lines .line")).not_to_have_count(seen, timeout=WAIT_MS)
        assert view.evaluate("v => v.scrollTop") == 0, "new lines never pull the reader down"

        _press(page, "#log-resume")
        expect(page.locator("#log-resume")).to_be_hidden()
        expect(page.locator("#log-following")).to_be_visible()
        assert view.evaluate(AT_BOTTOM)
        assert page.evaluate("document.activeElement.id") == "log-view"
        expect(page.locator("#log-view .tx", has_text="tick 40")).to_have_count(1, timeout=WAIT_MS)
        expect(page.locator("#log-done")).to_have_text(TEXT[language]["done"], timeout=WAIT_MS)
        assert view.evaluate(AT_BOTTOM)
    finally:
        page.context.close()


@pytest.mark.parametrize("language", ["en", "zh"])
def test_search_marks_and_steps_through_matches_across_pages_by_keyboard(
    browser: Browser, up: Veritask, language: str
) -> None:
    from playwright.sync_api import expect

    instance_id = _start(up, NEEDLES, "needles")
    _finished(up, instance_id)
    page = signed_in(browser, up, admin_token(up), language=language)
    try:
        page.goto(f"{up.url}/ui/instances/{instance_id}/log?attempt=1")
        expect(page.locator("#L2501")).to_be_visible()  # the last page, scrolled to its end
        expect(page.locator("#L1 .a-f2")).to_have_count(0)  # line 1 is on the first page
        _press(page, "#log-q", "n")
        page.keyboard.type("eedle")
        page.keyboard.press("Enter")
        page.wait_for_url("**q=needle**")
        marks = page.locator("#log-view mark")
        expect(marks).to_have_count(2)  # lines 2101 and 2201 on this page, marked as text
        assert marks.all_inner_texts() == ["needle", "needle"]
        expect(page.locator("#log-lines .line.hit")).to_have_count(2)

        _press(page, "#hit-next")
        page.keyboard.press("Enter")  # focus stays on the button: Enter again steps on
        expect(page.locator("#hit-status")).to_have_text(TEXT[language]["hit"])
        expect(page.locator("#L2201 mark.current")).to_have_count(1)
        _press(page, "#hit-prev")
        expect(page.locator("#L2101 mark.current")).to_have_count(1)
        page.keyboard.press("Enter")  # before the first on this page: the page before
        page.wait_for_url("**line=1501#L1501")
        expect(page.locator("#L1501 mark.current")).to_have_text("NEEDLE")
        expect(page.locator("#L1501")).to_have_class("line hit target")
        assert page.locator("#L1501").is_visible()
    finally:
        page.context.close()


def test_a_line_link_highlights_its_line_and_the_download_is_the_whole_log(
    browser: Browser, up: Veritask
) -> None:
    from playwright.sync_api import expect

    instance_id = _start(up, NEEDLES, "needles")
    _finished(up, instance_id)
    page = signed_in(browser, up, admin_token(up))
    try:
        page.goto(f"{up.url}/ui/instances/{instance_id}/log?attempt=1&line=1")
        expect(page.locator("#L1 .a-f2")).to_have_text("green start")
        expect(page.locator("#log-range")).to_have_text("Lines 1–1000 of 2501")
        options = page.locator("#log-attempt option")
        expect(options).to_have_text(["Attempt 1 · success"])

        _press(page, "#L300 a.ln")
        page.wait_for_url("**line=300#L300")
        expect(page.locator("#L300")).to_have_class("line target")
        page.reload()  # the link on its own opens the same line, highlighted
        expect(page.locator("#L300")).to_have_css("background-color", "rgb(61, 48, 18)")
        assert page.locator("#L300").evaluate(
            "l => { const v = l.closest('#log-view').getBoundingClientRect(),"
            " r = l.getBoundingClientRect(); return r.top >= v.top && r.bottom <= v.bottom; }"
        )

        _press(page, "#log-next")
        page.wait_for_url("**line=1001")
        expect(page.locator("#log-range")).to_have_text("Lines 1001–2000 of 2501")

        with page.expect_download() as downloading:
            _press(page, "#log-download")
        download = downloading.value
        assert download.suggested_filename == f"{instance_id}-attempt-1.log"
        saved = download.path()
        assert saved is not None
        text = saved.read_text()
        assert text.startswith("\x1b[32mgreen start\x1b[0m\nline 1\n")
        assert text.endswith("line 2500\n") and text.count("\n") == 2501
    finally:
        page.context.close()
