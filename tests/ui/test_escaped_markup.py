"""No page shows the platform's own markup as text: every page the UI tests reach, in both
languages, is read for escaped tags (``&lt;time``, ``&lt;span`` …) that a helper wrote and a
translated sentence then escaped again."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import httpx
import pytest

from tests.ui.conftest import SignedIn, Ui
from veritask.services import backfills, definitions, runs
from veritask.services.tokens import TokenRole

DAILY = """\
name: nightly
concurrency: allow
parameters: {region: eu}
schedule: {cron: "0 0 * * *", timezone: UTC}
tasks:
  extract: {run: "echo extract"}
  load: {run: "echo load", after: [extract]}
"""
BACKFILL = {
    "from": "2026-01-01T00:00:00Z",
    "to": "2026-01-03T00:00:00Z",
    "existing": "skip",
    "max_active": "2",
    "parameters": "",
    "reason": "reload",
}
#: Tags the platform writes itself (user text such as the fixture's ``<b>data</b>`` owner is
#: rightly escaped, so ``b`` and ``script`` are not here).
ESCAPED = re.compile(
    r"&lt;/?(time|span|a|code|abbr|svg|em|strong|div|ul|li|br|small|kbd|table|tr|td)\b"
)


def _pages(ui: Ui, admin: SignedIn) -> dict[str, httpx.Response]:
    """Every page, by a name saying which: GETs, the previews (POSTs) and the error page."""
    run_id = runs.trigger_run(ui.platform, "nightly", actor="test").run_id
    runs.trigger_run(ui.platform, "pipeline", actor="test")  # active: a second is refused
    instance_id = runs.get_run(ui.platform, run_id).instances[0].id
    backfill = backfills.request_backfill(
        ui.platform,
        "nightly",
        start=datetime(2026, 1, 1, tzinfo=UTC),
        end=datetime(2026, 1, 3, tzinfo=UTC),
        actor="test",
        reason="reload",
    ).backfill
    http, csrf = admin.http, admin.csrf
    gets = [
        "/ui/definitions",
        "/ui/definitions/new",
        "/ui/definitions/nightly",
        "/ui/definitions/nightly/edit",
        "/ui/definitions/nightly/delete",
        "/ui/definitions/nightly/grid",
        "/ui/definitions/pipeline",
        "/ui/runs",
        f"/ui/runs/{run_id}",
        f"/ui/runs/{run_id}/clear",
        f"/ui/runs/{run_id}/rerun",
        f"/ui/instances/{instance_id}",
        f"/ui/instances/{instance_id}/log",
        f"/ui/backfills/{backfill.id}",
        "/ui/health",
        "/ui/pools",
        "/ui/alerts",
        "/ui/runs/no-such-run",
    ]
    shown = {path: http.get(path) for path in gets}
    shown["backfill preview"] = http.post(
        "/ui/definitions/nightly/backfill", data={**BACKFILL, "csrf": csrf, "step": "preview"}
    )
    shown["clear preview"] = http.post(
        f"/ui/runs/{run_id}/clear/preview",
        data={"csrf": csrf, "task": "extract", "downstream": "yes", "reason": "again"},
    )
    shown["rerun preview"] = http.post(
        f"/ui/runs/{run_id}/rerun/preview",
        data={"csrf": csrf, "parameters": "region=us", "version": "same", "reason": "again"},
    )
    shown["trigger refusal"] = http.post(
        "/ui/definitions/nightly/trigger", data={"csrf": csrf, "extra": "oops"}
    )
    shown["backfill refusal"] = http.post(
        "/ui/definitions/nightly/backfill",
        data={**BACKFILL, "to": "2025-01-01", "csrf": csrf, "step": "preview"},
    )
    shown["editor refusal"] = http.post(
        "/ui/definitions/new",
        data={"csrf": csrf, "source": "name: broken\nschedule: {cron: '0 25 * * *'}\ntasks: {}\n"},
    )
    shown["concurrency refusal"] = http.post(
        "/ui/definitions/pipeline/trigger", data={"csrf": csrf}
    )
    shown["sign-in"] = ui.client().get("/ui/sign-in")
    return shown


@pytest.mark.parametrize("language", ["en", "zh"])
def test_no_page_shows_escaped_markup(ui: Ui, language: str) -> None:
    definitions.apply_definition(ui.platform, DAILY, actor="test")
    admin = ui.signed_in(TokenRole.ADMIN)
    admin.http.cookies.set("veritask_lang", language)
    pages = _pages(ui, admin)
    for name, answer in pages.items():
        assert answer.status_code in (200, 404, 409, 422), (
            name,
            answer.status_code,
            answer.text[:300],
        )
        assert "text/html" in answer.headers["content-type"], name
        found = ESCAPED.findall(answer.text)
        assert not found, f"{name} ({language}) shows escaped markup: {found}"
    assert f'lang="{"zh-CN" if language == "zh" else "en"}"' in pages["/ui/runs"].text
    refusals = ("trigger refusal", "backfill refusal", "editor refusal", "concurrency refusal")
    assert [pages[name].status_code for name in refusals] == [422, 422, 422, 409]
    assert pages["/ui/runs/no-such-run"].status_code == 404
