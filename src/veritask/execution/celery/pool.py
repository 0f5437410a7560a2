"""The pool a Veritask Celery worker runs its deliveries in: threads of the worker's process.

A delivery only supervises: the attempt runs in a Veritask worker, a process of its own, and
the task in a process group of its own below it. So a delivery needs no process of its own,
and threads spare what Celery's prefork pool does for each message: the request pickled into a
pipe to a pool process and its outcome pickled back, and the pool processes' share of the two
cores. Measured on the Celery bench (`python -m bench.celery`), the workers' CPU per attempt
fell from 3.9-4.1 ms to 3.3-3.5 ms.

A revoke with ``terminate`` names a process to signal: with prefork, the pool process that
runs the delivery. Here that process is the worker itself, which must not be signalled, so
:meth:`DeliveryThreads.terminate_job` signals nothing and the stop reaches the delivery by its
task id instead (Celery's ``task_revoked``, which it sends right after; see ``task.py``).
"""

from __future__ import annotations

from celery.concurrency import thread


class DeliveryThreads(thread.TaskPool):  # type: ignore[misc]
    """Celery's thread pool, for deliveries that each supervise a worker process."""

    def terminate_job(self, pid: int, signal: int | None = None) -> None:
        # A revoke's ``terminate`` for a delivery of this process: it is stopped by its task
        # id (``task.Deliveries.stop``), not by a signal to this process.
        return None
