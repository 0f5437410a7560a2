"""The database down under a running server: every route answers 503 problem+json with
``Retry-After``, never 500, and nothing is half-written.

The outage is real. On PostgreSQL the server's database stops accepting connections and its
sessions are ended (``ALLOW_CONNECTIONS false`` and ``pg_terminate_backend``: what an operator
or a failover does). On SQLite the folder that holds the file is moved away, as when its disk
is unmounted, and the pool's connections are closed (SQLite keeps reading a file it still has
open, so only new connections notice).
"""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
from psycopg import sql

from tests.conftest import SQLITE
from tests.ui.conftest import PIPELINE, Ui, csrf_of, served_ui
from veritask.services import runs
from veritask.services.tokens import TokenRole

PROBLEM = "application/problem+json"


@pytest.fixture
def served(database_kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Ui]:
    """The API and the UI over a fresh database (SQLite's in a folder of its own)."""
    if database_kind == SQLITE:
        template: Path = request.getfixturevalue("sqlite_template")
        folder = tmp_path / "db"
        folder.mkdir()
        shutil.copyfile(template, folder / "veritask.db")
        url = f"sqlite:///{folder / 'veritask.db'}"
    else:
        url = request.getfixturevalue("database_url")
    with served_ui(url, tmp_path / "home", PIPELINE) as ui:
        yield ui


@contextlib.contextmanager
def database_down(ui: Ui) -> Iterator[None]:
    """The database unreachable for the server inside the block, back after it."""
    url = ui.platform.engine.url
    if url.get_backend_name() == "sqlite":
        folder = Path(str(url.database)).parent
        away = folder.with_name(folder.name + "-unmounted")
        folder.rename(away)
        ui.platform.engine.dispose()
        try:
            yield
        finally:
            away.rename(folder)
            ui.platform.engine.dispose()
        return
    name = sql.Identifier(str(url.database))
    admin = psycopg.connect(
        host=url.host, port=url.port or 5432, user=url.username, dbname="postgres", autocommit=True
    )
    with admin:
        admin.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS false").format(name))
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
            (url.database,),
        )
        try:
            yield
        finally:
            admin.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS true").format(name))


def assert_unavailable(response: httpx.Response) -> None:
    assert response.status_code == 503, (response.request.url, response.text)
    assert response.headers["content-type"] == PROBLEM
    assert int(response.headers["retry-after"]) >= 1
    body = response.json()
    assert body["type"] == "/problems/unavailable"
    assert body["status"] == 503


def test_every_route_answers_503_with_retry_after_while_the_database_is_down(
    served: Ui,
) -> None:
    viewer = served.signed_in(TokenRole.VIEWER)
    api = served.client()
    api.headers["Authorization"] = f"Bearer {served.tokens[TokenRole.ADMIN]}"
    assert api.get("/api/v2/runs").status_code == 200

    with database_down(served):
        assert_unavailable(api.get("/api/v2/runs"))
        assert_unavailable(api.get("/api/v1/runs"))
        assert_unavailable(api.get("/api/v2/definitions/pipeline"))
        assert_unavailable(api.post("/api/v2/definitions/pipeline/runs", json={}))
        assert_unavailable(api.get("/metrics"))
        assert_unavailable(viewer.http.get("/ui/definitions"))
        assert_unavailable(viewer.http.get("/ui/runs"))
        assert_unavailable(viewer.http.get("/ui/live?since=0"))
        assert_unavailable(
            viewer.http.post(
                "/ui/definitions/pipeline/trigger", data={"csrf": viewer.csrf, "param.table": "x"}
            )
        )
        worker = served.client()
        worker.headers["Authorization"] = "Bearer an-attempt-token"
        assert_unavailable(worker.post("/api/v2/callbacks/events", json={}))
        visitor = served.client()
        sign_in = visitor.get("/ui/sign-in")  # needs no database: a static form
        assert sign_in.status_code == 200
        assert_unavailable(
            visitor.post(
                "/ui/sign-in",
                data={"csrf": csrf_of(sign_in.text), "token": served.tokens[TokenRole.VIEWER]},
            )
        )
        ready = api.get("/readyz")
        assert ready.status_code == 503
        assert ready.headers["retry-after"]
        assert ready.json()["ready"] is False
        assert "unreachable" in ready.json()["detail"]
        assert api.get("/healthz").status_code == 200  # the process itself is fine

    assert api.get("/api/v2/runs").status_code == 200
    assert viewer.http.get("/ui/definitions").status_code == 200


def test_a_trigger_refused_by_an_outage_left_nothing_and_succeeds_after(served: Ui) -> None:
    operator = served.client()
    operator.headers["Authorization"] = f"Bearer {served.tokens[TokenRole.OPERATOR]}"

    with database_down(served):
        assert_unavailable(
            operator.post("/api/v2/definitions/pipeline/runs", json={"idempotency_key": "k"})
        )

    assert runs.list_runs(served.platform, definition="pipeline").items == ()
    accepted = operator.post("/api/v2/definitions/pipeline/runs", json={"idempotency_key": "k"})
    assert accepted.status_code == 202, accepted.text
    assert len(runs.list_runs(served.platform, definition="pipeline").items) == 1


def test_an_open_live_stream_ends_whole_when_the_database_goes(served: Ui) -> None:
    """The stream ends as a stream ends (its last chunk sent), not cut off mid-answer; the
    browser's reconnection then meets the 503."""
    viewer = served.signed_in(TokenRole.VIEWER)
    request = viewer.http.build_request("GET", "/ui/live?since=0")
    stream = viewer.http.send(request, stream=True)
    try:
        assert stream.status_code == 200
        with database_down(served):
            began = time.monotonic()
            for _ in stream.iter_text():  # raises if the server cut the answer off
                assert time.monotonic() - began < 10, "the stream went on without its database"
            assert time.monotonic() - began < 3
            assert_unavailable(viewer.http.get("/ui/live?since=0"))
    finally:
        stream.close()
