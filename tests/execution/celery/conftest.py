"""RabbitMQ, Redis and Veritask Celery worker processes ("hosts") for the Celery tests.

RabbitMQ (``VERITASK_TEST_AMQP_URL``, default ``amqp://guest:guest@127.0.0.1:5672//``) and
Redis (``VERITASK_TEST_REDIS_URL``, default ``redis://127.0.0.1:6379/11``) must be running;
when either is not, the tests skip, unless ``VERITASK_REQUIRE_SERVICES=1``: then they fail.
Each test uses a queue of its own, so workers of other tests never take its messages.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import pytest

from tests.scheduling.harness import REPO_ROOT, wait_for
from veritask.execution.celery import app as celery_app
from veritask.execution.celery import claims
from veritask.execution.celery import executor as celery_executor
from veritask.execution.celery.settings import CelerySettings

AMQP_URL = os.environ.get("VERITASK_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")
REDIS_URL = os.environ.get("VERITASK_TEST_REDIS_URL", "redis://127.0.0.1:6379/11")
#: Short, so that a dead host's lease lapses within the tests' patience.
LEASE_SECONDS = 3.0


RABBITMQCTL = shutil.which("rabbitmqctl") or "/usr/sbin/rabbitmqctl"


@contextlib.contextmanager
def queue_that_refuses() -> Iterator[str]:
    """The name of a queue the broker takes nothing into (RabbitMQ's ``reject-publish``
    overflow at length 0, by policy): every message published to it is answered with a
    ``basic.nack``. The policy goes when the block ends."""
    queue = f"veritask-full-{secrets.token_hex(4)}"
    policy = f"veritask-test-{queue}"
    definition = '{"max-length": 0, "overflow": "reject-publish"}'
    command = [RABBITMQCTL, "set_policy", "--apply-to", "queues", policy, f"^{queue}$"]
    subprocess.run([*command, definition], check=True, capture_output=True, timeout=60)
    try:
        yield queue
    finally:
        subprocess.run(
            [RABBITMQCTL, "clear_policy", policy], check=False, capture_output=True, timeout=60
        )


def _reachable(url: str, default_port: int) -> str | None:
    parsed = urlparse(url)
    try:
        with socket.create_connection(
            (parsed.hostname or "127.0.0.1", parsed.port or default_port), 2
        ):
            return None
    except OSError as exc:
        return f"{url} is unreachable: {exc}"


def require_celery_services() -> None:
    """Skip (or fail, when required) unless RabbitMQ and Redis answer."""
    problems = [p for p in (_reachable(AMQP_URL, 5672), _reachable(REDIS_URL, 6379)) if p]
    if problems:
        message = "; ".join(problems)
        if os.environ.get("VERITASK_REQUIRE_SERVICES") == "1":
            pytest.fail(f"VERITASK_REQUIRE_SERVICES=1 and {message}", pytrace=False)
        pytest.skip(message)


@pytest.fixture(scope="session")
def celery_services() -> None:
    require_celery_services()


def kill_tree(pid: int) -> None:
    """SIGKILL a process and every descendant: a host that vanished with all it ran."""
    doomed = {pid}
    changed = True
    while changed:
        changed = False
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) in doomed:
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parent = int(stat.rpartition(")")[2].split()[1])
            if parent in doomed:
                doomed.add(int(entry.name))
                changed = True
    for victim in doomed:
        with contextlib.suppress(ProcessLookupError):
            os.kill(victim, signal.SIGKILL)


def kill_session(pid: int) -> None:
    """SIGKILL every process in ``pid``'s session, until none is left: a host that vanished.

    By session rather than by parentage: once the Celery worker is dead its children are
    re-parented, but they keep its session (the Veritask worker and the task make process
    groups of their own, never sessions).
    """
    session = os.getsid(pid)
    while True:
        members = [
            int(entry.name)
            for entry in Path("/proc").iterdir()
            if entry.name.isdigit() and _session_of(int(entry.name)) == session
        ]
        if not members:
            return
        for member in members:
            with contextlib.suppress(ProcessLookupError):
                os.kill(member, signal.SIGKILL)


def _session_of(pid: int) -> int | None:
    try:
        stat = (Path("/proc") / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()
    if fields[0] in ("Z", "X"):  # a zombie is already dead; its parent reaps it
        return None
    return int(fields[3])


@dataclass
class Hosts:
    """Veritask Celery worker processes, each with its own home and hostname."""

    tmp_path: Path
    queue: str
    broker_url: str = AMQP_URL
    backend_url: str = REDIS_URL
    extra_env: dict[str, str] = field(default_factory=dict)
    started: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    executors: list[celery_executor.CeleryExecutor] = field(default_factory=list)

    @property
    def settings(self) -> CelerySettings:
        env = {**self.env(), "VERITASK_CELERY_QUEUE": self.queue}
        found = CelerySettings.from_environment(env)
        assert found is not None
        return found

    def claims(self) -> claims.Claims:
        """The claims, leases and refusals these hosts keep in Redis."""
        return claims.Claims.connect(self.backend_url, retention=self.settings.retention)

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            VERITASK_CELERY_BROKER=self.broker_url,
            VERITASK_CELERY_BACKEND=self.backend_url,
            VERITASK_CELERY_LEASE_SECONDS=str(LEASE_SECONDS),
            PYTHONPATH=os.pathsep.join([str(REPO_ROOT / "src"), str(REPO_ROOT)]),
        )
        env.update(self.extra_env)
        return env

    def start(self, name: str, *, concurrency: int = 2, env: dict[str, str] | None = None) -> str:
        """Start the worker ``name`` (``env``: this host's own additions); returns its Celery
        hostname once it answers a ping."""
        hostname = f"{name}-{secrets.token_hex(3)}@veritask-test"
        home = self.tmp_path / name
        home.mkdir(exist_ok=True)
        with open(self.tmp_path / f"{name}.log", "ab") as output:
            self.started[hostname] = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "veritask.execution.celery",
                    f"--queues={self.queue}",
                    f"--concurrency={concurrency}",
                    f"--home={home}",
                    f"--hostname={hostname}",
                    "--loglevel=WARNING",
                ],
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=output,
                env={**self.env(), **(env or {})},
                start_new_session=True,
            )
        app = celery_app.make_app(self.settings)
        try:
            wait_for(
                lambda: app.control.ping(destination=[hostname], timeout=0.5),
                what=f"worker {hostname} to answer",
                timeout=60,
                interval=0.2,
            )
        finally:
            app.close()
        return hostname

    def executor(self) -> celery_executor.CeleryExecutor:
        """An executor sending to these hosts' queue; closed with the hosts."""
        executor = celery_executor.CeleryExecutor(self.settings)
        self.executors.append(executor)
        return executor

    def kill(self, hostname: str) -> None:
        kill_tree(self.started[hostname].pid)
        self.started[hostname].wait(timeout=10)

    def stop_all(self) -> None:
        for executor in self.executors:
            executor.close()
        for process in self.started.values():
            if process.poll() is None:
                kill_tree(process.pid)
            process.wait(timeout=10)


@pytest.fixture
def make_hosts(celery_services: None, tmp_path: Path) -> Iterator[Callable[..., Hosts]]:
    made: list[Hosts] = []

    def make(**overrides: str) -> Hosts:
        hosts = Hosts(tmp_path, queue=f"vt-test-{secrets.token_hex(4)}", **overrides)  # type: ignore[arg-type]
        made.append(hosts)
        return hosts

    yield make
    for hosts in made:
        hosts.stop_all()
