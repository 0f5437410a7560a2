"""The run page's *Clear failed*, *Clear this task* and *Rerun…* in Chromium against a real
``veritask up``: a task that fails, the reason, the confirm step's scope, then the act."""

from __future__ import annotations

import re
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

# `broken` fails after two seconds, with no retry: long enough to see its run running again.
FAILING = """\
name: {name}
parameters: {{label: one}}
defaults: {{retry: {{max_retries: 0}}}}
tasks:
  prepare: {{run: "true"}}
  broken: {{run: "sleep 2; exit 1", after: [prepare]}}
"""


def failed_run(up: Veritask, name: str) -> str:
    """A run of a new definition ``name`` whose ``broken`` task failed."""
    with httpx.Client(
        base_url=up.url + "/api/v2", headers={"Authorization": f"Bearer {admin_token(up)}"}
    ) as api:
        applied = api.post("/definitions", json={"source": FAILING.format(name=name)})
        assert applied.status_code in (200, 201), applied.text
        answer = api.post(f"/definitions/{name}/runs", json={})
        assert answer.status_code == 202, answer.text
        run_id: str = answer.json()["run_id"]
        ends = time.monotonic() + WAIT_MS / 1000
        while api.get(f"/runs/{run_id}").json()["execution_state"] != "FAILED":
            assert time.monotonic() < ends, "the run did not fail"
            time.sleep(0.2)
    return run_id


def test_clear_failed_asks_a_reason_shows_the_scope_and_runs_again(
    browser: Browser, up: Veritask
) -> None:
    from playwright.sync_api import expect

    run_id = failed_run(up, "fails_then_cleared")
    page = signed_in(browser, up, admin_token(up))
    page.goto(f"{up.url}/ui/runs/{run_id}")
    page.click("#clear-failed")
    page.fill("#clear-reason", "the disk is fixed")
    page.click("#clear-form button[type=submit]")
    expect(page.locator("#clear-preview tbody tr")).to_have_count(1)
    expect(page.locator("#clear-preview tr[data-instance='broken']")).to_be_visible()
    page.click("#clear-confirm button[type=submit]")
    page.wait_for_url(f"**/ui/runs/{run_id}")
    expect(page.locator("#run-states .run-execution [data-state]")).to_have_attribute(
        "data-state", "RUNNING"
    )
    expect(page.locator("#run-states .run-execution")).to_contain_text("the disk is fixed")


def test_clear_this_task_and_downstream(browser: Browser, up: Veritask) -> None:
    from playwright.sync_api import expect

    run_id = failed_run(up, "task_cleared")
    page = signed_in(browser, up, admin_token(up))
    page.goto(f"{up.url}/ui/runs/{run_id}")
    page.click("#run-instances tr[data-instance='prepare'] a.clear-task")
    expect(page.locator("#clear-downstream")).to_be_checked()
    page.fill("#clear-reason", "prepare again")
    page.click("#clear-form button[type=submit]")
    rows = page.locator("#clear-preview tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.first).to_have_attribute("data-instance", "prepare")
    page.click("#clear-confirm button[type=submit]")
    page.wait_for_url(f"**/ui/runs/{run_id}")
    attempts = page.locator("#run-instances tr[data-instance='prepare'] td:nth-child(3)")
    expect(attempts).to_have_text("2", timeout=WAIT_MS)


def test_rerun_with_a_changed_parameter_leads_to_the_new_run(
    browser: Browser, up: Veritask
) -> None:
    from playwright.sync_api import expect

    old = failed_run(up, "rerun_with_two")
    page = signed_in(browser, up, admin_token(up))
    page.goto(f"{up.url}/ui/runs/{old}")
    page.click("#rerun-run")
    expect(page.locator("#rerun-parameters")).to_have_value("label=one")
    page.fill("#rerun-parameters", "label=two")
    page.fill("#rerun-reason", "with two")
    page.click("#rerun-form button[type=submit]")
    expect(page.locator("#rerun-shown-parameters")).to_contain_text('"label": "two"')
    page.click("#rerun-confirm button[type=submit]")
    page.wait_for_url(re.compile(r".*/ui/runs/[0-9a-f-]+$"))
    new = page.url.rsplit("/", 1)[1]
    assert new != old
    expect(page.locator(f"a[href='/ui/runs/{old}']")).to_be_visible()
    expect(page.locator("pre.parameters")).to_contain_text('"label": "two"')
