"""A task graph of 500 tasks in Chromium: it opens readable, zooms with its buttons, Ctrl +
wheel and the keys, fits in its box, pans by drag and by the arrow keys, and no label draws
past its box, in English and Chinese; without the script it is a box that scrolls.

The UI is served from a thread with no scheduler (the graph needs a run, not its progress).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.ui.conftest import Ui, require_browser, served_ui
from veritask.services import runs
from veritask.services.tokens import TokenRole

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

pytestmark = pytest.mark.slow

LAYERS = 20
WIDTH = 25
WAIT_MS = 30_000


def _key(index: int) -> str:
    """Every fifth key as long as a key may be (64), of the widest letters; the others long
    enough to be cut, and alike but for their ends."""
    if index % 5 == 0:
        return f"w{index:03}" + "mw" * 30
    return f"load_orders_from_the_warehouse_part_{index:03}"


def wide_definition() -> str:
    """500 tasks in 20 layers of 25; each waits for one task of the layer before."""
    lines = ["name: wide_graph", "tasks:"]
    for index in range(LAYERS * WIDTH):
        layer, column = divmod(index, WIDTH)
        after = f", after: [{_key((layer - 1) * WIDTH + column)}]" if layer else ""
        lines.append(f"  {_key(index)}: {{run: 'true'{after}}}")
    return "\n".join(lines) + "\n"


@dataclass
class Served:
    ui: Ui
    run_id: str


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[Served]:
    require_browser()
    root = tmp_path_factory.mktemp("ui-graph")
    database = root / "veritask.db"
    shutil.copy(sqlite_template, database)
    with served_ui(f"sqlite:///{database}", root / "home", wide_definition()) as ui:
        run_id = runs.trigger_run(ui.platform, "wide_graph", actor="operator:test").run_id
        yield Served(ui, run_id)


@pytest.fixture(scope="module")
def browser(served: Served) -> Iterator[Browser]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=require_browser(), args=["--no-sandbox"]
        )
        try:
            yield launched
        finally:
            launched.close()


def _signed_in(
    browser: Browser, served: Served, *, language: str = "en", script: bool = True
) -> Page:
    context = browser.new_context(
        timezone_id="UTC", viewport={"width": 1280, "height": 900}, java_script_enabled=script
    )
    url = served.ui.url
    context.add_cookies(
        [
            {"name": "veritask_tz", "value": "UTC", "url": url},
            {"name": "veritask_lang", "value": language, "url": url},
        ]
    )
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    page.goto(url + "/ui/sign-in")
    page.fill("#token", served.ui.tokens[TokenRole.VIEWER])
    page.click("form[action='/ui/sign-in'] button[type=submit]")
    page.wait_for_url("**/ui/definitions")
    return page


#: Each node's texts that draw past the box's right side less its padding (8 px).
OVERFLOWS = """() => Array.from(document.querySelectorAll("svg.dag a.node")).flatMap(node => {
    const box = node.querySelector("rect");
    const right = box.x.baseVal.value + box.width.baseVal.value - 8;
    return Array.from(node.querySelectorAll("text"))
        .filter(text => text.x.baseVal[0].value + text.getComputedTextLength() > right)
        .map(text => text.textContent);
})"""
#: The view's scale, scroll position and sizes.
VIEW = """v => ({scale: Number(v.dataset.scale), left: v.scrollLeft, top: v.scrollTop,
    width: v.clientWidth, height: v.clientHeight,
    scrollWidth: v.scrollWidth, scrollHeight: v.scrollHeight})"""


def _view(page: Page) -> dict[str, Any]:
    found: dict[str, Any] = page.locator(".graph-view").evaluate(VIEW)
    return found


@pytest.mark.parametrize("language", ["en", "zh"])
def test_no_label_draws_past_its_box(browser: Browser, served: Served, language: str) -> None:
    page = _signed_in(browser, served, language=language)
    try:
        for path in (f"/ui/runs/{served.run_id}", "/ui/definitions/wide_graph"):
            page.goto(served.ui.url + path)
            nodes = page.locator("svg.dag a.node")
            assert nodes.count() == LAYERS * WIDTH
            assert page.evaluate(OVERFLOWS) == [], path
            # A cut label keeps both its ends; its tooltip and its name have it whole.
            longest = page.locator(f"svg.dag a.node[data-task='{_key(0)}']")
            shown = longest.locator("text.label").text_content() or ""
            assert "…" in shown and _key(0).startswith(shown.split("…")[0])
            assert (longest.locator("title").text_content() or "").startswith(_key(0) + ": ")
            assert (longest.get_attribute("aria-label") or "").startswith(_key(0) + ": ")
            alike = page.locator(f"svg.dag a.node[data-task='{_key(1)}'] text.label")
            assert (alike.text_content() or "").endswith("001")
    finally:
        page.context.close()


NAMES = {
    "en": ("Zoom in", "Zoom out", "Fit"),
    "zh": ("放大", "缩小", "适应窗口"),
}


@pytest.mark.parametrize("language", ["en", "zh"])
def test_the_zoom_buttons_are_named_in_the_pages_language(
    browser: Browser, served: Served, language: str
) -> None:
    from playwright.sync_api import expect

    page = _signed_in(browser, served, language=language)
    try:
        page.goto(f"{served.ui.url}/ui/definitions/wide_graph")
        for name in NAMES[language]:
            expect(page.get_by_role("button", name=name, exact=True)).to_be_visible()
        graph = "Task graph" if language == "en" else "任务图"
        expect(page.get_by_role("region", name=graph)).to_have_attribute("tabindex", "0")
    finally:
        page.context.close()


def test_a_500_task_graph_opens_readable_zooms_fits_and_pans(
    browser: Browser, served: Served
) -> None:
    page = _signed_in(browser, served)
    try:
        page.goto(f"{served.ui.url}/ui/runs/{served.run_id}")
        view = page.locator(".graph-view")
        opened = _view(page)
        # Wider than its box: it opens at the readable floor, scrollbars to the rest.
        assert opened["scale"] == 0.75
        assert opened["scrollWidth"] > opened["width"]

        page.get_by_role("button", name="Zoom in", exact=True).click()
        assert _view(page)["scale"] == pytest.approx(0.75 * 1.25)
        page.get_by_role("button", name="Zoom out", exact=True).click()
        assert _view(page)["scale"] == pytest.approx(0.75)

        page.get_by_role("button", name="Fit", exact=True).click()
        fitted = _view(page)
        assert fitted["scale"] < 0.75
        assert fitted["scrollWidth"] <= fitted["width"]
        assert fitted["scrollHeight"] <= fitted["height"]
        inside = view.bounding_box()
        drawn = page.locator("svg.dag").bounding_box()
        assert inside is not None and drawn is not None
        assert drawn["x"] >= inside["x"] and drawn["y"] >= inside["y"]
        assert drawn["x"] + drawn["width"] <= inside["x"] + inside["width"]
        assert drawn["y"] + drawn["height"] <= inside["y"] + inside["height"]

        # Ctrl + wheel zooms around the pointer: the drawing's point under it stays there.
        x, y = inside["x"] + 300, inside["y"] + 200
        under = _drawing_point(page, x, y)
        page.mouse.move(x, y)
        page.keyboard.down("Control")
        page.mouse.wheel(0, -400)
        page.keyboard.up("Control")
        page.wait_for_function(
            f"() => Number(document.querySelector('.graph-view').dataset.scale) > {fitted['scale']}"
        )
        assert _drawing_point(page, x, y) == pytest.approx(under, abs=3)
        # A plain wheel scrolls, never zooms.
        zoomed = _view(page)
        page.mouse.wheel(0, 200)
        page.wait_for_function(
            f"() => document.querySelector('.graph-view').scrollTop > {zoomed['top']}"
        )
        assert _view(page)["scale"] == zoomed["scale"]

        # A drag pans, and the box it started on is not followed.
        before = _view(page)
        page.mouse.move(x, y)
        page.mouse.down()
        page.mouse.move(x + 150, y + 80, steps=5)
        page.mouse.up()
        dragged = _view(page)
        assert before["left"] >= 150 and before["top"] >= 80
        assert dragged["left"] == pytest.approx(before["left"] - 150, abs=2)
        assert dragged["top"] == pytest.approx(before["top"] - 80, abs=2)
        assert page.url.endswith(f"/ui/runs/{served.run_id}")

        # The keys pan and zoom while the graph has the focus.
        view.focus()
        page.keyboard.press("ArrowRight")
        page.keyboard.press("ArrowDown")
        keyed = _view(page)
        assert keyed["left"] > dragged["left"] and keyed["top"] > dragged["top"]
        page.keyboard.press("+")
        assert _view(page)["scale"] == pytest.approx(keyed["scale"] * 1.25)
        page.keyboard.press("0")
        assert _view(page)["scale"] == pytest.approx(fitted["scale"])

        # Responsive: a zoom step of 500 boxes, laid out again, well within a frame or few.
        took = page.evaluate(
            """() => { const t0 = performance.now();
                document.querySelector("button[data-zoom='in']").click();
                document.querySelector('.graph-view').getBoundingClientRect();
                document.querySelector('svg.dag a.node text').getComputedTextLength();
                return performance.now() - t0; }"""
        )
        assert took < 500, f"a zoom step took {took:.0f} ms"
    finally:
        page.context.close()


def _drawing_point(page: Page, x: float, y: float) -> tuple[float, float]:
    """The point of the drawing (in its own coordinates) at the page's point (x, y)."""
    found = page.evaluate(
        """([x, y]) => { const svg = document.querySelector("svg.dag");
            const at = new DOMPoint(x, y).matrixTransform(svg.getScreenCTM().inverse());
            return [at.x, at.y]; }""",
        [x, y],
    )
    return float(found[0]), float(found[1])


def test_without_the_script_the_graph_is_a_box_that_scrolls(
    browser: Browser, served: Served
) -> None:
    page = _signed_in(browser, served, script=False)
    try:
        page.goto(f"{served.ui.url}/ui/runs/{served.run_id}")
        assert not page.locator(".graph-tools").is_visible()
        sizes = page.locator(".graph-view").evaluate(VIEW)
        assert sizes["scrollWidth"] > sizes["width"] and sizes["scrollHeight"] > sizes["height"]
        svg = page.locator("svg.dag")
        assert svg.get_attribute("width") == svg.evaluate("s => String(s.viewBox.baseVal.width)")
    finally:
        page.context.close()


def test_a_live_update_keeps_the_zoom_and_the_place(browser: Browser, served: Served) -> None:
    from playwright.sync_api import expect

    page = _signed_in(browser, served)
    try:
        page.goto(f"{served.ui.url}/ui/runs/{served.run_id}")
        page.get_by_role("button", name="Zoom in", exact=True).click()
        view = page.locator(".graph-view")
        view.evaluate("v => { v.scrollLeft = 400; v.scrollTop = 300; }")
        page.evaluate("document.querySelector('svg.dag').dataset.old = 'yes'")
        before = _view(page)
        runs.cancel_run(served.ui.platform, served.run_id, actor="operator:test", reason="test")
        expect(page.locator("svg.dag[data-old]")).to_have_count(0)  # a new drawing came
        after = _view(page)
        assert (after["scale"], after["left"], after["top"]) == (
            before["scale"],
            before["left"],
            before["top"],
        )
        svg = page.locator("svg.dag")
        width = svg.evaluate("s => s.viewBox.baseVal.width")
        assert float(svg.get_attribute("width") or 0) == pytest.approx(width * after["scale"])
    finally:
        page.context.close()
