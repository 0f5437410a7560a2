"""A mapped task in Chromium against a real ``veritask up``: the run page shows it as one row
with its instances counted by state, which opens into them, and one box in the graph."""

from __future__ import annotations

from typing import TYPE_CHECKING

import httpx
import pytest

from tests.ui.test_browser import WAIT_MS, admin_token, browser, signed_in, up

if TYPE_CHECKING:
    from playwright.sync_api import Browser

    from tests.acceptance.conftest import Veritask

pytestmark = pytest.mark.slow
__all__ = ["browser", "up"]  # the module's fixtures: one `up` and one Chromium

MAPPED = """\
name: fanned
tasks:
  list_files:
    run: echo '["a.csv", "b.csv", "c.csv"]' > "$VERITASK_OUTPUT"
  load:
    run: echo loading {{ map.item }}
    map: {over: "{{ outputs.list_files }}"}
    after: [list_files]
"""


def test_a_mapped_task_is_one_row_that_opens_into_its_instances(
    browser: Browser, up: Veritask
) -> None:
    from playwright.sync_api import expect

    token = admin_token(up)
    with httpx.Client(base_url=up.url, headers={"Authorization": f"Bearer {token}"}) as api:
        applied = api.post(
            "/api/v2/definitions", content=MAPPED, headers={"Content-Type": "application/yaml"}
        )
        assert applied.status_code in (200, 201), applied.text
        answer = api.post("/api/v2/definitions/fanned/runs", json={})
        assert answer.status_code == 202, answer.text
        run_id = answer.json()["run_id"]
    page = signed_in(browser, up, token)
    page.goto(f"{up.url}/ui/runs/{run_id}")
    expect(page.locator("#run-states .run-execution [data-state]")).to_have_attribute(
        "data-state", "SUCCESS", timeout=WAIT_MS
    )
    page.reload()
    group = page.locator("tr.mapped-group[data-instance='load']")
    expect(group).to_contain_text("3 instances")
    expect(group.locator(".mapped-count[data-state='SUCCESS']")).to_contain_text("×3")
    instances = page.locator("tr.mapped-instances[data-group='load'] details")
    expect(instances.locator("tr[data-instance^='load[']")).to_have_count(3)
    expect(instances.locator("tr[data-instance='load[1]']")).to_be_hidden()
    instances.locator("summary").click()
    expect(instances.locator("tr[data-instance='load[1]']")).to_be_visible()
    # The graph's box for the group leads to its row.
    box = page.locator("a.node[data-task='load ×3']")
    expect(box).to_have_attribute("href", "#mapped-load")
    instances.locator("tr[data-instance='load[1]'] a").click()
    page.wait_for_url("**/ui/instances/**")
    expect(page.locator("#log")).to_contain_text("loading b.csv")
