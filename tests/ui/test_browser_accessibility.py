"""Every page type checked by axe-core (the engine browsers' own audits use) in Chromium, in
both languages and both themes: no serious or critical violation of WCAG 2 A and AA, contrast
included. Keyboard use: a visible focus ring, and every action reachable with Tab."""

from __future__ import annotations

from typing import TYPE_CHECKING

import httpx
import pytest

from tests.ui.test_browser import admin_token, browser, signed_in, up

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

    from tests.acceptance.conftest import Veritask

pytestmark = pytest.mark.slow
__all__ = ["browser", "up"]  # the module's fixtures: one `up` and one Chromium

CHECKED = {"runOnly": {"type": "tag", "values": ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]}}
GRAVE = {"serious", "critical"}
SOURCE = (
    "name: audited\nconcurrency: allow\ntasks:\n"
    "  first: {run: 'echo hello'}\n  second: {run: 'exit 3', after: [first]}\n"
)


def _pages(up: Veritask) -> list[str]:
    with httpx.Client(
        base_url=up.url, headers={"Authorization": f"Bearer {admin_token(up)}"}
    ) as api:
        applied = api.post(
            "/api/v2/definitions", content=SOURCE, headers={"Content-Type": "application/yaml"}
        )
        assert applied.status_code in (200, 201), applied.text
        run_id = api.post("/api/v2/definitions/audited/runs", json={}).json()["run_id"]
        instance_id = api.get(f"/api/v2/runs/{run_id}").json()["instances"][0]["id"]
    return [
        "/ui/definitions",
        "/ui/definitions/audited",
        "/ui/definitions/audited/grid",
        "/ui/definitions/audited/edit",
        "/ui/definitions/new",
        "/ui/runs",
        f"/ui/runs/{run_id}",
        f"/ui/runs/{run_id}?as_of=2000-01-01T00:00:00Z",  # as of its creation: the banner
        f"/ui/runs/{run_id}/clear?failed=yes",
        f"/ui/runs/{run_id}/rerun",
        f"/ui/instances/{instance_id}",
        f"/ui/instances/{instance_id}/log?attempt=1",
        "/ui/pools",
        "/ui/alerts",
        "/ui/health",
    ]


def _violations(page: Page) -> list[str]:
    from axe_playwright_python.sync_playwright import Axe

    results = Axe().run(page, options=CHECKED)
    return [
        f"{found['id']} ({found['impact']}): {node['target']} {node.get('failureSummary', '')}"
        for found in results.response["violations"]
        if found["impact"] in GRAVE
        for node in found["nodes"]
    ]


@pytest.mark.parametrize(("language", "theme"), [("en", "light"), ("zh", "dark")])
def test_every_page_type_passes_axe(
    browser: Browser, up: Veritask, language: str, theme: str
) -> None:
    paths = _pages(up)
    page = signed_in(browser, up, admin_token(up), language=language)
    page.context.add_cookies([{"name": "veritask_theme", "value": theme, "url": up.url}])
    try:
        found = {}
        for path in paths:
            page.goto(up.url + path)
            problems = _violations(page)
            if problems:
                found[path] = problems
        page.context.clear_cookies()
        page.goto(up.url + "/ui/sign-in")
        if problems := _violations(page):
            found["/ui/sign-in"] = problems
        assert not found, "\n".join(f"{path}: {p}" for path, ps in found.items() for p in ps)
    finally:
        page.context.close()


def test_a_run_page_is_worked_with_the_keyboard_and_shows_where_the_focus_is(
    browser: Browser, up: Veritask
) -> None:
    run_path = next(p for p in _pages(up) if p.startswith("/ui/runs/") and p.count("/") == 3)
    page = signed_in(browser, up, admin_token(up))
    try:
        page.goto(up.url + run_path)
        page.wait_for_selector("#clear-failed")  # the failed leaf offers a clear
        reached = []
        for _ in range(80):
            page.keyboard.press("Tab")
            focused = page.evaluate(
                """() => {
                    const e = document.activeElement;
                    const style = getComputedStyle(e);
                    return [e.id || e.getAttribute('href') || e.tagName,
                            style.outlineStyle, style.outlineWidth];
                }"""
            )
            reached.append(focused[0])
            assert focused[1] != "none" and focused[2] != "0px", f"no focus ring on {focused[0]}"
            if focused[0] == "rerun-run":
                break
        assert "clear-failed" in reached and "rerun-run" in reached, reached
        page.keyboard.press("Enter")  # the focused action, without a mouse
        page.wait_for_url("**/rerun")
    finally:
        page.context.close()
