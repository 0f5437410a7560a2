"""Container tasks through a scheduler (in this process, ticked by the test) on a real Podman:
no worker runs in the container; a thread of the scheduler's process watches the engine and
reports for the attempt what ``describe`` says (``started``, ``heartbeat``, ``completed``)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from tests.execution.container.conftest import IMAGE
from tests.scheduling.harness import Harness
from veritask.core.states import InstanceState, RunExecutionState
from veritask.execution import port
from veritask.execution.container import engine
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
