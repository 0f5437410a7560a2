"""The ``container`` engine's registration: each attempt one container of an engine that serves
the Docker Engine API (Docker or Podman) at ``VERITASK_CONTAINER_HOST`` (else where Docker
clients look: ``DOCKER_HOST``, else ``unix:///var/run/docker.sock``). Its client is httpx, one
of Veritask's own dependencies."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Final

from veritask.execution import port

if TYPE_CHECKING:
    from veritask.execution.container import engine as engine_module

NAME: Final = "container"
#: Where the logs of removed containers are kept (``<dir>/<container name>.log``).
LOG_DIR_ENV: Final = "VERITASK_CONTAINER_LOG_DIR"


class Source(StrEnum):
    """Where the container engine's observations come from."""

    INSPECT = "container_inspect"
    """The engine's inspection of the attempt's container (state, exit code, times)."""


def _configured(environ: Mapping[str, str]) -> bool:
    from veritask.execution.container import client

    return client.configured(environ)


def _executor(environ: Mapping[str, str]) -> engine_module.ContainerExecutor:
    from veritask.execution.container import client, engine

    log_dir = environ.get(LOG_DIR_ENV)
    return engine.ContainerExecutor(
        host=client.host_from_environment(environ),
        log_dir=Path(log_dir) if log_dir else None,
    )


def _build(environ: Mapping[str, str]) -> port.Executor:
    return _executor(environ)


class _LogReader:
    """Reads a container's log on a connection of its own, closed after each read (the API
    server reads a log now and then; it keeps no connection to the engine open)."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.environ = dict(environ)

    def read_log(self, *, instance_id: str, attempt_no: int) -> bytes | None:
        executor = _executor(self.environ)
        try:
            return executor.read_log(instance_id=instance_id, attempt_no=attempt_no)
        finally:
            executor.close()


def _logs(environ: Mapping[str, str]) -> port.LogReading | None:
    from veritask.execution.container import client

    return _LogReader(environ) if client.configured(environ) else None


ENGINE = port.Engine(
    name=NAME,
    description="one container per attempt, run by Docker or Podman (Docker Engine API)",
    setting="VERITASK_CONTAINER_HOST",
    configured=_configured,
    build=_build,
    sources=frozenset(Source),
    logs=_logs,
)
