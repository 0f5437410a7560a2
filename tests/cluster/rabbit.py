"""A private RabbitMQ node that a test may stop and start: the shared one is never touched.

The node has its own name, ports (AMQP and Erlang distribution), data and log directories and
cookie under the test's tmp directory, no plugins, and listens on loopback only. It is started
with RabbitMQ's own scripts (``/usr/lib/rabbitmq/bin``), as the current user, so that other
tests on the shared node (``127.0.0.1:5672``) never see it go away.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

RABBITMQ_BIN = Path(os.environ.get("VERITASK_TEST_RABBITMQ_BIN", "/usr/lib/rabbitmq/bin"))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def require_private_rabbit() -> None:
    """Skip (or fail, when required) unless RabbitMQ's scripts are installed here."""
    if (RABBITMQ_BIN / "rabbitmq-server").exists():
        return
    message = f"no RabbitMQ server scripts in {RABBITMQ_BIN} to start a private node"
    if os.environ.get("VERITASK_REQUIRE_SERVICES") == "1":
        pytest.fail(f"VERITASK_REQUIRE_SERVICES=1 and {message}", pytrace=False)
    pytest.skip(message)


@dataclass
class PrivateRabbit:
    directory: Path
    node: str = field(default_factory=lambda: f"vt{secrets.token_hex(4)}@localhost")
    port: int = field(default_factory=free_port)
    dist_port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}//"

    def env(self) -> dict[str, str]:
        self.directory.mkdir(parents=True, exist_ok=True)
        for empty in ("rabbitmq-env.conf", "enabled_plugins", "rabbitmq.conf"):
            (self.directory / empty).touch()
        env = dict(os.environ)
        env.update(
            HOME=str(self.directory),  # the Erlang cookie of this node and its rabbitmqctl
            RABBITMQ_NODENAME=self.node,
            RABBITMQ_NODE_IP_ADDRESS="127.0.0.1",
            RABBITMQ_NODE_PORT=str(self.port),
            RABBITMQ_DIST_PORT=str(self.dist_port),
            RABBITMQ_MNESIA_BASE=str(self.directory / "mnesia"),
            RABBITMQ_LOG_BASE=str(self.directory / "log"),
            RABBITMQ_ENABLED_PLUGINS_FILE=str(self.directory / "enabled_plugins"),
            RABBITMQ_CONF_ENV_FILE=str(self.directory / "rabbitmq-env.conf"),
            RABBITMQ_CONFIG_FILE=str(self.directory / "rabbitmq"),
            RABBITMQ_PID_FILE=str(self.directory / "pid"),
            ERL_EPMD_ADDRESS="127.0.0.1",
            RABBITMQ_SERVER_START_ARGS="-kernel inet_dist_use_interface {127,0,0,1}",
        )
        return env

    def start(self, *, timeout: float = 60) -> None:
        """Start the node (again: its durable queues and messages are kept on disk)."""
        env = self.env()
        with open(self.directory / "server.log", "ab") as output:
            self.process = subprocess.Popen(
                [str(RABBITMQ_BIN / "rabbitmq-server")],
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=output,
                env=env,
                start_new_session=True,
            )
        give_up_at = time.monotonic() + timeout
        while not self.listening():
            if self.process.poll() is not None or time.monotonic() > give_up_at:
                log = (self.directory / "server.log").read_text()[-3000:]
                pytest.fail(f"the private RabbitMQ node did not start:\n{log}", pytrace=False)
            time.sleep(0.2)

    def listening(self) -> bool:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 1):
            return True
        return False

    def stop(self) -> None:
        """Stop the node the way an operator does (``rabbitmqctl stop``): a broker restart."""
        subprocess.run(
            [str(RABBITMQ_BIN / "rabbitmqctl"), "-n", self.node, "stop"],
            env=self.env(),
            check=True,
            capture_output=True,
            timeout=60,
        )
        if self.process is not None:
            self.process.wait(timeout=60)
            self.process = None

    def kill(self) -> None:
        """At the end of the test, whatever state the node is in."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)
        self.process = None
