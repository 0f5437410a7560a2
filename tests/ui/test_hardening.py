"""The UI over HTTP against a hostile browser: odd zone cookies, framing, old sessions."""

from __future__ import annotations

import re

import pytest

from tests.ui.conftest import Ui, csrf_of
from veritask.services import runs
from veritask.services.tokens import TokenRole

TIME = re.compile(r'<time datetime="[^"]+" title="([^"]+ UTC)">([^<]+)</time>')


@pytest.mark.parametrize("zone", ["Europe", "Europe/", "..", "Nowhere/Else", "%00", "a" * 80])
def test_an_invalid_zone_cookie_falls_back_to_utc(ui: Ui, zone: str) -> None:
    anonymous = ui.client()
    anonymous.cookies.set("veritask_tz", zone)
    assert anonymous.get("/ui/sign-in").status_code == 200

    viewer = ui.signed_in(TokenRole.VIEWER)
    runs.trigger_run(ui.platform, "pipeline", actor="test")
    viewer.http.cookies.set("veritask_tz", zone)
    page = viewer.http.get("/ui/definitions/pipeline")

    assert page.status_code == 200
    found = TIME.search(page.text)
    assert found is not None
    assert found.group(2).endswith("UTC")


def test_a_percent_encoded_zone_cookie_is_decoded(ui: Ui) -> None:
    viewer = ui.signed_in(TokenRole.VIEWER)
    runs.trigger_run(ui.platform, "pipeline", actor="test")
    viewer.http.cookies.set("veritask_tz", "Asia%2FShanghai")

    page = viewer.http.get("/ui/definitions/pipeline")

    found = TIME.search(page.text)
    assert found is not None
    assert found.group(2).endswith("CST")


def test_the_sign_in_page_still_has_a_form(ui: Ui) -> None:
    anonymous = ui.client()
    anonymous.cookies.set("veritask_tz", "Europe")
    assert csrf_of(anonymous.get("/ui/sign-in").text)
