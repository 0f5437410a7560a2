"""Run-attempt messages published together, their publisher confirms collected at the end.

``CeleryExecutor.submit`` publishes one message and waits for the broker's confirm: a round
trip (and the broker writing the message down) per attempt, which is why a scheduler submits
on several threads. A batch needs neither: :class:`BatchPublisher` publishes every message of
it on a channel of its own, in confirm mode, and then waits once for all the confirms (the
broker confirms several messages with one frame).

A batch's messages are the ones ``send_task`` would send: Celery builds each (``as_task_v2``,
its task message protocol 2), and the channel publishes it to the queue as ``send_task``
routes it. What is skipped is ``send_task``'s per-message work that a batch does once or not
at all (routing options, declaring the queue, kombu's producer), and a socket write per
message: the batch's frames go out in one write. Measured on one host, in batches of 64:
0.14-0.18 ms of the sending process's CPU per attempt, against 0.44-0.52 ms through
``send_task`` on the same channel (docs/executors.md, section 6).

A message counts as sent only once the broker confirmed it (``basic.ack``); a refusal
(``basic.nack``) is an error worth another try later. A connection lost before a message's
confirm leaves the message's fate unknown: the batch's unconfirmed messages are published once
more on a new connection (an idle connection the broker closed is the usual case), and if that
fails too, they are errors worth another try. A message that reaches the broker twice that
way starts its attempt once: the claim refuses the second delivery (``claims.py``).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import amqp
from amqp import exceptions as amqp_errors
from amqp import method_framing
from celery import Celery
from kombu import serialization
from kombu.connection import Connection
from kombu.entity import DELIVERY_MODES
from kombu.exceptions import OperationalError as KombuOperationalError

from veritask.core import jsontypes
from veritask.execution import errors
from veritask.execution.celery import app as celery_app

#: What a broken connection raises, anywhere between publishing and the last confirm.
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    OSError,  # TimeoutError among them: the confirms did not come
    KombuOperationalError,
    amqp_errors.ConnectionError,
    amqp_errors.ChannelError,
)


@dataclass(frozen=True)
class Message:
    """One run-attempt message: the Celery task id, its queue and the encoded spec."""

    task_id: str
    queue: str
    encoded_spec: jsontypes.JSONObject
    #: What ``inspect`` and monitoring tools show for the arguments.
    argsrepr: str


def send(app: Celery, message: Message, **options: Any) -> None:
    """Publish ``message`` as the run-attempt task; ``options`` are ``send_task``'s."""
    app.send_task(
        celery_app.RUN_ATTEMPT,
        args=[message.encoded_spec],
        task_id=message.task_id,
        queue=message.queue,
        # What ``inspect`` and monitoring tools show for the arguments; Celery would otherwise
        # render a truncated repr of the whole spec for every message.
        argsrepr=message.argsrepr,
        kwargsrepr="{}",
        **options,
    )


@dataclass(frozen=True)
class _Route:
    """Where ``send_task`` sends a queue's messages, and how durably."""

    exchange: str
    routing_key: str
    delivery_mode: int


class _WriteCoalescer:
    """The frame writer of a publisher's connection (py-amqp's ``frame_writer`` option): what
    is written inside :meth:`coalesced` goes to the socket in one write as it ends."""

    def __init__(self) -> None:
        self._transport: Any = None
        self._held: list[bytes] | None = None

    def __call__(self, connection: amqp.Connection, transport: Any) -> Any:
        """py-amqp calls this once per connection, with the transport to write to."""
        self._transport, self._held = transport, None
        return method_framing.frame_writer(connection, self)

    def write(self, data: bytes | memoryview) -> None:
        if self._held is None:
            self._transport.write(data)
        else:
            # py-amqp hands over a view of a buffer it reuses for the next frame.
            self._held.append(bytes(data))

    @contextlib.contextmanager
    def coalesced(self) -> Iterator[None]:
        """Hold the frames written inside; write them at once if the block ends normally (a
        block that raised leaves a connection to be closed, and its frames unsent)."""
        self._held = []
        try:
            yield
            held = self._held
        finally:
            self._held = None
        if held:
            self._transport.write(b"".join(held))


class BatchPublisher:
    """Publishes batches of run-attempt messages for one Celery app; one batch at a time."""

    def __init__(self, app: Celery, *, confirm_timeout: float) -> None:
        self._app = app
        self._confirm_timeout = confirm_timeout
        self._lock = threading.Lock()
        self._writer = _WriteCoalescer()
        self._connection: Connection | None = None
        self._channel: amqp.Channel | None = None
        #: The queues declared on this connection (as ``send_task`` declares a queue it sends
        #: to), and where a message for each goes.
        self._routes: dict[str, _Route] = {}
        #: The delivery tag of the channel's last publish: the broker numbers a confirming
        #: channel's messages from 1, and confirms by those numbers.
        self._last_tag = 0
        #: Published, not confirmed yet: delivery tag -> the message's place in the batch.
        self._unconfirmed: dict[int, int] = {}
        #: The batch's confirmed places: True when the broker took the message.
        self._confirmed: dict[int, bool] = {}

    def publish(self, messages: Sequence[Message]) -> list[errors.ExecutorError | None]:
        """Publish ``messages``; for each, None once the broker confirmed it, or the error."""
        with self._lock:
            outcomes: list[errors.ExecutorError | None] = [None] * len(messages)
            waiting = list(range(len(messages)))
            for last_try in (False, True):
                try:
                    self._publish_and_confirm(messages, waiting)
                except CONNECTION_ERRORS as exc:
                    self._close()
                    waiting = [place for place in waiting if place not in self._confirmed]
                    if last_try:
                        for place in waiting:
                            outcomes[place] = errors.ExecutorError(
                                f"{messages[place].task_id}: not confirmed by the broker: {exc}",
                                retryable=True,
                            )
                else:
                    waiting = []
                for place, taken in self._confirmed.items():
                    if not taken:
                        outcomes[place] = errors.ExecutorError(
                            f"{messages[place].task_id}: the broker refused the message",
                            retryable=True,
                        )
                self._confirmed = {}
                if not waiting:
                    break
            return outcomes

    def connect(self) -> None:
        """Open the connection and its confirming channel now rather than for the first batch."""
        with self._lock:
            self._open()

    @property
    def connected(self) -> bool:
        with self._lock:
            return self._connection is not None and bool(self._connection.connected)

    def close(self) -> None:
        with self._lock:
            self._close()

    def _publish_and_confirm(self, messages: Sequence[Message], places: list[int]) -> None:
        """Publish the messages at ``places`` and wait for their confirms; raises one of
        :data:`CONNECTION_ERRORS` when the connection breaks or the confirms do not come."""
        try:
            self._publish_and_wait(messages, places)
        except CONNECTION_ERRORS:
            raise
        except BaseException:
            # Whatever else broke off a batch leaves confirms on their way: the channel's
            # numbering is not to be trusted for the next one.
            self._close()
            raise

    def _publish_and_wait(self, messages: Sequence[Message], places: list[int]) -> None:
        connection, channel = self._open()
        self._unconfirmed = {}
        # Declaring waits for the broker's answer: it cannot be among the held frames.
        for queue in {messages[place].queue for place in places} - self._routes.keys():
            self._routes[queue] = self._declare(channel, queue)
        with self._writer.coalesced():
            for place in places:
                message = messages[place]
                self._publish(channel, message, self._routes[message.queue])
                self._last_tag += 1
                self._unconfirmed[self._last_tag] = place
        give_up_at = time.monotonic() + self._confirm_timeout
        while self._unconfirmed:
            remaining = give_up_at - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no confirm within {self._confirm_timeout} s")
            connection.drain_events(timeout=remaining)  # type: ignore[no-untyped-call]

    def _declare(self, channel: amqp.Channel, name: str) -> _Route:
        """Declare the queue as ``send_task`` does; where its messages go, as it sends them."""
        queue = self._app.amqp.queues[name]
        queue(channel).declare()
        mode = queue.exchange.delivery_mode or self._app.conf.task_default_delivery_mode
        mode = DELIVERY_MODES.get(mode, mode)  # "persistent" -> 2
        if queue.exchange.type == "direct":  # the broker's default exchange
            return _Route("", name, mode)
        return _Route(queue.exchange.name, queue.routing_key, mode)

    def _publish(self, channel: amqp.Channel, message: Message, route: _Route) -> None:
        """Publish ``message`` as ``send_task`` would: the same headers, properties and body,
        to the same exchange and routing key. Celery's ``before_task_publish`` and
        ``after_task_publish`` signals are not sent: nothing in Veritask listens to them."""
        app = self._app
        task = app.amqp.as_task_v2(
            message.task_id,
            celery_app.RUN_ATTEMPT,
            args=[message.encoded_spec],
            kwargs={},
            reply_to=app.thread_oid,
            ignore_result=None,
            argsrepr=message.argsrepr,
            kwargsrepr="{}",
        )
        content_type, content_encoding, body = serialization.dumps(  # type: ignore[no-untyped-call]
            task.body, serializer=app.conf.task_serializer
        )
        channel.basic_publish(
            amqp.Message(
                body,
                content_type=content_type,
                content_encoding=content_encoding,
                application_headers=task.headers,
                delivery_mode=route.delivery_mode,
                priority=0,
                **task.properties,
            ),
            exchange=route.exchange,
            routing_key=route.routing_key,
        )

    def _open(self) -> tuple[Connection, amqp.Channel]:
        if self._connection is None or self._channel is None:
            # Its own connection: the app's pooled ones wait for a confirm after each publish.
            connection = self._app.connection_for_write(
                transport_options={"confirm_publish": False, "frame_writer": self._writer}
            )
            try:
                connection.ensure_connection(max_retries=1)
                channel = connection.channel()
                channel.confirm_select()
                channel.events["basic_ack"].add(self._on_ack)
                channel.events["basic_nack"].add(self._on_nack)
            except BaseException:
                connection.release()
                raise
            self._connection = connection
            self._channel = channel
            self._routes = {}
            self._last_tag = 0
        return self._connection, self._channel

    def _close(self) -> None:
        connection, self._connection, self._channel = self._connection, None, None
        self._unconfirmed = {}
        if connection is not None:
            # It may be broken already: what matters is that it is not used again.
            with contextlib.suppress(*CONNECTION_ERRORS):
                connection.release()  # type: ignore[no-untyped-call]

    def _on_ack(self, delivery_tag: int, multiple: bool, *_: Any) -> None:
        self._settle(delivery_tag, multiple, taken=True)

    def _on_nack(self, delivery_tag: int, multiple: bool, *_: Any) -> None:
        self._settle(delivery_tag, multiple, taken=False)

    def _settle(self, delivery_tag: int, multiple: bool, *, taken: bool) -> None:
        if multiple:  # everything up to this tag
            tags = [tag for tag in self._unconfirmed if tag <= delivery_tag]
        else:
            tags = [delivery_tag] if delivery_tag in self._unconfirmed else []
        for tag in tags:
            self._confirmed[self._unconfirmed.pop(tag)] = taken
