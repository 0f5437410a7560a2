"""The real ``veritask`` command against a real ``veritask up``, in subprocesses.

``up`` runs in a temporary VERITASK_HOME on a free port (``--port 0``; it writes the URL it
got into the home, as it always does), with a folder of definitions of our own as its
examples. Every CLI call is ``python -m veritask.cli.main`` in a fresh process whose only
configuration is VERITASK_HOME, as on a user's machine. Nothing sleeps to wait: ``eventually``
polls with a deadline.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from veritask.execution import local

DEADLINE = 30.0
T = TypeVar("T")

DEFINITIONS = {
    "hello.yaml": """\
name: greeting
tasks:
  greet:
    run: echo "hello from the acceptance test"
""",
    "failing.yaml": """\
name: failing
tasks:
  break:
    run: echo "about to fail" && exit 3
""",
    "sleepy.yaml": """\
name: sleepy
tasks:
  nap:
    run: sleep 30
""",
    "broken.yaml": "name: broken\ntasks: [\n",
}


def eventually(condition: Callable[[], T | None], *, what: str, timeout: float = DEADLINE) -> T:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout``."""
    give_up = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > give_up:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.1)


def environment(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a user who has only VERITASK_HOME set."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("VERITASK_") or key in ("VERITASK_SECRET", "VERITASK_TASK_USER")
    }
    env["VERITASK_HOME"] = str(home)
    env.update(extra)
    return env


@dataclass
class Veritask:
    """A running ``veritask up`` and a way to call the CLI beside it."""

    home: Path
    process: subprocess.Popen[str]
    log: Path

    @property
    def url(self) -> str:
        return (self.home / "url").read_text().strip()

    def cli(
        self, *args: str, timeout: float = DEADLINE, **env: str
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "veritask.cli.main", *args],
            env=environment(self.home, **env),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def cli_json(self, *args: str) -> Any:
        """A ``--json`` call that must succeed; its parsed output."""
        done = self.cli(*args, "--json")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def stop(self, timeout: float = DEADLINE) -> int:
        """Ctrl-C, as a person would; the exit code."""
        self.process.send_signal(signal.SIGINT)
        return self.process.wait(timeout)

    def output(self) -> str:
        return self.log.read_text()


def start_up(home: Path, examples: Path, log: Path, **extra: str) -> Veritask:
    """Start ``veritask up`` (``extra``: more of its environment) and wait until its API
    answers."""
    (home / "url").unlink(missing_ok=True)
    with log.open("a") as sink:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "veritask.cli.main",
                "up",
                "--port",
                "0",
                "--examples",
                str(examples),
            ],
            env=environment(home, **extra),
            stdout=sink,
            stderr=subprocess.STDOUT,
            text=True,
        )
    started = Veritask(home, process, log)

    def ready() -> bool:
        if process.poll() is not None:
            pytest.fail(f"veritask up exited with {process.returncode}:\n{log.read_text()}")
        if not (home / "url").exists():
            return False
        try:
            return httpx.get(started.url + "/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    eventually(ready, what="veritask up to answer")
    return started


def write_definitions(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in DEFINITIONS.items():
        (folder / name).write_text(text)
    return folder


def shut_down(veritask: Veritask) -> None:
    if veritask.process.poll() is None:
        veritask.stop()
    # The local executor's supervisor outlives `up` on purpose; tests do not leave it behind.
    local.LocalExecutor(home=veritask.home).shutdown_supervisor()


@pytest.fixture(scope="module")
def veritask(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Veritask]:
    root = tmp_path_factory.mktemp("acceptance")
    home = root / "home"
    started = start_up(home, write_definitions(root / "definitions"), root / "up.log")
    try:
        yield started
    finally:
        shut_down(started)
