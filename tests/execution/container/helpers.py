"""Specs and looks at the engine for the container engine's tests."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

from tests.execution.container.conftest import IMAGE
from veritask.core import jsontypes
from veritask.execution import port
from veritask.execution.container import client, engine


def spec(
    line: str,
    *,
    instance_id: str | None = None,
    grace: float = 1.0,
    memory: int | None = None,
    env: dict[str, str] | None = None,
) -> port.AttemptSpec:
    """Attempt 1 of a new instance whose task is the shell line ``line`` in the test image."""
    instance_id = instance_id or f"box-{uuid.uuid4().hex[:12]}"
    return port.AttemptSpec(
        instance_id=instance_id,
        attempt_no=1,
        attempt_token=f"token-{instance_id}",
        task=port.ContainerRun(
            image=IMAGE, command=("/bin/sh", "-c", line), memory=memory, pull=port.Pull.NEVER
        ),
        callback=port.HttpCallback("http://127.0.0.1:9"),
        grace_period=timedelta(seconds=grace),
        env=env or {},
    )


def containers_of(host: str, instance_id: str) -> list[jsontypes.JSONObject]:
    """Every container (running or not) labelled with the instance, as the engine lists them."""
    engine_client = client.Client(host)
    try:
        filters = json.dumps({"label": [f"{engine.LABEL_INSTANCE}={instance_id}"]})
        answer = engine_client.call(
            "GET", "/containers/json", params={"all": "1", "filters": filters}
        )
        found = answer.list()
    finally:
        engine_client.close()
    return [item for item in found if isinstance(item, dict)]


def inspect(host: str, spec: port.AttemptSpec) -> jsontypes.JSONObject | None:
    engine_client = client.Client(host)
    try:
        name = engine.container_name(spec.instance_id, spec.attempt_no)
        answer = engine_client.call("GET", f"/containers/{name}/json")
    finally:
        engine_client.close()
    return answer.json() if answer.status == 200 else None
