"""The ``spark`` engine's registration: each attempt one driver of a Spark standalone master
whose REST submission server is at ``VERITASK_SPARK_MASTER`` (``http://host:6066``). Its client
is httpx, one of Veritask's own dependencies."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Final

from veritask.execution import port

if TYPE_CHECKING:
    from veritask.execution.spark import engine as engine_module

NAME: Final = "spark"
#: The worker's work directory as the scheduler's host sees it (``<dir>/<driver id>/stdout``):
#: the drivers' logs, and the launch commands that name them.
WORK_DIR_ENV: Final = "VERITASK_SPARK_WORK_DIR"
#: Where the executor keeps its journal of submissions and the logs of cleaned-up drivers.
STATE_DIR_ENV: Final = "VERITASK_SPARK_STATE_DIR"
#: The Python the drivers of Python applications run (it must import pyspark).
PYTHON_ENV: Final = "VERITASK_SPARK_PYTHON"
DEFAULT_STATE_DIR: Final = "~/.veritask/spark"
#: The folder a task's relative ``app``/``jar`` is found in (the workers read it there too).
APPS_ENV: Final = "VERITASK_SPARK_APPS"


class Source(StrEnum):
    """Where the Spark engine's observations come from."""

    STATUS = "spark_driver_status"
    """The master's status of the attempt's driver (``/v1/submissions/status``)."""


def _configured(environ: Mapping[str, str]) -> bool:
    from veritask.execution.spark import client

    return client.configured(environ)


def _executor(environ: Mapping[str, str]) -> engine_module.SparkExecutor:
    from veritask.execution.spark import client, engine

    master = environ[client.MASTER_ENV]
    work_dir = environ.get(WORK_DIR_ENV)
    apps = environ.get(APPS_ENV)
    return engine.SparkExecutor(
        master=master,
        ui=client.ui_from_environment(environ, master),
        state_dir=Path(environ.get(STATE_DIR_ENV) or DEFAULT_STATE_DIR).expanduser(),
        work_dir=Path(work_dir) if work_dir else None,
        python=environ.get(PYTHON_ENV) or None,
        apps=Path(apps).resolve() if apps else None,
    )


def _build(environ: Mapping[str, str]) -> port.Executor:
    return _executor(environ)


def _logs(environ: Mapping[str, str]) -> port.LogReading | None:
    from veritask.execution.spark import client

    if not client.configured(environ):
        return None
    kept = dict(environ)
    return port.LogReaderPerRead(lambda: _executor(kept))


ENGINE = port.Engine(
    name=NAME,
    description="one driver per attempt, run by a Spark standalone master (REST submission)",
    setting="VERITASK_SPARK_MASTER",
    configured=_configured,
    build=_build,
    sources=frozenset(Source),
    logs=_logs,
)
