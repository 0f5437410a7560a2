"""The API over real HTTP: a uvicorn server on a free port, per test, on SQLite and PostgreSQL.

``api`` starts the application of ``veritask.api.app.create_app`` against the test's fresh,
migrated database (``database_url`` from tests/conftest.py) and gives an ``httpx.Client``
with an admin token. The helpers below put instances and attempts into the ledger the way the
scheduler would, so that callbacks, cancels and overrides have something real to act on.
"""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from veritask.api.app import create_app
from veritask.api.settings import ApiSettings
from veritask.core import decide, judge
from veritask.core.events import Event, EventKind
from veritask.core.jsontypes import JSONObject
from veritask.core.states import RunExecutionState
from veritask.execution import wire
from veritask.ledger import run_store
from veritask.services import tokens
from veritask.services.platform import Platform
from veritask.services.tokens import TokenRole

#: Small enough that the tests of the cap stay cheap.
MAX_BODY = 64 * 1024

HELLO = """\
name: hello
description: one shell task
tasks:
  greet:
    run: echo hello
"""

PIPELINE = """\
name: pipeline
parameters: {table: users}
tasks:
  extract: {run: "echo extract"}
  transform: {run: "echo transform", after: [extract]}
  load: {run: "echo load", after: [transform]}
"""


class ServerThread:
    """uvicorn serving ``app`` from a thread, on a socket bound to a free port."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.socket.bind(("127.0.0.1", 0))
        self.port: int = self.socket.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", access_log=False, ws="none")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.socket]}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ServerThread:
        self.thread.start()
        give_up = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > give_up or not self.thread.is_alive():
                raise RuntimeError("the test server did not start")
            time.sleep(0.005)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.socket.close()


@dataclass
class Api:
    """The running API, an admin client, and the platform behind it."""

    url: str
    platform: Platform
    admin_token: str
    http: httpx.Client
    _clients: list[httpx.Client] = field(default_factory=list)

    def client(self, token: str | None) -> httpx.Client:
        """Another client, with ``token`` (or none)."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        made = httpx.Client(base_url=self.url, headers=headers, timeout=30)
        self._clients.append(made)
        return made

    def client_with_role(self, role: TokenRole) -> httpx.Client:
        created = tokens.create_token(self.platform, role=role, name=f"{role}-user")
        return self.client(created.token)

    def apply(self, source: str) -> None:
        response = self.http.post("/api/v2/definitions", json={"source": source})
        assert response.status_code in (200, 201), response.text

    def trigger(self, name: str, **body: object) -> str:
        response = self.http.post(f"/api/v2/definitions/{name}/runs", json=body)
        assert response.status_code in (200, 202), response.text
        run_id = response.json()["run_id"]
        assert isinstance(run_id, str)
        return run_id

    def run(self, run_id: str) -> dict[str, Any]:
        """The run as the API shows it (test code reads its JSON freely)."""
        response = self.http.get(f"/api/v2/runs/{run_id}")
        assert response.status_code == 200, response.text
        found: dict[str, Any] = response.json()
        return found

    def instance_ids(self, run_id: str) -> dict[str, str]:
        """Task key -> instance id."""
        return {str(i["task"]): str(i["id"]) for i in self.run(run_id)["instances"]}

    def close(self) -> None:
        for made in self._clients:
            made.close()
        self.http.close()


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    """One server for the session: each test points it at its own database (``api``).

    The application keeps no state but its platform, so swapping ``app.state.platform``
    between tests gives each a fresh API without the cost of starting a server.
    """
    home = tmp_path_factory.mktemp("server")
    placeholder = Platform.open("sqlite://", home)
    app = create_app(ApiSettings("sqlite://", home, max_body_bytes=MAX_BODY), platform=placeholder)
    with ServerThread(app) as running:
        yield running
    placeholder.close()


@pytest.fixture
def api(server: ServerThread, database_url: str, tmp_path: Path) -> Iterator[Api]:
    home = tmp_path / "home"
    home.mkdir()
    platform = Platform.open(database_url, home)
    admin = tokens.create_token(platform, role=TokenRole.ADMIN, name="admin").token
    server.app.state.platform = platform
    http = httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {admin}"}, timeout=30
    )
    found = Api(server.url, platform, admin, http)
    try:
        yield found
    finally:
        found.close()
        platform.close()


# -- the scheduler's part, by hand ----------------------------------------------------------


def now() -> datetime:
    return datetime.now(UTC)


def new_id() -> str:
    return str(uuid.uuid4())


def open_attempt(
    platform: Platform, instance_id: str, token: str, *, executor: str = "test"
) -> int:
    """Open the instance's next attempt with ``token`` and acknowledge it; its number."""
    loaded = platform.ledger.snapshot(instance_id)
    assert loaded is not None
    snapshot, _ = loaded
    opened = decide.open_attempt(
        snapshot, token_hash=judge.hash_token(token), now=now(), event_id=new_id()
    )
    assert opened is not None, snapshot.state
    assert platform.ledger.apply(opened).outcome is judge.Outcome.APPLIED
    acknowledged = Event(
        new_id(),
        instance_id,
        opened.attempt_no,
        EventKind.SUBMIT_ACKNOWLEDGED,
        "executor",
        now(),
        {"external_id": f"{executor}:{instance_id}/{opened.attempt_no}", "executor": executor},
    )
    assert platform.ledger.apply(acknowledged).outcome is judge.Outcome.APPLIED
    return opened.attempt_no


def end_run(
    platform: Platform,
    run_id: str,
    state: RunExecutionState,
    reason: str,
    *,
    at: datetime | None = None,
) -> None:
    """Record the run's execution state as the scheduler would when it ends the run (a
    test's shortcut past the scheduler's own settle)."""
    with platform.engine.begin() as connection:
        version, previous = run_store.run_version(connection, run_id)
        run_store.set_execution_state(
            connection,
            run_id=run_id,
            expected_version=version,
            state=state,
            reason=reason,
            previous=previous,
            actor="scheduler",
            event_id=str(uuid.uuid4()),
            now=platform.now() if at is None else at,
            evidence={"by": "the test"},
        )


def hello_attempt(api: Api) -> tuple[str, int, str]:
    """A fresh run of HELLO with its instance's attempt 1 open and acknowledged:
    (instance, attempt, token)."""
    api.apply(HELLO)
    instance_id = api.instance_ids(api.trigger("hello"))["greet"]
    token = "token-" + uuid.uuid4().hex
    return instance_id, open_attempt(api.platform, instance_id, token), token


def worker_event(
    instance_id: str,
    attempt_no: int,
    token: str,
    seq: int,
    kind: wire.WorkerEventKind = "heartbeat",
    evidence: JSONObject | None = None,
) -> JSONObject:
    """A worker's report as the HTTP transport sends it."""
    event: JSONObject = {
        "event_id": new_id(),
        "instance_id": instance_id,
        "attempt_no": attempt_no,
        "kind": kind,
        "actor": "worker",
        "event_time": wire.format_time(now()),
        "seq": seq,
        "attempt_token": token,
        "evidence": evidence if evidence is not None else {},
    }
    return event


def started(instance_id: str, attempt_no: int, token: str, seq: int = 1) -> JSONObject:
    return worker_event(
        instance_id,
        attempt_no,
        token,
        seq,
        "started",
        {"worker": "test:1", "host": "test", "pid": 1, "pid_start_time": 1, "pgid": 1},
    )


def completed(
    instance_id: str,
    attempt_no: int,
    token: str,
    seq: int,
    *,
    exit_code: int = 0,
    log_path: str = "",
) -> JSONObject:
    return worker_event(
        instance_id,
        attempt_no,
        token,
        seq,
        "completed",
        {
            "exit_code": exit_code,
            "signal": None,
            "error_category": "none" if exit_code == 0 else "task_error",
            "commit_marker": None,
            "log_path": log_path,
            "output": None,
        },
    )


def report(api: Api, event: JSONObject, token: str) -> httpx.Response:
    """POST a worker event with ``token`` in the Authorization header."""
    return api.client(token).post("/api/v2/callbacks/events", json=event)
