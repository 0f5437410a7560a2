"""The ``container`` engine's registration: each attempt one container of an engine that serves
the Docker Engine API (Docker or Podman) at ``VERITASK_CONTAINER_HOST`` (else where Docker
clients look: ``DOCKER_HOST``, else ``unix:///var/run/docker.sock``). Its client is httpx, one
of Veritask's own dependencies."""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Final

from veritask.core import problems
from veritask.execution import port

if TYPE_CHECKING:
    from veritask.execution.container import engine as engine_module

NAME: Final = "container"
#: Where the logs of removed containers are kept (``<dir>/<container name>.log``).
LOG_DIR_ENV: Final = "VERITASK_CONTAINER_LOG_DIR"
#: The host directories (comma-separated) under which a task's ``volumes:`` may mount.
VOLUMES_ENV: Final = "VERITASK_CONTAINER_VOLUMES"
#: Where each attempt's ``secret_files`` are written on the scheduler's host (a tmpfs).
SECRET_DIR_ENV: Final = "VERITASK_CONTAINER_SECRET_DIR"
DEFAULT_SECRET_DIR: Final = "/dev/shm/veritask-secrets"


class Source(StrEnum):
    """Where the container engine's observations come from."""

    INSPECT = "container_inspect"
    """The engine's inspection of the attempt's container (state, exit code, times)."""
    LIST = "container_list"
    """The engine's list of the containers with Veritask's labels (an attempt it still runs
    that the ledger no longer follows)."""


def allowed_volumes(environ: Mapping[str, str]) -> tuple[str, ...]:
    """The host directories ``VERITASK_CONTAINER_VOLUMES`` lists, normalised; relative ones
    are dropped (a mount's host path is absolute)."""
    listed = (part.strip() for part in environ.get(VOLUMES_ENV, "").split(","))
    return tuple(posixpath.normpath(part) for part in listed if part.startswith("/"))


def under(path: str, allowed: tuple[str, ...]) -> bool:
    """Whether ``path`` (absolute, normalised) is one of ``allowed`` or inside one."""
    return any(path == top or path.startswith(top.rstrip("/") + "/") for top in allowed)


def volume_problem(host_path: str, environ: Mapping[str, str]) -> str | None:
    """Why a container task may not mount ``host_path`` here, or None when it may."""
    allowed = allowed_volumes(environ)
    if not allowed:
        return problems.NO_VOLUMES_ALLOWED.format(setting=VOLUMES_ENV)
    if under(posixpath.normpath(host_path), allowed):
        return None
    return problems.VOLUME_NOT_ALLOWED.format(
        host=host_path, setting=VOLUMES_ENV, allowed=", ".join(allowed)
    )


def _configured(environ: Mapping[str, str]) -> bool:
    from veritask.execution.container import client

    return client.configured(environ)


def _executor(environ: Mapping[str, str]) -> engine_module.ContainerExecutor:
    from veritask.execution.container import client, engine

    log_dir = environ.get(LOG_DIR_ENV)
    return engine.ContainerExecutor(
        host=client.host_from_environment(environ),
        log_dir=Path(log_dir) if log_dir else None,
        allowed_volumes=allowed_volumes(environ),
        secret_dir=Path(environ.get(SECRET_DIR_ENV) or DEFAULT_SECRET_DIR),
    )


def _build(environ: Mapping[str, str]) -> port.Executor:
    return _executor(environ)


def _logs(environ: Mapping[str, str]) -> port.LogReading | None:
    from veritask.execution.container import client

    if not client.configured(environ):
        return None
    kept = dict(environ)
    return port.LogReaderPerRead(lambda: _executor(kept))


ENGINE = port.Engine(
    name=NAME,
    description="one container per attempt, run by Docker or Podman (Docker Engine API)",
    setting="VERITASK_CONTAINER_HOST",
    configured=_configured,
    build=_build,
    sources=frozenset(Source),
    logs=_logs,
)
