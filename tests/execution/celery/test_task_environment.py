"""On a Celery host the task's environment is built by the same worker program: the host's
platform settings stay out, its pass-through and its own secrets go in, masked in the log
shipped to Redis."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.execution.celery.conftest import Hosts
from tests.execution.celery.test_celery_executor import observe, spec
from veritask.execution import port, transports

pytestmark = [pytest.mark.slow]
MakeHosts = Callable[..., Hosts]
SECRET_VALUE = "celery-host-secret-42"


def test_a_celery_task_gets_the_hosts_secret_masked_and_none_of_its_settings(
    make_hosts: MakeHosts, tmp_path: Path
) -> None:
    hosts = make_hosts()
    hosts.start(
        "host-a",
        env={
            "VERITASK_SECRET_WAREHOUSE_PASSWORD": SECRET_VALUE,
            "VERITASK_SQL_URL_WAREHOUSE": "postgresql://etl:sql-password@wh/dw",
            "VERITASK_TASK_ENV_PASSTHROUGH": "TOOL_HOME",
            "TOOL_HOME": "/opt/tool",
        },
    )
    executor = hosts.executor()
    command = (
        'echo "pw=$PGPASSWORD tool=$TOOL_HOME broker=$VERITASK_CELERY_BROKER'
        ' sql=$VERITASK_SQL_URL_WAREHOUSE"'
    )
    attempt = dataclasses.replace(
        spec(command, tmp_path / "outbox"), secret_env={"PGPASSWORD": "warehouse_password"}
    )

    submitted = executor.submit(spec=attempt)
    seen = observe(executor, submitted.external_id, port.EngineState.SUCCEEDED)

    assert seen.error_category is port.ErrorCategory.NONE
    shipped = executor.read_log(external_id=submitted.external_id)
    assert shipped == b"pw=*** tool=/opt/tool broker= sql=\n"
    events = transports.drain_outbox(tmp_path / "outbox")
    assert SECRET_VALUE not in repr(events)
