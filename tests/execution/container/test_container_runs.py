"""Container tasks through a scheduler (in this process, ticked by the test) on a real Podman:
no report comes from the container, so the run's outcome is what ``describe`` said."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from tests.execution.container.conftest import IMAGE
from tests.scheduling.harness import Harness
from veritask.core.states import InstanceState, RunExecutionState
from veritask.execution import port
from veritask.execution.container import engine

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
    [details] = boxes.engine_details(instances["broken"].id, "engine_observed")
    assert details["exit_code"] == 3 and details["status"] == "exited"
    started = datetime.fromisoformat(str(details["started_at"]))
    assert started <= datetime.fromisoformat(str(details["finished_at"]))


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
    # No report comes from a container: the engine's word (engine_observed) ends it.
    assert boxes.instance_states_path(sleepy.id) == ["CREATED", "SCHEDULED", "QUEUED", "TIMEOUT"]
