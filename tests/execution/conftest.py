"""Fixtures for the execution tests: a stand-in platform over real HTTP, real executors.

Everything here runs real processes. Nothing sleeps to wait for them: tests poll a condition
with a deadline (``wait_until``), so they are as fast as the processes allow.
"""

from __future__ import annotations

import contextlib
import functools
import json
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TypeVar

import pytest

from veritask.core import jsontypes
from veritask.execution import cgroups, layout, local, port, procfs, records

REPO_ROOT = Path(__file__).resolve().parents[2]
DEADLINE_SECONDS = 15.0
_T = TypeVar("_T")


def wait_until(
    condition: Callable[[], _T | None], *, timeout: float = DEADLINE_SECONDS, what: str = ""
) -> _T:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout`` seconds."""
    give_up_at = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= give_up_at:
            pytest.fail(f"timed out after {timeout}s waiting for {what or condition}")
        time.sleep(0.01)


def evidence(event: jsontypes.JSONObject) -> jsontypes.JSONObject:
    value = event["evidence"]
    assert isinstance(value, dict), event
    return value


@dataclass
class ReceivedEvent:
    event: jsontypes.JSONObject
    authorization: str | None


@dataclass
class FakePlatform:
    """The platform's callback endpoints over real HTTP, recording what it accepted.

    ``events_status`` switches the events endpoint to an error; ``stop`` and ``start`` take
    the server away and bring it back on the same port; ``stop_instances`` answer
    ``stop: true``; ``commit_status`` 409 fences every commit.
    """

    events: list[ReceivedEvent] = field(default_factory=list)
    commits: list[jsontypes.JSONObject] = field(default_factory=list)
    refused: int = 0
    events_status: int = 200
    commit_status: int = 200
    stop_instances: set[str] = field(default_factory=set)
    port: int = 0
    _server: ThreadingHTTPServer | None = None
    _connections: set[socket.socket] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        server = ThreadingHTTPServer(("127.0.0.1", self.port), _handler_for(self))
        server.daemon_threads = True
        server.block_on_close = False
        self.port = server.server_address[1]
        self._server = server
        threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()

    def stop(self) -> None:
        """Gone, as a dead process is: the port refuses, and open connections are cut."""
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        self._server = None
        with self._lock:
            for connection in self._connections:
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)
            self._connections.clear()

    def events_of(self, instance_id: str) -> list[jsontypes.JSONObject]:
        with self._lock:
            return [r.event for r in self.events if r.event.get("instance_id") == instance_id]

    def kinds_of(self, instance_id: str) -> list[str]:
        return [str(event["kind"]) for event in self.events_of(instance_id)]

    def completed_of(self, instance_id: str) -> jsontypes.JSONObject | None:
        for event in self.events_of(instance_id):
            if event["kind"] == "completed":
                return event
        return None

    def _track(self, connection: socket.socket, alive: bool) -> None:
        with self._lock:
            if alive:
                self._connections.add(connection)
            else:
                self._connections.discard(connection)


def _handler_for(platform: FakePlatform) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the worker's transport expects

        def setup(self) -> None:
            super().setup()
            platform._track(self.connection, alive=True)

        def handle(self) -> None:
            # A worker killed mid-request (as some tests do) is not the server's error.
            with contextlib.suppress(ConnectionResetError):
                super().handle()

        def finish(self) -> None:
            platform._track(self.connection, alive=False)
            with contextlib.suppress(OSError):
                super().finish()

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length))
            if self.path == "/api/v2/callbacks/events":
                self._on_event(body)
            elif self.path == "/api/v2/callbacks/commit":
                self._on_commit(body)
            else:
                self._answer(404, {"reason": "no such endpoint"})

        def _on_event(self, event: jsontypes.JSONObject) -> None:
            if platform.events_status != 200:
                with platform._lock:
                    platform.refused += 1
                self._answer(platform.events_status, {"reason": "not now"})
                return
            authorization = self.headers.get("Authorization")
            with platform._lock:
                platform.events.append(ReceivedEvent(event, authorization))
            stop = event.get("instance_id") in platform.stop_instances
            self._answer(200, {"outcome": "applied", "reason": "recorded", "stop": stop})

        def _on_commit(self, body: jsontypes.JSONObject) -> None:
            with platform._lock:
                platform.commits.append(body)
            if platform.commit_status == 409:
                self._answer(409, {"reason": "attempt 1 is fenced; attempt 2 is current"})
            else:
                self._answer(platform.commit_status, {"outcome": "applied"})

        def _answer(self, status: int, payload: jsontypes.JSONObject) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


@pytest.fixture
def platform() -> Iterator[FakePlatform]:
    fake = FakePlatform()
    fake.start()
    yield fake
    fake.stop()


def kill_leftovers(executor_home: layout.ExecutorHome) -> None:
    """Kill every worker and task process that the attempts under ``executor_home`` recorded,
    and remove the attempts' cgroups that a killed worker left."""
    for attempt_path in executor_home.attempts.glob("*/*"):
        cgroup = cgroups.locate(attempt_path)
        if cgroup is not None:
            cgroups.signal_all(cgroup, signal.SIGKILL)
            wait_until(functools.partial(cgroups.remove, cgroup), what=f"{cgroup} to be empty")
    for record_path in executor_home.attempts.glob("*/*/*.json"):
        if record_path.name not in ("worker.json", "task.json"):
            continue
        with contextlib.suppress(ValueError, OSError):
            process = records.read_process_record(record_path)
            if process is None:
                continue
            if process.pgid is not None and procfs.is_running(process.pid, process.start_ticks):
                procfs.signal_group(process.pgid, signal.SIGKILL)
            procfs.signal_process(process.pid, process.start_ticks, signal.SIGKILL)


@dataclass
class Engine:
    """An executor on a home of its own, with helpers to make specs and wait for the end."""

    executor: local.LocalExecutor
    platform: FakePlatform
    workspace: Path

    def spec(
        self,
        command: str = "true",
        *,
        task: port.TaskSpec | None = None,
        instance_id: str | None = None,
        callback: port.CallbackTarget | None = None,
        timeout: timedelta | None = None,
        grace_period: timedelta = timedelta(seconds=0.5),
        heartbeat_interval: timedelta = timedelta(seconds=5),
        log_cap_bytes: int = 10 * 1024 * 1024,
    ) -> port.AttemptSpec:
        """A spec with quick timings for tests."""
        return port.AttemptSpec(
            instance_id=instance_id or f"inst-{uuid.uuid4().hex[:12]}",
            attempt_no=1,
            attempt_token=f"token-{uuid.uuid4().hex}",
            task=task or port.ShellCommand(command),
            callback=callback or port.HttpCallback(self.platform.url, timeout=timedelta(seconds=2)),
            env={"PYTHONPATH": str(REPO_ROOT)},
            timeout=timeout,
            grace_period=grace_period,
            heartbeat_interval=heartbeat_interval,
            log_cap_bytes=log_cap_bytes,
            delivery_retry_max=timedelta(seconds=0.2),
            workdir=self.workspace,
        )

    def run(self, spec: port.AttemptSpec) -> port.Observation:
        """Submit and wait for the end, as the engine sees it."""
        submission = self.executor.submit(spec=spec)
        return self.wait_ended(submission.external_id)

    def wait_ended(self, external_id: str) -> port.Observation:
        def ended() -> port.Observation | None:
            observation = self.executor.describe(external_id=external_id)
            return observation if observation.ended else None

        return wait_until(ended, what=f"{external_id} to end")

    def wait_state(self, external_id: str, state: port.EngineState) -> port.Observation:
        def reached() -> port.Observation | None:
            observation = self.executor.describe(external_id=external_id)
            return observation if observation.engine_state is state else None

        return wait_until(reached, what=f"{external_id} to be {state}")

    def attempt(self, spec: port.AttemptSpec) -> layout.AttemptDir:
        return self.executor.home.attempt(spec.instance_id, spec.attempt_no)

    def wait_delivered(self, spec: port.AttemptSpec) -> jsontypes.JSONObject:
        return wait_until(
            lambda: self.platform.completed_of(spec.instance_id),
            what=f"the completed event of {spec.instance_id}",
        )


@contextlib.contextmanager
def engine_on(tmp_path: Path, platform: FakePlatform, *, slots: int) -> Iterator[Engine]:
    """An engine with a home under ``tmp_path``; its supervisor and processes end with it."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    executor = local.LocalExecutor(
        home=tmp_path / "home", slots=slots, idle_exit_after=timedelta(seconds=60)
    )
    try:
        yield Engine(executor, platform, workspace)
    finally:
        executor.shutdown_supervisor()
        kill_leftovers(executor.home)


@pytest.fixture
def engine(tmp_path: Path, platform: FakePlatform) -> Iterator[Engine]:
    with engine_on(tmp_path, platform, slots=4) as engine:
        yield engine
