"""The worker's delivery loop: spooled events go out one at a time, strictly in ``seq`` order.

It runs in a thread of its own so that a slow or unreachable platform never delays the task's
supervision (log pumping, timeouts, stops). While the head of the queue cannot be delivered,
nothing behind it is tried: later events never overtake earlier ones.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import deque

from veritask.execution import spool, task_process, transports

#: The first pause after a failed delivery; it doubles up to the spec's ``delivery_retry_max``.
INITIAL_RETRY_DELAY = 0.05

#: The delivery thread's name, by which a process that runs attempts one after another finds
#: one that outlived its attempt.
THREAD_NAME = "veritask-delivery"

#: Bytes written to the notify pipe, for the worker's main loop.
NOTIFY_STOP = b"S"
NOTIFY_DRAINED = b"D"


class Deliverer:
    """Delivers in ``seq`` order, in a thread that starts with the first event that must wait.

    A transport that never waits on a network (the outbox) delivers inline, in the pushing
    thread, as long as nothing waits before the event: no thread, no hand-off, which is most of
    what a short attempt costs. Whenever the queue is not empty, the thread runs.
    """

    def __init__(
        self,
        *,
        journal: spool.Spool,
        transport: transports.Transport,
        log: task_process.LogSink,
        retry_max: float,
        notify_fd: int,
    ) -> None:
        self._journal = journal
        self._transport = transport
        self._log = log
        self._retry_max = retry_max
        self._notify_fd = notify_fd
        self._inline = not transport.waits_on_network
        self._queue: deque[spool.SpooledEvent] = deque()
        self._condition = threading.Condition()
        self._thread: threading.Thread | None = None
        self._finishing = False
        self._aborted = False

    def push(self, spooled: spool.SpooledEvent) -> None:
        """Deliver ``spooled`` after everything pushed before it. Call it from one thread, and
        only once the task's process was forked: it may start a thread."""
        with self._condition:
            if not (self._inline and self._thread is None and not self._queue):
                self._enqueue(spooled)
                return
        delivery = self._transport.deliver(spooled=spooled)
        if delivery.outcome is transports.DeliveryOutcome.RETRY:
            with self._condition:
                self._enqueue(spooled)
            return
        self._settle(spooled, delivery)

    def finish(self) -> bool:
        """No more events will come. True when all are delivered already; otherwise the thread
        notifies ``drained`` once they are, and ends."""
        with self._condition:
            self._finishing = True
            self._condition.notify()
            return self._thread is None

    def abort(self) -> None:
        """Stop at once; what is not delivered stays in the spool for a later worker."""
        with self._condition:
            self._aborted = True
            self._condition.notify()

    def join(self, timeout: float) -> None:
        """Wait up to ``timeout`` for the thread to end (after ``finish`` or ``abort``)."""
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def undelivered_count(self) -> int:
        with self._condition:
            return len(self._queue)

    def _enqueue(self, spooled: spool.SpooledEvent) -> None:
        self._queue.append(spooled)
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
            self._thread.start()
        self._condition.notify()

    def _run(self) -> None:
        delay = INITIAL_RETRY_DELAY
        failures = 0
        while True:
            with self._condition:
                while not self._queue and not self._aborted and not self._finishing:
                    self._condition.wait()
                if self._aborted:
                    return
                if not self._queue:
                    self._notify(NOTIFY_DRAINED)
                    return
                head = self._queue[0]
            delivery = self._transport.deliver(spooled=head)
            if delivery.outcome is transports.DeliveryOutcome.RETRY:
                failures += 1
                if failures == 1:
                    self._log.note(
                        f"event seq {head.seq} not delivered, will retry: {delivery.detail}"
                    )
                with self._condition:
                    if not self._aborted:
                        self._condition.wait(delay)
                delay = min(delay * 2, self._retry_max)
                continue
            if failures:
                self._log.note(f"event seq {head.seq} delivered after {failures} failed tries")
            failures = 0
            delay = INITIAL_RETRY_DELAY
            self._settle(head, delivery)
            with self._condition:
                self._queue.popleft()

    def _settle(self, spooled: spool.SpooledEvent, delivery: transports.Delivery) -> None:
        if delivery.outcome is transports.DeliveryOutcome.REJECTED:
            kind = spooled.event["kind"]
            self._log.note(f"event seq {spooled.seq} ({kind}) rejected: {delivery.detail}")
            self._journal.settle(spooled, spool.Disposition.REJECTED)
        else:
            self._journal.settle(spooled, spool.Disposition.SENT)
        if delivery.stop:
            self._notify(NOTIFY_STOP)

    def _notify(self, message: bytes) -> None:
        # A full pipe holds notices the main loop has yet to read; one more would be moot.
        with contextlib.suppress(BlockingIOError):
            os.write(self._notify_fd, message)
