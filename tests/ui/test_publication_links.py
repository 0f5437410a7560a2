"""Runs started by published data, as the pages and the API show them: both directions on
the definitions' pages, the upstream run on the started run's page, in both languages."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import httpx

from tests.scheduling.publications import downstream, published_run, upstream
from tests.ui.conftest import Ui
from veritask.cli import render
from veritask.scheduling import publication_triggers
from veritask.services import definitions
from veritask.services.tokens import TokenRole

MONDAY = datetime(2026, 3, 2, tzinfo=UTC)


def started_run(ui: Ui) -> tuple[str, str]:
    """``users`` and ``orders`` publish Monday; ``report`` starts: (report's run, users' run)."""
    for source in (upstream("users"), upstream("orders"), downstream("users", "orders")):
        definitions.apply_definition(ui.platform, source, actor="test")
    ledger = ui.platform.ledger
    users = published_run(ledger, "users", MONDAY)
    published_run(ledger, "orders", MONDAY)
    assert publication_triggers.start_published_runs(ledger) == 1
    api = ui.client()
    api.headers["Authorization"] = f"Bearer {ui.tokens[TokenRole.VIEWER]}"
    [item] = api.get("/api/v2/runs", params={"trigger_kind": "published"}).json()["items"]
    return item["id"], users


def fact(page: str, element_id: str) -> str:
    found = re.search(rf'<dd id="{element_id}">(.*?)</dd>', page, re.S)
    assert found is not None, f"no #{element_id} on the page"
    return found.group(1)


def test_both_definitions_pages_link_the_other_direction(ui: Ui) -> None:
    started_run(ui)
    http = ui.signed_in(TokenRole.VIEWER).http

    report = http.get("/ui/definitions/report").text
    assert "Started when these publish" in report
    started_by = fact(report, "started-by")
    assert '<a href="/ui/definitions/users">users</a>' in started_by
    assert '<a href="/ui/definitions/orders">orders</a>' in started_by
    assert started_by.endswith("(all)")
    assert "publishing-starts" not in report

    users = http.get("/ui/definitions/users").text
    assert "Publishing starts" in users
    assert fact(users, "publishing-starts") == '<a href="/ui/definitions/report">report</a>'
    assert 'id="started-by"' not in users


def test_the_run_page_and_the_api_name_the_upstream_runs(ui: Ui) -> None:
    run_id, users = started_run(ui)
    http = ui.signed_in(TokenRole.VIEWER).http

    page = http.get(f"/ui/runs/{run_id}").text
    shown = fact(page, "upstream-runs")
    assert f'<a href="/ui/runs/{users}"><code>{users}</code></a>' in shown
    assert '<a href="/ui/definitions/orders">orders</a>' in shown
    assert "published data" in page  # the trigger kind's label

    api = ui.client()
    api.headers["Authorization"] = f"Bearer {ui.tokens[TokenRole.VIEWER]}"
    detail = api.get(f"/api/v2/runs/{run_id}").json()
    assert detail["trigger_kind"] == "published"
    assert detail["logical_time"].startswith("2026-03-02T00:00:00")
    assert {u["definition"] for u in detail["upstream_runs"]} == {"users", "orders"}
    assert users in {u["run_id"] for u in detail["upstream_runs"]}
    started_by = render.run_header(detail)[-1]  # what `veritask show` prints
    assert started_by.startswith("started by:  orders ")
    assert f"users {users}" in started_by
    report = api.get("/api/v2/definitions/report").json()
    assert (report["started_by"], report["started_when"]) == (["users", "orders"], "all")
    assert api.get("/api/v2/definitions/users").json()["starts"] == ["report"]


def test_the_links_read_in_chinese(ui: Ui) -> None:
    run_id, _ = started_run(ui)
    http: httpx.Client = ui.signed_in(TokenRole.VIEWER).http
    http.headers["Accept-Language"] = "zh-CN"

    report = http.get("/ui/definitions/report").text
    assert "这些发布时启动" in report
    assert fact(report, "started-by").endswith("(全部)")
    assert "发布时启动" in http.get("/ui/definitions/users").text
    page = http.get(f"/ui/runs/{run_id}").text
    assert "由以下发布启动" in page
    assert "数据发布" in page
