"""The definition page's *Backfill…* form over HTTP: the preview, the confirmation, the
backfill's page, and who may (operators, with the session's CSRF token)."""

from __future__ import annotations

import re

from tests.ui.conftest import Ui
from veritask.services import backfills, definitions
from veritask.services.tokens import TokenRole

DAILY = """\
name: nightly
concurrency: allow
schedule: {cron: "0 0 * * *", timezone: UTC}
tasks:
  load: {run: "echo load"}
"""
FORM = {
    "from": "2026-01-01T00:00:00Z",
    "to": "2026-01-04T00:00:00Z",
    "existing": "skip",
    "max_active": "2",
    "parameters": "",
    "reason": "reload after the outage",
}


def _scheduled(ui: Ui) -> None:
    definitions.apply_definition(ui.platform, DAILY, actor="test")


def test_the_preview_lists_every_interval_and_changes_nothing(ui: Ui) -> None:
    _scheduled(ui)
    operator = ui.signed_in(TokenRole.OPERATOR)
    page = operator.http.get("/ui/definitions/nightly")
    assert 'id="backfill-form"' in page.text
    answer = operator.http.post(
        "/ui/definitions/nightly/backfill", data={**FORM, "csrf": operator.csrf, "step": "preview"}
    )
    assert answer.status_code == 200, answer.text
    assert answer.text.count('class="backfill-interval"') == 3
    assert answer.text.count("create a run") == 3
    assert 'id="backfill-confirm"' in answer.text
    assert backfills.list_backfills(ui.platform, definition="nightly") == ()


def test_confirm_creates_the_backfill_and_shows_its_page(ui: Ui) -> None:
    _scheduled(ui)
    operator = ui.signed_in(TokenRole.OPERATOR)
    answer = operator.http.post(
        "/ui/definitions/nightly/backfill", data={**FORM, "csrf": operator.csrf, "step": "confirm"}
    )
    assert answer.status_code == 303, answer.text
    [made] = backfills.list_backfills(ui.platform, definition="nightly")
    assert answer.headers["location"] == f"/ui/backfills/{made.id}"
    assert made.reason == "reload after the outage" and made.max_active_runs == 2
    shown = operator.http.get(answer.headers["location"])
    assert shown.status_code == 200
    assert shown.text.count('class="backfill-interval"') == 3
    assert "3 intervals:" in shown.text
    listed = operator.http.get("/ui/definitions/nightly").text
    assert f'href="/ui/backfills/{made.id}"' in listed


def test_refusals_show_the_form_again_with_the_problem(ui: Ui) -> None:
    _scheduled(ui)
    operator = ui.signed_in(TokenRole.OPERATOR)
    bad = {**FORM, "to": "2025-01-01T00:00:00Z", "parameters": "oops", "reason": ""}
    answer = operator.http.post(
        "/ui/definitions/nightly/backfill", data={**bad, "csrf": operator.csrf, "step": "confirm"}
    )
    assert answer.status_code == 422
    problems = re.findall(r'<li class="backfill-error">(.*?)</li>', answer.text)
    assert any("parameters" in p and "line 1" in p and "oops" in p for p in problems), problems
    assert any("reason" in p for p in problems), problems
    backwards = operator.http.post(
        "/ui/definitions/nightly/backfill",
        data={**FORM, "to": "2025-01-01T00:00:00Z", "csrf": operator.csrf, "step": "confirm"},
    )
    assert backwards.status_code == 422
    assert "<code>to</code>" in backwards.text
    assert 'value="reload after the outage"' in backwards.text  # what was typed is kept
    assert backfills.list_backfills(ui.platform, definition="nightly") == ()


def test_a_viewer_sees_no_form_and_a_viewers_post_is_refused(ui: Ui) -> None:
    _scheduled(ui)
    viewer = ui.signed_in(TokenRole.VIEWER)
    assert 'id="backfill-form"' not in viewer.http.get("/ui/definitions/nightly").text
    answer = viewer.http.post(
        "/ui/definitions/nightly/backfill", data={**FORM, "csrf": viewer.csrf, "step": "confirm"}
    )
    assert answer.status_code == 403
    assert "text/html" in answer.headers["content-type"]
    assert backfills.list_backfills(ui.platform, definition="nightly") == ()


def test_a_post_without_the_csrf_token_is_refused(ui: Ui) -> None:
    _scheduled(ui)
    operator = ui.signed_in(TokenRole.OPERATOR)
    answer = operator.http.post(
        "/ui/definitions/nightly/backfill", data={**FORM, "step": "confirm"}
    )
    assert answer.status_code == 403
    assert backfills.list_backfills(ui.platform, definition="nightly") == ()


def test_a_definition_without_a_schedule_has_no_backfill_form(ui: Ui) -> None:
    operator = ui.signed_in(TokenRole.OPERATOR)
    page = operator.http.get("/ui/definitions/pipeline")
    assert page.status_code == 200
    assert 'id="backfill-form"' not in page.text and 'id="trigger-form"' in page.text
