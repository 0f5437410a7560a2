"""The ``celery`` engine's registration: light, it imports neither Celery nor Redis.

Celery and its Redis client are the ``celery`` extra (``pip install 'veritask[celery]'``):
``build`` and ``logs`` import them only when a scheduler or a log reader needs them.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

from veritask.execution import port
from veritask.execution.celery import settings

NAME = "celery"
INSTALL = "pip install 'veritask[celery]'"


class Source(StrEnum):
    """Where the Celery executor's observations come from."""

    RESULT = "celery_result"
    """The Celery result backend: the outcome a Celery task returned (the worker's exit
    record)."""
    INSPECT = "celery_inspect"
    """Celery's ``inspect`` broadcast: the task is active, reserved or scheduled on a worker."""
    CLAIM = "celery_claim"
    """The per-attempt claim and lease that a Veritask Celery worker keeps while it runs it."""
    CONTROL = "celery_control"
    """A Veritask Celery worker's main process, asked by remote control about the task's
    process group on its host (the process running the delivery may be frozen)."""
    SUBMISSION = "celery_submission"
    """The executor's own record that it sent the attempt to the broker (queued, not taken)."""


#: The packages the extra brings (Celery's own transport packages among them).
CLIENT_PACKAGES = ("celery", "kombu", "amqp", "redis")


def _configured(environ: Mapping[str, str]) -> bool:
    return bool(environ.get(settings.BROKER_ENV))


def _build(environ: Mapping[str, str]) -> port.Executor:
    configured = settings.CelerySettings.from_environment(environ)
    if configured is None:
        raise ValueError(f"{settings.BROKER_ENV} is not set")
    from veritask.execution.celery import executor

    return executor.CeleryExecutor(configured)


class ShippedLogs:
    """The logs Veritask Celery workers shipped to the result backend."""

    def __init__(self, configured: settings.CelerySettings) -> None:
        self.settings = configured

    def read_log(self, *, instance_id: str, attempt_no: int) -> bytes | None:
        from veritask.execution.celery import claims  # the Redis client, only when asked

        store = claims.Claims.connect(self.settings.backend_url, retention=self.settings.retention)
        try:
            return store.read_log(claims.attempt_key(instance_id, attempt_no))
        finally:
            store.close()


def _logs(environ: Mapping[str, str]) -> port.LogReading | None:
    configured = settings.CelerySettings.from_environment(environ)
    return None if configured is None else ShippedLogs(configured)


ENGINE = port.Engine(
    name=NAME,
    description="Veritask Celery workers on other hosts, through a broker and a Redis backend",
    setting=settings.BROKER_ENV,
    configured=_configured,
    build=_build,
    sources=frozenset(Source),
    logs=_logs,
    packages=("celery", "redis"),
    install=INSTALL,
)
