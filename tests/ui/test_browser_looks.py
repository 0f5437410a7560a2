"""How the pages look in Chromium: drawn state icons, the favicon, the dark theme (chosen, or
following the system), and definitions pages that keep themselves fresh."""

from __future__ import annotations

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
    up,
)

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

    from tests.acceptance.conftest import Veritask

pytestmark = pytest.mark.slow
__all__ = ["browser", "up"]  # the module's fixtures: one `up` and one Chromium

BACKGROUND = "() => getComputedStyle(document.documentElement).backgroundColor"
LIGHT_WASH = "rgb(245, 246, 249)"
DARK_WASH = "rgb(17, 21, 30)"


def _api(up: Veritask) -> httpx.Client:
    return httpx.Client(base_url=up.url, headers={"Authorization": f"Bearer {admin_token(up)}"})


LOOKS = (
    "name: looks\nconcurrency: allow\ntasks:\n"
    "  first: {run: 'true'}\n  second: {run: 'true', after: [first]}\n"
)


def _apply(up: Veritask, source: str) -> None:
    with _api(up) as api:
        applied = api.post(
            "/api/v2/definitions", content=source, headers={"Content-Type": "application/yaml"}
        )
        assert applied.status_code in (200, 201), applied.text


def _run(up: Veritask, name: str) -> str:
    with _api(up) as api:
        answer = api.post(f"/api/v2/definitions/{name}/runs", json={})
        assert answer.status_code == 202, answer.text
        return str(answer.json()["run_id"])


def _theme(page: Page, choice: str) -> None:
    with page.expect_navigation():
        page.select_option("#theme", choice)  # the form submits itself


@pytest.mark.parametrize("language", ["en", "zh"])
def test_states_are_drawn_icons_beside_their_words(
    browser: Browser, up: Veritask, language: str
) -> None:
    from playwright.sync_api import expect

    _apply(up, LOOKS)
    run_id = _run(up, "looks")
    page = signed_in(browser, up, admin_token(up), language=language)
    try:
        page.goto(f"{up.url}/ui/runs/{run_id}")
        badge = page.locator("#run-instances .badge[data-state]").first
        expect(badge).to_be_visible()
        icon = badge.locator("svg.icon")
        expect(icon).to_have_count(1)
        assert icon.get_attribute("aria-hidden") == "true"  # the word beside it says the state
        box = icon.bounding_box()
        assert box is not None and box["width"] > 6 and box["height"] > 6
        # Each box of the graph draws its state's icon too; no state is a font's character.
        expect(page.locator("svg.dag a.node svg.icon")).to_have_count(2)
        text = page.locator("main").inner_text()
        for character in "✓✗⌛■◧⚠▶↻↷⊘∅⊗":
            assert character not in text
        assert page.locator("link[rel=icon]").get_attribute("href") == "/ui/static/favicon.svg"
        favicon = page.request.get(f"{up.url}/ui/static/favicon.svg")
        assert favicon.ok and favicon.headers["content-type"].startswith("image/svg+xml")
    finally:
        page.context.close()


@pytest.mark.parametrize("language", ["en", "zh"])
def test_the_dark_theme_is_chosen_remembered_and_given_back(
    browser: Browser, up: Veritask, language: str
) -> None:
    page = signed_in(browser, up, admin_token(up), language=language)
    try:
        assert page.evaluate(BACKGROUND) == LIGHT_WASH
        labels = page.locator("#theme option").all_inner_texts()
        assert labels == (
            ["System", "Light", "Dark"] if language == "en" else ["跟随系统", "浅色", "深色"]
        )

        _theme(page, "dark")
        assert page.evaluate(BACKGROUND) == DARK_WASH
        assert page.evaluate("() => document.documentElement.dataset.theme") == "dark"
        page.goto(f"{up.url}/ui/runs")  # remembered on every page
        assert page.evaluate(BACKGROUND) == DARK_WASH
        assert page.locator("#theme").input_value() == "dark"

        _theme(page, "light")
        assert page.evaluate(BACKGROUND) == LIGHT_WASH
    finally:
        page.context.close()


def test_the_system_theme_is_followed_until_one_is_chosen(browser: Browser, up: Veritask) -> None:
    page = signed_in(browser, up, admin_token(up))
    try:
        page.emulate_media(color_scheme="dark")
        assert page.evaluate(BACKGROUND) == DARK_WASH
        page.emulate_media(color_scheme="light")
        assert page.evaluate(BACKGROUND) == LIGHT_WASH

        _theme(page, "light")  # a choice wins over the system's preference
        page.emulate_media(color_scheme="dark")
        assert page.evaluate(BACKGROUND) == LIGHT_WASH
    finally:
        page.context.close()


def test_the_definitions_pages_follow_runs_and_changes_without_a_reload(
    browser: Browser, up: Veritask
) -> None:
    from playwright.sync_api import expect

    page = signed_in(browser, up, admin_token(up))
    try:
        page.goto(f"{up.url}/ui/definitions")
        page.evaluate(LIVE_MARK)
        _apply(up, "name: arrives_live\ntasks:\n  only: {run: 'true'}\n")
        expect(page.locator("tr[data-definition='arrives_live']")).to_be_visible(timeout=WAIT_MS)

        page.goto(f"{up.url}/ui/definitions/arrives_live")
        page.evaluate(LIVE_MARK)
        expect(page.locator("#definition-runs .square")).to_have_count(0)
        _run(up, "arrives_live")
        expect(page.locator("#definition-runs .square")).to_have_count(1, timeout=WAIT_MS)
        with _api(up) as api:
            assert api.post("/api/v2/definitions/arrives_live/disable").status_code == 200
        expect(page.locator("#definition-lifecycle")).to_have_text(
            "disabled", ignore_case=True, timeout=WAIT_MS
        )
        page.wait_for_function(STILL_MARKED)  # the page was never loaded again
    finally:
        page.context.close()


@pytest.mark.parametrize("width", [390, 2560])
def test_no_page_scrolls_sideways_on_a_phone_or_a_wide_screen(
    browser: Browser, up: Veritask, width: int
) -> None:
    _apply(up, LOOKS)
    run_id = _run(up, "looks")
    with _api(up) as api:
        instance_id = api.get(f"/api/v2/runs/{run_id}").json()["instances"][0]["id"]
    page = signed_in(browser, up, admin_token(up), language="zh" if width < 1000 else "en")
    try:
        page.set_viewport_size({"width": width, "height": 900})
        for path in (
            "/ui/definitions",
            "/ui/definitions/looks",
            "/ui/definitions/looks/grid",
            "/ui/definitions/new",
            "/ui/runs",
            f"/ui/runs/{run_id}",
            f"/ui/instances/{instance_id}",
            "/ui/alerts",
            "/ui/health",
        ):
            page.goto(up.url + path)
            scroll, client = page.evaluate(
                "() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
            )
            assert scroll <= client, f"{path} is {scroll} px wide in a {client} px window"
            # Every link of the header is on the screen, not pushed past its edge.
            for box in page.locator("header.top a").evaluate_all(
                "links => links.map(a => a.getBoundingClientRect().right)"
            ):
                assert box <= client
        if width > 2000:
            main_width = page.evaluate("() => document.querySelector('main').clientWidth")
            assert main_width > 1280  # a wide screen is used, not left empty
    finally:
        page.context.close()
