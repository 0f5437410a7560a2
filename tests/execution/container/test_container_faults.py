"""Faults around container tasks, with the real ``veritask up`` (a subprocess on a SQLite
ledger in a temporary home) and a real Podman: the platform killed with SIGKILL, a container
frozen past its lease, a container killed or stopped by someone else, a cancel whose platform
died before it saw the stop end.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from tests.acceptance.conftest import Veritask, eventually, shut_down, start_up
from tests.execution.container import helpers
from tests.execution.container.conftest import IMAGE
from veritask.execution.container import engine
from veritask.ledger import dialects, schema

pytestmark = pytest.mark.slow

DEADLINE = 60.0


def definition(name: str, line: str, *, lease: str = "30s") -> str:
    return f"""\
name: {name}
tasks:
  box:
    image: {IMAGE}
    pull: never
    run: {line!r}
    lease: {lease}
    retry: {{max_retries: 0}}
"""


class Box:
    """``veritask up`` processes on one home, the definitions they load, and looks at Podman."""

    def __init__(self, root: Path, host: str) -> None:
        self.root = root
        self.host = host
        self.home = root / "home"
        self.definitions = root / "definitions"
        self.definitions.mkdir(parents=True)
        self.ups: list[Veritask] = []

    def up(self) -> Veritask:
        started = start_up(
            self.home,
            self.definitions,
            self.root / f"up{len(self.ups)}.log",
            VERITASK_CONTAINER_HOST=self.host,
        )
        self.ups.append(started)
        return started

    def kill(self, veritask: Veritask) -> None:
        veritask.process.kill()  # SIGKILL: nothing of `up` runs any more
        veritask.process.wait(timeout=10)

    def instance(self, veritask: Veritask, run_id: str) -> Any:
        return veritask.cli_json("show", run_id)["instances"][0]

    def state_is(self, veritask: Veritask, run_id: str, *states: str) -> Any:
        def seen() -> Any:
            found = self.instance(veritask, run_id)
            return found if found["state"] in states else None

        return eventually(seen, what=f"the instance to be {states}", timeout=DEADLINE)

    def container(self, instance_id: str) -> str:
        return engine.container_name(instance_id, 1)

    def inspected(self, instance_id: str) -> dict[str, Any]:
        found = subprocess.run(
            ["podman", "inspect", "--format", "json", self.container(instance_id)],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        import json

        [state] = json.loads(found.stdout)
        return dict(state["State"])

    def events(self, instance_id: str, kind: str) -> list[dict[str, Any]]:
        ledger = dialects.create_engine(f"sqlite:///{self.home / 'veritask.db'}")
        e = schema.events.c
        try:
            with dialects.read_transaction(ledger) as connection:
                rows = connection.execute(
                    sa.select(e.evidence, e.actor)
                    .where(e.instance_id == instance_id, e.kind == kind)
                    .order_by(e.position)
                ).all()
        finally:
            ledger.dispose()
        return [{"evidence": dict(row.evidence), "actor": row.actor} for row in rows]

    def close(self) -> None:
        for veritask in self.ups:
            if veritask.process.poll() is None:
                shut_down(veritask)


@pytest.fixture
def box(tmp_path: Path, container_host: str) -> Iterator[Box]:
    made = Box(tmp_path, container_host)
    try:
        yield made
    finally:
        made.close()


def _trigger(box: Box, veritask: Veritask, name: str) -> str:
    done = veritask.cli("trigger", name)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_container_outlives_a_killed_platform_and_finishes_once(box: Box) -> None:
    (box.definitions / "survivor.yaml").write_text(
        definition("survivor", "sleep 3; echo done once", lease="3s")
    )
    first = box.up()
    run_id = _trigger(box, first, "survivor")
    instance = box.state_is(first, run_id, "RUNNING")
    box.kill(first)
    assert box.inspected(instance["id"])["Running"] is True, "the container runs on alone"

    second = box.up()
    finished = box.state_is(second, run_id, "SUCCESS", "FAILED", "CANCELLED")

    assert finished["state"] == "SUCCESS"
    assert [a["state"] for a in finished["attempts"]] == ["SUCCESS"], "no retry, no twin"
    assert len(helpers.containers_of(box.host, instance["id"])) == 1
    logs = second.cli("logs", run_id)
    assert logs.stdout.count("done once") == 1
    # The second platform found the container by its name and labels and reported its end.
    [completed] = box.events(instance["id"], "completed")
    assert completed["evidence"]["engine"]["details"]["exit_code"] == 0


def test_a_paused_container_goes_lost_and_finishes_once_unpaused(box: Box) -> None:
    (box.definitions / "frozen.yaml").write_text(
        definition("frozen", "sleep 2; echo thawed", lease="2s")
    )
    veritask = box.up()
    run_id = _trigger(box, veritask, "frozen")
    instance = box.state_is(veritask, run_id, "RUNNING")
    name = box.container(instance["id"])
    subprocess.run(["podman", "pause", name], check=True, capture_output=True, timeout=30)
    try:
        # A frozen container is silent: its lease lapses, and the engine says it still runs.
        box.state_is(veritask, run_id, "LOST")
    finally:
        subprocess.run(["podman", "unpause", name], check=True, capture_output=True, timeout=30)

    finished = box.state_is(veritask, run_id, "SUCCESS", "FAILED", "CANCELLED")

    assert finished["state"] == "SUCCESS"
    assert [a["state"] for a in finished["attempts"]] == ["SUCCESS"], "LOST is not retried"
    assert len(helpers.containers_of(box.host, instance["id"])) == 1
    assert veritask.cli("logs", run_id).stdout.count("thawed") == 1


def test_a_container_killed_outside_veritask_fails_with_the_engines_evidence(box: Box) -> None:
    (box.definitions / "victim.yaml").write_text(definition("victim", "sleep 60"))
    veritask = box.up()
    run_id = _trigger(box, veritask, "victim")
    instance = box.state_is(veritask, run_id, "RUNNING")
    subprocess.run(
        ["podman", "kill", "--signal", "KILL", box.container(instance["id"])],
        check=True,
        capture_output=True,
        timeout=30,
    )

    finished = box.state_is(veritask, run_id, "FAILED", "SUCCESS", "CANCELLED")

    assert finished["state"] == "FAILED"
    engine_state = box.inspected(instance["id"])
    [completed] = box.events(instance["id"], "completed")
    evidence = completed["evidence"]
    assert evidence["signal"] == 9 and evidence["error_category"] == "killed"
    details = evidence["engine"]["details"]
    assert details["exit_code"] == engine_state["ExitCode"] == 137
    assert details["finished_at"].startswith(engine_state["FinishedAt"][:19].replace(" ", "T"))


def test_a_cancel_whose_platform_died_before_the_stop_ended_is_cancelled(box: Box) -> None:
    # The task takes 2 s to end after SIGTERM: the platform dies inside those 2 s.
    line = "trap 'sleep 2; exit 143' TERM; sleep 60 & wait"
    (box.definitions / "stopped.yaml").write_text(definition("stopped", line))
    first = box.up()
    run_id = _trigger(box, first, "stopped")
    instance = box.state_is(first, run_id, "RUNNING")
    assert first.cli("cancel", run_id).returncode == 0
    box.state_is(first, run_id, "CANCELLING")
    box.kill(first)

    second = box.up()
    finished = box.state_is(second, run_id, "CANCELLED", "FAILED", "SUCCESS")

    assert finished["state"] == "CANCELLED", "the ledger's stop request says whose stop it was"
    engine_state = box.inspected(instance["id"])
    assert engine_state["Running"] is False and engine_state["ExitCode"] == 143
    assert [a["state"] for a in finished["attempts"]] == ["CANCELLED"]
