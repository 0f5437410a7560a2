"""The ``celery`` engine's registration: light, it imports neither Celery nor Redis.

Celery and its Redis client are the ``celery`` extra (``pip install 'veritask[celery]'``):
``build`` and ``logs`` import them only when a scheduler or a log reader needs them.
"""

from __future__ import annotations

from collections.abc import Mapping

from veritask.execution import port
from veritask.execution.celery import settings

NAME = "celery"
INSTALL = "pip install 'veritask[celery]'"
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
    sources=frozenset(
        {
            port.ObservationSource.CELERY_RESULT,
            port.ObservationSource.CELERY_INSPECT,
            port.ObservationSource.CELERY_CLAIM,
            port.ObservationSource.CELERY_CONTROL,
            port.ObservationSource.CELERY_SUBMISSION,
        }
    ),
    logs=_logs,
    packages=("celery", "redis"),
    install=INSTALL,
)
