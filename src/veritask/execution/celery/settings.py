"""The Celery executor's settings, shared by the scheduler's side and the workers' side."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

BROKER_ENV = "VERITASK_CELERY_BROKER"
BACKEND_ENV = "VERITASK_CELERY_BACKEND"
QUEUE_ENV = "VERITASK_CELERY_QUEUE"
CALLBACK_ENV = "VERITASK_CELERY_CALLBACK_URL"
LEASE_ENV = "VERITASK_CELERY_LEASE_SECONDS"
VISIBILITY_ENV = "VERITASK_CELERY_VISIBILITY_TIMEOUT_SECONDS"


@dataclass(frozen=True)
class CelerySettings:
    """Where the broker and the result backend are, and the executor's timings."""

    #: The broker, e.g. ``amqp://guest:guest@rabbit:5672//``.
    broker_url: str
    #: The result backend, a Redis URL: it also holds the claims, leases and logs.
    backend_url: str
    #: The queue of attempts whose task names none.
    default_queue: str = "veritask"
    #: The platform's API, where workers on other hosts send their events (None: keep the
    #: platform's own callback, which works only for workers on the scheduler's host).
    callback_url: str | None = None
    #: A worker refreshes its lease on a running attempt this often ...
    lease_refresh: timedelta = timedelta(seconds=1)
    #: ... and the lease lapses after this long without a refresh (a host that died).
    lease: timedelta = timedelta(seconds=10)
    #: How long ``describe`` waits for the workers' answers to ``inspect``.
    inspect_timeout: timedelta = timedelta(seconds=1)
    #: How long claims, refusals and logs are kept in Redis.
    retention: timedelta = timedelta(days=7)
    #: Brokers without acknowledgements of their own (Redis, SQS) deliver a message again
    #: when it was not acknowledged within this; None keeps the transport's default (1 h).
    visibility_timeout: timedelta | None = None

    def __post_init__(self) -> None:
        if not self.broker_url:
            raise ValueError(f"broker_url: set {BROKER_ENV}")
        if not self.backend_url.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError(
                f"backend_url: must be a Redis URL ({BACKEND_ENV}), not {self.backend_url!r}"
            )
        if self.lease <= self.lease_refresh * 2:
            raise ValueError("lease: must be more than twice lease_refresh")
        if self.callback_url is not None and not self.callback_url.startswith(
            ("http://", "https://")
        ):
            raise ValueError(f"callback_url: must be an http(s) URL, not {self.callback_url!r}")

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> CelerySettings | None:
        """The settings the environment gives, or None when no broker is named."""
        broker = environ.get(BROKER_ENV)
        if not broker:
            return None
        lease = float(environ.get(LEASE_ENV, "10"))
        visibility = environ.get(VISIBILITY_ENV)
        return cls(
            broker_url=broker,
            backend_url=environ.get(BACKEND_ENV, "redis://127.0.0.1:6379/0"),
            default_queue=environ.get(QUEUE_ENV, "veritask"),
            callback_url=environ.get(CALLBACK_ENV) or None,
            lease=timedelta(seconds=lease),
            lease_refresh=timedelta(seconds=min(1.0, lease / 5)),
            visibility_timeout=None if not visibility else timedelta(seconds=float(visibility)),
        )
