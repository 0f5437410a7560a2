"""The web UI over real HTTP, and the browser that drives it.

``ui`` serves the API with the UI mounted (as ``veritask up`` does) from a thread, over a
fresh SQLite database, with one token per role; ``signed_in(role)`` gives an HTTP client
whose session is signed in with that role, and its CSRF token. No scheduler runs: the pages
are read over what the services record.

The browser tests need Chromium at /usr/bin/chromium (or VERITASK_CHROMIUM) and Playwright;
without them they are skipped, unless VERITASK_REQUIRE_SERVICES=1: then they fail.
"""

from __future__ import annotations

import contextlib
import html
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.conftest import ServerThread
from veritask.api.app import create_app
from veritask.api.settings import ApiSettings
from veritask.services import definitions, tokens
from veritask.services.platform import Platform
from veritask.services.tokens import TokenRole
from veritask.ui import app as ui_app

CHROMIUM = os.environ.get("VERITASK_CHROMIUM", "/usr/bin/chromium")
CSRF = re.compile(r'name="csrf" value="([^"]+)"')
GANTT_BAR = re.compile(
    r'<rect class="phase-[^"]*" [^>]*data-instance="([^"]*)" data-phase="([^"]*)" '
    r'data-attempt="([^"]*)" data-start="([^"]*)" data-end="([^"]*)"'
)
#: A phase interval: instance id, phase, attempt, start and end (None while it goes on).
Interval = tuple[str, str, int, datetime, datetime | None]

PIPELINE = """\
name: pipeline
description: "<script>alert(1)</script> extracts, transforms and loads"
owner: "<b>data</b>"
parameters: {table: users}
tasks:
  extract: {run: "echo extract"}
  transform: {run: "echo transform", after: [extract]}
  load: {run: "echo load", after: [transform]}
"""


@dataclass
class SignedIn:
    """An HTTP client with a signed-in session, and that session's CSRF token."""

    http: httpx.Client
    csrf: str


@dataclass
class Ui:
    url: str
    platform: Platform
    tokens: dict[TokenRole, str]
    _clients: list[httpx.Client] = field(default_factory=list)

    def client(self) -> httpx.Client:
        made = httpx.Client(base_url=self.url, timeout=30, follow_redirects=False)
        self._clients.append(made)
        return made

    def signed_in(self, role: TokenRole) -> SignedIn:
        http = self.client()
        page = http.get("/ui/sign-in")
        csrf = csrf_of(page.text)
        answer = http.post(
            "/ui/sign-in", data={"csrf": csrf, "token": self.tokens[role], "next": "/ui/"}
        )
        assert answer.status_code == 303, answer.text
        return SignedIn(http, csrf_of(http.get("/ui/definitions").text))


def csrf_of(page: str) -> str:
    found = CSRF.search(page)
    assert found is not None, "the page has no CSRF field"
    return found.group(1)


def drawn_intervals(page: str) -> set[Interval]:
    """The phase intervals the run page's Gantt chart draws (its bars' data attributes)."""
    return {
        (instance, phase, int(attempt), _moment(start), _moment(end) if end else None)
        for instance, phase, attempt, start, end in GANTT_BAR.findall(page)
    }


def api_intervals(durations: dict[str, Any]) -> set[Interval]:
    """The phase intervals of ``GET /api/v2/runs/{id}/durations``."""
    return {
        (
            instance["instance_id"],
            phase["phase"],
            phase["attempt_no"],
            _moment(phase["start"]),
            _moment(phase["end"]) if phase["end"] else None,
        )
        for instance in durations["instances"]
        for phase in instance["phases"]
    }


def _moment(text: str) -> datetime:
    return datetime.fromisoformat(html.unescape(text).replace("Z", "+00:00"))


@contextlib.contextmanager
def served_ui(url: str, home: Path, *sources: str) -> Iterator[Ui]:
    """The API with the UI on ``url``'s database, served from a thread, with a token of each
    role and the definitions ``sources`` applied."""
    home.mkdir(exist_ok=True)
    platform = Platform.open(url, home)
    made = {
        role: tokens.create_token(platform, role=role, name=f"{role.value}-user").token
        for role in TokenRole
    }
    for source in sources:
        definitions.apply_definition(platform, source, actor="test")
    app = create_app(ApiSettings(url, home), platform=platform)
    ui_app.install(app)
    found = Ui("", platform, made)
    try:
        with ServerThread(app) as server:
            found.url = server.url
            yield found
    finally:
        for client in found._clients:
            client.close()
        platform.close()


@pytest.fixture
def ui(tmp_path: Path, sqlite_template: Path) -> Iterator[Ui]:
    database = tmp_path / "veritask.db"
    shutil.copy(sqlite_template, database)
    with served_ui(f"sqlite:///{database}", tmp_path / "home", PIPELINE) as found:
        yield found


def require_browser() -> str:
    """The Chromium executable, or skip (fail when services are required)."""
    missing = None
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing = "playwright is not installed"
    if missing is None and not Path(CHROMIUM).exists():
        missing = f"no chromium at {CHROMIUM}"
    if missing is not None:
        if os.environ.get("VERITASK_REQUIRE_SERVICES") == "1":
            pytest.fail(f"VERITASK_REQUIRE_SERVICES=1 and {missing}", pytrace=False)
        pytest.skip(missing)
    return CHROMIUM
