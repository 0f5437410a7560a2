"""The Celery application that the executor sends to and the Veritask workers consume from.

The configuration is the part of at-least-once delivery we choose: a message is acknowledged
only after its attempt ended (``acks_late``) and is given back when the process running it
dies (``reject_on_worker_lost``), so a lost worker never loses an attempt; a worker takes one
message at a time (``prefetch_multiplier = 1``), so one busy worker does not hold messages
another could run. What at-least-once costs — a second delivery of an attempt — is refused by
the claim (``claims.py``, ``task.py``).
"""

from __future__ import annotations

from typing import Any

from celery import Celery
from celery.backends.redis import RedisBackend

from veritask.execution.celery.settings import CelerySettings

#: The one Celery task name: it runs an attempt through the Veritask worker program.
RUN_ATTEMPT = "veritask.run_attempt"


class RedisResults(RedisBackend):  # type: ignore[misc]
    """Celery's Redis result backend, without a sender's subscription to each task it sends.

    Celery subscribes the sending process to a task's result as it sends it, so that waiting
    on the result is quick, and unsubscribes when the result object is dropped: two Redis round
    trips per submission. The executor never waits on a result (it reads one when it describes
    an attempt), so they buy nothing.
    """

    def on_task_call(self, producer: Any, task_id: str) -> None:
        pass


def make_app(settings: CelerySettings) -> Celery:
    # ``<class>+<url>``: Celery's own syntax for a backend class of one's choosing.
    backend = f"{RedisResults.__module__}:{RedisResults.__name__}+{settings.backend_url}"
    app = Celery("veritask", broker=settings.broker_url, backend=backend)
    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_default_queue=settings.default_queue,
        task_create_missing_queues=True,
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        result_expires=settings.retention,
        # A STARTED state would be written by every delivery, refused ones too, over the
        # result of the one that ran: the claim's lease says "running" instead.
        task_track_started=False,
        # The run-attempt task keeps its result in a record of its own (claims.py); what a
        # delivery raised is still worth Celery's FAILURE for ``describe``.
        task_store_errors_even_if_ignored=True,
        broker_connection_retry_on_startup=True,
        broker_connection_max_retries=None,
        worker_hijack_root_logger=False,
        worker_send_task_events=False,
        task_send_sent_event=False,
    )
    transport_options: dict[str, object] = {
        # A publish returns once the broker has taken the message (publisher confirms), so
        # an acknowledged submission is one the broker holds. Without them, a message sent as
        # the broker goes down is lost, and the attempt waits in QUEUED for a message that
        # never comes (tests/cluster/test_broker_outage.py saw it).
        "confirm_publish": True,
    }
    if settings.visibility_timeout is not None:
        seconds = settings.visibility_timeout.total_seconds()
        transport_options.update(
            visibility_timeout=seconds,
            # Kombu sweeps for overdue messages every interval x throttle seconds (100 s by
            # default): keep the sweep in step with a short timeout.
            unacked_restore_interval=max(1, int(seconds // 2)),
            unacked_restore_throttle=1,
        )
    app.conf.broker_transport_options = transport_options
    return app
