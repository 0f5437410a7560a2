"""A 200-task run moved through its life in Chromium: the keyboard, the slider, the form and
a step button each move the run page to an instant, and the instance states it shows are the
explain API's *known then* for that instant, with the late event marked; then back to live.
The page never reloads. The UI is served from a thread with no scheduler over a history
recorded at known instants (tests/ui/test_time_scrubber.py)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest

from tests.ui.conftest import Ui, require_browser, served_ui
from tests.ui.test_time_scrubber import Story, begin, runs_to_the_end
from veritask.services.tokens import TokenRole

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

pytestmark = pytest.mark.slow

TASKS = 200
WAIT_MS = 30_000
#: The last task's completion happened at 600 s and was recorded at 610 s.
LATE_TASK = TASKS - 1


def definition() -> str:
    """200 tasks in 10 layers of 20; each waits for one task of the layer before."""
    lines = ["name: two_hundred", "tasks:"]
    for index in range(TASKS):
        after = f", after: [t{index - 20:03}]" if index >= 20 else ""
        lines.append(f"  t{index:03}: {{run: 'true'{after}}}")
    return "\n".join(lines) + "\n"


@dataclass
class Served:
    ui: Ui
    story: Story


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[Served]:
    require_browser()
    root = tmp_path_factory.mktemp("ui-scrubber")
    database = root / "veritask.db"
    shutil.copy(sqlite_template, database)
    with served_ui(f"sqlite:///{database}", root / "home", definition()) as ui:
        story = begin(ui.platform, "two_hundred")
        for index in range(TASKS):
            late = 10.0 if index == LATE_TASK else 0.0
            runs_to_the_end(ui.platform, story, f"t{index:03}", start=1 + 3 * index, late_by=late)
        yield Served(ui, story)


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


def _signed_in(browser: Browser, served: Served) -> Page:
    context = browser.new_context(timezone_id="UTC", viewport={"width": 1280, "height": 900})
    url = served.ui.url
    context.add_cookies([{"name": "veritask_tz", "value": "UTC", "url": url}])
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    page.goto(url + "/ui/sign-in")
    page.fill("#token", served.ui.tokens[TokenRole.VIEWER])
    page.click("form[action='/ui/sign-in'] button[type=submit]")
    page.wait_for_url("**/ui/definitions")
    return page


SHOWN = """() => Object.fromEntries(Array.from(
    document.querySelectorAll("#run-instances tr[data-id]"),
    row => [row.dataset.id, row.dataset.state]))"""
LATE_SHOWN = """() => Array.from(document.querySelectorAll("#run-instances tr[data-id]"))
    .filter(row => row.querySelector("[data-late]")).map(row => row.dataset.id)"""


def _known_then(served: Served, as_of: str) -> dict[str, str]:
    with httpx.Client(
        base_url=served.ui.url,
        headers={"Authorization": f"Bearer {served.ui.tokens[TokenRole.VIEWER]}"},
    ) as api:
        answer = api.get(
            f"/api/v2/runs/{served.story.run_id}/explain",
            params={"as_of": as_of, "axis": "observed"},
        )
        assert answer.status_code == 200, answer.text
        return {i["id"]: i["known_then"]["state"] for i in answer.json()["instances"]}


def _moved_to(page: Page, expected: str | None = None) -> str:
    """Wait for the page to show an instant (``expected``, or any new one); it."""
    from playwright.sync_api import expect

    state = page.locator("#scrub-state")
    if expected is not None:
        expect(state).to_have_attribute("data-as-of", expected)
    as_of = state.get_attribute("data-as-of")
    assert as_of
    expect(page.locator("#scrub-banner")).to_be_visible()
    return as_of


def _iso(story: Story, seconds: float) -> str:
    return story.at(seconds).isoformat().replace("+00:00", "Z")


def test_move_a_200_task_run_through_its_life_without_a_reload(
    browser: Browser, served: Served
) -> None:
    from playwright.sync_api import expect

    story = served.story
    page = _signed_in(browser, served)
    page.goto(f"{served.ui.url}/ui/runs/{story.run_id}")
    expect(page.locator("#run-instances tr[data-id]")).to_have_count(TASKS)
    assert set(page.evaluate(SHOWN).values()) == {"SUCCESS"}
    page.evaluate("window.__veritaskNotReloaded = true")
    slider = page.locator("#scrub-range")
    expect(slider).to_be_visible()

    # The keyboard: Home is the run's creation, every instance CREATED.
    slider.focus()
    page.keyboard.press("Home")
    first = _moved_to(page, _iso(story, 0))
    assert page.evaluate(SHOWN) == _known_then(served, first)
    assert set(page.evaluate(SHOWN).values()) == {"CREATED"}

    # The slider dragged to 5 minutes: the first hundred tasks have run.
    slider.fill("300")
    middle = _moved_to(page, _iso(story, 300))
    shown = page.evaluate(SHOWN)
    assert shown == _known_then(served, middle)
    assert sorted(shown.values()).count("SUCCESS") == 100

    # A time typed in the form: the last task's success had happened, but was not recorded.
    page.fill("#scrub-as-of", _iso(story, 605))
    page.press("#scrub-as-of", "Enter")
    late = _moved_to(page, _iso(story, 605))
    shown = page.evaluate(SHOWN)
    assert shown == _known_then(served, late)
    late_id = story.instances[f"t{LATE_TASK:03}"]
    assert shown[late_id] == "LOST"
    assert page.evaluate(LATE_SHOWN) == [late_id]
    expect(page.locator(f"svg.dag a.node.late[data-task='t{LATE_TASK:03}']")).to_have_count(1)

    # A step to the next event: its late report recorded, the run as it is now.
    page.click("#scrub-next")
    recorded = _moved_to(page, _iso(story, 610))
    shown = page.evaluate(SHOWN)
    assert shown == _known_then(served, recorded)
    assert shown[late_id] == "SUCCESS"

    page.click("#scrub-live")
    expect(page.locator("#scrub-banner")).to_have_count(0)
    assert "as_of" not in page.url
    assert set(page.evaluate(SHOWN).values()) == {"SUCCESS"}
    assert page.evaluate("() => window.__veritaskNotReloaded === true"), "the page reloaded"
