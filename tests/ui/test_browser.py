"""The web UI in a real browser: Chromium driven by Playwright against a real ``veritask up``.

One ``up`` (SQLite, a temporary VERITASK_HOME, the local executor) serves the whole module;
each test opens its own browser context (its own cookies). Live updates are proven by a mark
left on the page's ``window``: it survives only if the page was never reloaded.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

import httpx
import pytest

from tests.acceptance.conftest import Veritask, shut_down, start_up
from tests.ui.conftest import api_intervals, drawn_intervals, require_browser

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Dialog, Page

pytestmark = pytest.mark.slow

DEFINITIONS = {
    "quick.yaml": """\
name: quick
description: "<script>alert(1)</script> two quick steps"
tasks:
  first: {run: echo "first step output"}
  second: {run: echo "second step output", after: [first]}
""",
    "sleepy.yaml": """\
name: sleepy
tasks:
  # Outlives SIGTERM by three seconds, so that CANCELLING lasts until the page has shown it.
  nap: {run: "trap 'echo stopping; sleep 3; exit 143' TERM; echo going to sleep; sleep 60 & wait"}
""",
    # Expected to finish within a second, runs for a minute: the scheduler raises a deadline.
    "late.yaml": """\
name: late
expected_finish: 1s
tasks:
  slow: {run: "sleep 60"}
""",
}
BROKEN = "name: edited\ntasks:\n  a: {run: echo a}\n  b: {run: echo b, after: [missing]}\n"
LIVE_MARK = "window.__veritaskNotReloaded = true"
STILL_MARKED = "() => window.__veritaskNotReloaded === true"
WAIT_MS = 30_000


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Veritask]:
    require_browser()
    root = tmp_path_factory.mktemp("ui-browser")
    folder = root / "definitions"
    folder.mkdir()
    for name, text in DEFINITIONS.items():
        (folder / name).write_text(text)
    started = start_up(root / "home", folder, root / "up.log")
    try:
        yield started
    finally:
        shut_down(started)


@pytest.fixture(scope="module")
def browser(up: Veritask) -> Iterator[Browser]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=require_browser(), args=["--no-sandbox"]
        )
        try:
            yield launched
        finally:
            launched.close()


def admin_token(up: Veritask) -> str:
    return (up.home / "token").read_text().strip()


def signed_in(browser: Browser, up: Veritask, token: str, *, language: str = "en") -> Page:
    context = browser.new_context(timezone_id="Asia/Shanghai", locale="en-US")
    # The zone as the page's script writes it (encodeURIComponent), set first so that no
    # reload interrupts the test (test_browser_zone.py lets the script write it).
    context.add_cookies(
        [
            {"name": "veritask_tz", "value": "Asia%2FShanghai", "url": up.url},
            {"name": "veritask_lang", "value": language, "url": up.url},
        ]
    )
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    page.goto(up.url + "/")
    page.fill("#token", token)
    page.click("form[action='/ui/sign-in'] button[type=submit]")
    page.wait_for_url("**/ui/definitions")
    return page


def trigger_from_page(page: Page, up: Veritask, name: str) -> str:
    page.goto(f"{up.url}/ui/definitions/{name}")
    page.click("#trigger-form button[type=submit]")
    page.wait_for_url(re.compile(r".*/ui/runs/[0-9a-f-]+$"))
    return page.url.rsplit("/", 1)[1]


def test_create_fix_trigger_watch_it_turn_green_and_read_an_instance(
    browser: Browser, up: Veritask
) -> None:
    from playwright.sync_api import expect

    page = signed_in(browser, up, admin_token(up))
    page.click("#new-definition")
    page.fill("#source", BROKEN)
    page.click("#editor-form button[type=submit]")
    error = page.locator(".editor-error[data-line='4']")
    expect(error).to_contain_text("missing")
    expect(page.locator(".gutter li.flagged")).to_have_text(["4"])
    page.fill("#source", BROKEN.replace("[missing]", "[a]"))
    page.click("#editor-form button[type=submit]")
    page.wait_for_url("**/ui/definitions/edited")

    run_id = trigger_from_page(page, up, "quick")
    page.evaluate(LIVE_MARK)
    expect(page.locator("#run-states .run-execution [data-state]")).to_have_attribute(
        "data-state", "SUCCESS", timeout=WAIT_MS
    )
    assert page.evaluate(STILL_MARKED), "the page was reloaded instead of updated"
    expect(page.locator("#run-graph .node[data-state='SUCCESS']")).to_have_count(2)
    expect(page.locator("#run-timeline rect.phase-execution")).to_have_count(2)

    page.click("#run-instances a:text-is('first')")
    page.wait_for_url("**/ui/instances/**")
    expect(page.locator("#instance-attempts tr.attempt")).to_have_count(1)
    expect(page.locator("#instance-attempts tr.attempt")).to_contain_text("local")
    for kind in ("instance_created", "attempt_opened", "submit_acknowledged", "completed"):
        expect(page.locator(f"#instance-history tr[data-kind='{kind}']").first).to_be_visible()
    expect(page.locator("#log")).to_contain_text("first step output")
    assert run_id in page.content()


def test_cancel_shows_cancelling_then_cancelled(browser: Browser, up: Veritask) -> None:
    from playwright.sync_api import expect

    page = signed_in(browser, up, admin_token(up))
    trigger_from_page(page, up, "sleepy")
    page.click("#run-instances a:text-is('nap')")
    page.wait_for_url("**/ui/instances/**")
    state = page.locator("#instance-state .instance-state [data-state]")
    expect(state).to_have_attribute("data-state", "RUNNING", timeout=WAIT_MS)
    expect(page.locator("#log")).to_contain_text("going to sleep", timeout=WAIT_MS)
    page.fill("#cancel-reason", "stuck upstream")
    page.click("#cancel-button")
    page.wait_for_load_state()
    page.evaluate(LIVE_MARK)
    # The task outlives SIGTERM by three seconds: the stop cannot be confirmed before the
    # page after the click has been drawn.
    expect(state).to_have_attribute("data-state", "CANCELLING")
    expect(state).to_contain_text("cancelling")
    expect(page.locator("#log")).to_contain_text("stopping")
    expect(state).to_have_attribute("data-state", "CANCELLED", timeout=WAIT_MS)
    assert page.evaluate(STILL_MARKED)
    cancel = page.locator("#instance-history tr[data-kind='cancel_requested']")
    expect(cancel).to_contain_text("operator:admin")


def test_an_override_needs_a_reason_and_is_audited(browser: Browser, up: Veritask) -> None:
    from playwright.sync_api import expect

    page = signed_in(browser, up, admin_token(up))
    trigger_from_page(page, up, "quick")
    expect(page.locator("#run-states .run-execution [data-state]")).to_have_attribute(
        "data-state", "SUCCESS", timeout=WAIT_MS
    )
    page.click("#run-instances a:text-is('second')")
    page.wait_for_url("**/ui/instances/**")
    page.select_option("#override-state", "FAILED")
    page.click("#override-button")  # no reason: the browser refuses to send the form
    assert page.locator("#override-reason").evaluate("e => !e.validity.valid")
    page.fill("#override-reason", "row counts were wrong")
    page.click("#override-button")
    page.wait_for_load_state()
    expect(page.locator(".instance-state [data-state]")).to_have_attribute("data-state", "FAILED")
    expect(page.locator("#instance-state .tag")).to_be_visible()
    row = page.locator("#instance-history tr[data-kind='override']")
    expect(row).to_contain_text("operator:admin")
    row.locator("summary").click()
    expect(row).to_contain_text("row counts were wrong")


def test_a_viewer_has_no_cancel_button_and_a_forged_post_is_refused(
    browser: Browser, up: Veritask
) -> None:
    from playwright.sync_api import expect

    created = up.cli("token", "create", "--role", "viewer", "--name", "watcher")
    assert created.returncode == 0, created.stderr
    page = signed_in(browser, up, created.stdout.strip())
    trigger = up.cli_json("trigger", "sleepy")
    run_id = trigger["run_id"]
    page.goto(f"{up.url}/ui/runs/{run_id}")
    expect(page.locator("#cancel-run")).to_have_count(0)
    page.click("#run-instances a:text-is('nap')")
    page.wait_for_url("**/ui/instances/**")
    expect(page.locator("#cancel-button")).to_have_count(0)
    expect(page.locator("#override-button")).to_have_count(0)
    csrf = page.locator("input[name=csrf]").first.get_attribute("value")
    instance_url = page.url
    answer = page.request.post(
        instance_url + "/cancel", form={"csrf": csrf or "", "reason": "forged"}
    )
    assert answer.status == 403
    state = up.cli_json("show", run_id)["execution_state"]
    assert state in ("QUEUED", "RUNNING")
    up.cli("cancel", run_id, "--reason", "test cleanup")


def test_switch_to_chinese(browser: Browser, up: Veritask) -> None:
    from playwright.sync_api import expect

    page = signed_in(browser, up, admin_token(up))
    page.select_option("#language", "zh")  # the script submits the choice
    page.wait_for_function("document.documentElement.lang === 'zh-CN'")
    expect(page.locator("h1")).to_have_text("定义")
    expect(page.locator("header nav")).to_contain_text("健康状况")
    page.goto(up.url + "/ui/health")
    expect(page.locator("h1")).to_have_text("健康状况")


def test_a_script_in_a_description_is_shown_as_text(browser: Browser, up: Veritask) -> None:
    from playwright.sync_api import expect

    # Definition names are slugs, so the description carries the script.
    page = signed_in(browser, up, admin_token(up))
    dialogs: list[str] = []

    def record(dialog: Dialog) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", record)
    page.goto(up.url + "/ui/definitions")
    expect(page.locator("tr[data-definition='quick'] .description")).to_contain_text(
        "<script>alert(1)</script>"
    )
    page.goto(up.url + "/ui/definitions/quick")
    expect(page.locator("dd.description")).to_contain_text("<script>alert(1)</script>")
    assert dialogs == []


def test_the_gantt_draws_the_durations_apis_intervals_for_a_real_run(
    browser: Browser, up: Veritask
) -> None:
    from playwright.sync_api import expect

    page = signed_in(browser, up, admin_token(up))
    run_id = trigger_from_page(page, up, "quick")
    expect(page.locator("#run-states .run-execution [data-state]")).to_have_attribute(
        "data-state", "SUCCESS", timeout=WAIT_MS
    )
    page.goto(f"{up.url}/ui/runs/{run_id}")
    drawn = drawn_intervals(page.content())
    answer = httpx.get(
        f"{up.url}/api/v2/runs/{run_id}/durations",
        headers={"Authorization": f"Bearer {admin_token(up)}"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    expected = api_intervals(answer.json())
    assert len([1 for _, phase, *_ in expected if phase == "execution"]) == 2
    assert drawn == expected


def test_an_alert_appears_live_and_an_operator_acknowledges_then_resolves_it(
    browser: Browser, up: Veritask
) -> None:
    from playwright.sync_api import expect

    page = signed_in(browser, up, admin_token(up))
    page.goto(up.url + "/ui/alerts")
    page.evaluate(LIVE_MARK)
    run_id = up.cli_json("trigger", "late")["run_id"]
    row = page.locator(f"tr.alert:has(a[href='/ui/runs/{run_id}'])")
    expect(row).to_have_count(1, timeout=WAIT_MS)  # raised by the scheduler, shown live
    assert page.evaluate(STILL_MARKED), "the page was reloaded instead of updated"
    expect(row).to_have_attribute("data-status", "open")
    expect(row).to_contain_text("expected to finish")
    expect(page.locator(".alert-group[data-category='deadline'] h2")).to_contain_text("Deadline")
    expect(page.locator("#nav-open-alerts")).not_to_have_text("0")

    row.locator(".acknowledge-form button").click()
    page.wait_for_load_state()
    expect(row).to_have_attribute("data-status", "acknowledged")
    expect(row.locator("td.acknowledged")).to_contain_text("operator:admin")
    expect(row.locator(".acknowledge-form")).to_have_count(0)

    row.locator(".resolve-form button").click()
    page.wait_for_load_state()
    expect(row).to_have_count(0)  # the default view lists unresolved alerts only
    page.select_option("#filter-status", "resolved")
    page.click("#alert-filters button[type=submit]")
    page.wait_for_url("**/ui/alerts?status=resolved**")
    expect(row).to_have_attribute("data-status", "resolved")
    expect(row.locator("td.resolved")).to_contain_text("operator:admin")
    expect(row.locator("td.resolved time")).to_have_attribute("title", re.compile(r" UTC$"))
    up.cli("cancel", run_id, "--reason", "test cleanup")
