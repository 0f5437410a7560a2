"""Container tasks through a scheduler (in this process, ticked by the test) on a real Podman:
no worker runs in the container; a thread of the scheduler's process watches the engine and
reports for the attempt what ``describe`` says (``started``, ``heartbeat``, ``completed``)."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from tests.execution.container.conftest import IMAGE
from tests.scheduling.harness import Harness, wait_for
from veritask.core import jsontypes
from veritask.core.states import InstanceState, RunExecutionState
from veritask.execution import port
from veritask.execution.container import client, engine
from veritask.ledger import dialects, schema

DEFINITION = f"""
name: boxes
tasks:
  ok:
    image: {IMAGE}
    pull: never
    run: echo hello from $VERITASK_TASK
  listed:
    image: {IMAGE}
    pull: never
    run: [/bin/sh, -c, 'test "$0" = "a b"', "a b"]
  broken:
    image: {IMAGE}
    pull: never
    run: exit 3
    retry: {{max_retries: 0}}
"""


@pytest.fixture
def boxes(database_url: str, tmp_path: Path, container_host: str) -> Iterator[Harness]:
    containers = engine.ContainerExecutor(host=container_host)
    made = Harness(database_url, tmp_path / "home", others={"container": containers})
    yield made
    made.close()
    containers.close()


def test_a_container_tasks_outcome_is_what_the_engine_says(boxes: Harness) -> None:
    boxes.apply(DEFINITION)
    run_id = boxes.trigger("boxes")

    state, _ = boxes.finish(run_id, timeout=60)

    instances = boxes.instances(run_id)
    assert state is RunExecutionState.FAILED
    assert instances["ok"].state is InstanceState.SUCCESS
    assert instances["listed"].state is InstanceState.SUCCESS
    assert instances["broken"].state is InstanceState.FAILED
    [(number, _, exit_code, external_id)] = boxes.attempts(instances["broken"].id)
    assert (number, exit_code) == (1, 3)
    assert external_id is not None and external_id.startswith(engine.EXTERNAL_ID_PREFIX)
    history = boxes.history(instances["broken"].id)
    assert [(r.kind, r.actor) for r in history if r.kind in ("started", "completed")] == [
        ("started", "worker"),
        ("completed", "worker"),
    ], "the watcher reports for the container, signed with the attempt's token"
    [completed] = _evidence(boxes, instances["broken"].id, "completed")
    assert completed["exit_code"] == 3 and completed["error_category"] == "task_error"
    details = completed["engine"]["details"]
    # Podman says "stopped" for a moment before "exited": both are the end.
    assert details["exit_code"] == 3 and details["status"] in ("exited", "stopped")
    started = datetime.fromisoformat(str(details["started_at"]))
    assert started <= datetime.fromisoformat(str(details["finished_at"]))
    [started_event] = _events(boxes, instances["broken"].id, "started")
    # The report's time is the engine's StartedAt, not the moment the watcher saw it.
    assert _aware(started_event["event_time"]) == started


def test_a_container_past_its_timeout_is_stopped_and_the_engine_confirms_it(
    boxes: Harness, container_host: str
) -> None:
    boxes.apply(
        f"""
name: slow
tasks:
  sleepy:
    image: {IMAGE}
    pull: never
    run: sleep 30
    timeout: 1s
    retry: {{max_retries: 0}}
"""
    )
    run_id = boxes.trigger("slow")

    state, _ = boxes.finish(run_id, timeout=60)

    sleepy = boxes.instances(run_id)["sleepy"]
    [(_, _, _, external_id)] = boxes.attempts(sleepy.id)
    assert state is RunExecutionState.FAILED
    assert sleepy.state is InstanceState.TIMEOUT
    assert external_id is not None
    seen = engine.ContainerExecutor(host=container_host)
    try:
        observation = seen.describe(external_id=external_id)
    finally:
        seen.close()
    assert observation.ended and observation.details["signal"] == 15  # SIGTERM
    assert observation.error_category is port.ErrorCategory.TIMEOUT
    # The watcher reported its start; the engine's word on the stop ends it. Whichever stops
    # it first, the executor's own timer or the scheduler's timeout (CANCELLING), it ends once.
    path = boxes.instance_states_path(sleepy.id)
    assert path in (
        ["CREATED", "SCHEDULED", "QUEUED", "RUNNING", "CANCELLING", "TIMEOUT"],
        ["CREATED", "SCHEDULED", "QUEUED", "RUNNING", "TIMEOUT"],
    )


class _Vault:
    def lookup(self, *, name: str) -> str | None:
        return "s3cr3t-value" if name == "db_password" else None

    def describe(self) -> str:
        return "a test vault"


def test_a_secret_file_reaches_the_task_and_no_event_holds_its_value(
    database_url: str, tmp_path: Path, container_host: str
) -> None:
    containers = engine.ContainerExecutor(
        host=container_host, secret_providers=[_Vault()], secret_dir=tmp_path / "secrets"
    )
    boxes = Harness(database_url, tmp_path / "home", others={"container": containers})
    try:
        boxes.apply(
            f"""
name: secretive
tasks:
  reads:
    image: {IMAGE}
    pull: never
    run: test "$(tr a-z A-Z < /run/secrets/pw)" = S3CR3T-VALUE
    secret_files: {{pw: db_password}}
    retry: {{max_retries: 0}}
"""
        )
        run_id = boxes.trigger("secretive")
        state, _ = boxes.finish(run_id, timeout=60)
        reads = boxes.instances(run_id)["reads"]
        evidence = [found["evidence"] for found in _all_events(boxes, reads.id)]
    finally:
        boxes.close()
        containers.close()

    assert state is RunExecutionState.SUCCESS
    assert reads.state is InstanceState.SUCCESS
    assert evidence and "s3cr3t-value" not in repr(evidence)


def _start(host: str, name: str, labels: dict[str, str]) -> None:
    """A running container of the test image with these labels, made as no executor would."""
    engine_client = client.Client(host)
    try:
        made = engine_client.call(
            "POST",
            "/containers/create",
            params={"name": name},
            body={
                "Image": IMAGE,
                "Cmd": ["sleep", "60"],
                "Labels": dict[str, jsontypes.JSONValue](labels),
                "HostConfig": {"Init": True},
                "StopTimeout": 1,
            },
        )
        assert made.status == 201, made.message
        assert engine_client.call("POST", f"/containers/{name}/start").status == 204
    finally:
        engine_client.close()


def _running(host: str, name: str) -> bool:
    engine_client = client.Client(host)
    try:
        found = engine_client.call("GET", f"/containers/{name}/json").json()
    finally:
        engine_client.close()
    state = found.get("State")
    return isinstance(state, dict) and state.get("Running") is True


def test_a_container_of_an_ended_attempt_is_stopped_and_another_platforms_is_left(
    boxes: Harness, container_host: str
) -> None:
    boxes.apply(DEFINITION)
    run_id = boxes.trigger("boxes")
    boxes.finish(run_id, timeout=60)
    ok = boxes.instances(run_id)["ok"]
    [opened] = _evidence(boxes, ok.id, "attempt_opened")
    suffix = uuid.uuid4().hex[:8]
    # A copy of attempt 1 that still runs after the ledger recorded its end (as a container
    # a lost scheduler started twice would), and one of another platform on the same engine.
    ours, theirs = f"veritask-stray-{suffix}", f"veritask-other-{suffix}"
    labelled = {engine.LABEL_ATTEMPT: "1", engine.LABEL_DEFINITION: "boxes"}
    _start(
        container_host,
        ours,
        {
            **labelled,
            engine.LABEL_INSTANCE: ok.id,
            engine.LABEL_TOKEN: opened["token_hash"],
            engine.LABEL_RUN: run_id,
        },
    )
    _start(
        container_host,
        theirs,
        {
            **labelled,
            engine.LABEL_INSTANCE: f"other-{suffix}",
            engine.LABEL_TOKEN: "0" * 64,
            engine.LABEL_RUN: str(uuid.uuid4()),
        },
    )
    try:
        boxes.scheduler.sweeper.reconcile(datetime.now(UTC), boxes.scheduler.context_for)
        wait_for(lambda: not _running(container_host, ours), what="the stray to stop", timeout=20)
        boxes.scheduler.sweeper.reconcile(datetime.now(UTC), boxes.scheduler.context_for)
        still = _running(container_host, theirs)
    finally:
        subprocess.run(["podman", "rm", "--force", ours, theirs], capture_output=True, timeout=60)

    assert still, "a container of another platform is left alone"
    [stopped] = [e for e in _evidence(boxes, ok.id, "engine_observed") if "stray" in e["details"]]
    assert stopped["engine_state"] == "running" and stopped["source"] == "container_list"
    assert stopped["details"]["stray"] == "ended" and stopped["details"]["container"] == ours
    assert boxes.instances(run_id)["ok"].state is InstanceState.SUCCESS


def _all_events(boxes: Harness, instance_id: str) -> list[dict[str, Any]]:
    e = schema.events.c
    with dialects.read_transaction(boxes.engine) as connection:
        rows = connection.execute(
            sa.select(e.evidence, e.event_time).where(e.instance_id == instance_id)
        ).all()
    return [{"evidence": dict(row.evidence), "event_time": row.event_time} for row in rows]


def _events(boxes: Harness, instance_id: str, kind: str) -> list[dict[str, Any]]:
    e = schema.events.c
    with dialects.read_transaction(boxes.engine) as connection:
        rows = connection.execute(
            sa.select(e.evidence, e.event_time)
            .where(e.instance_id == instance_id, e.kind == kind)
            .order_by(e.position)
        ).all()
    return [{"evidence": dict(row.evidence), "event_time": row.event_time} for row in rows]


def _evidence(boxes: Harness, instance_id: str, kind: str) -> list[dict[str, Any]]:
    return [found["evidence"] for found in _events(boxes, instance_id, kind)]


def _aware(moment: object) -> datetime:
    found = moment if isinstance(moment, datetime) else datetime.fromisoformat(str(moment))
    return found if found.tzinfo else found.replace(tzinfo=UTC)
