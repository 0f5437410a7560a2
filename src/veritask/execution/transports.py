"""How a worker's events reach the platform: HTTP callbacks, or an outbox directory.

A transport delivers one spooled event and says what became of it; it never retries by itself
(the worker's delivery loop does, in order, with backoff). Stdlib only: the worker must start
fast and must not pull the platform's dependencies into every task's process.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit

from veritask.execution import layout, port, spool, wire

EVENTS_PATH = "/api/v2/callbacks/events"
COMMIT_PATH = "/api/v2/callbacks/commit"

#: 4xx answers that mean "not now" rather than "never": retried like a 5xx.
_TRANSIENT_CLIENT_ERRORS = frozenset({408, 425, 429})
_PLATFORM_OUTCOMES = frozenset({"applied", "duplicate", "stale", "conflict"})


class DeliveryOutcome(StrEnum):
    DELIVERED = "delivered"
    """The platform has the event (it may have been a duplicate or stale: that is its call)."""
    REJECTED = "rejected"
    """The platform refused the event for good; sending it again would change nothing."""
    RETRY = "retry"
    """The platform could not be reached or was not ready; try again later, in order."""


@dataclass(frozen=True)
class Delivery:
    outcome: DeliveryOutcome
    #: A sentence for the attempt log.
    detail: str
    #: The platform no longer wants this attempt (fenced or cancelled): stop the task.
    stop: bool = False


class Transport(Protocol):
    #: Whether a delivery may wait on a network (then it never runs in the worker's main loop).
    waits_on_network: bool

    def deliver(self, *, spooled: spool.SpooledEvent) -> Delivery: ...

    def close(self) -> None: ...


class HttpTransport:
    """POST ``<base_url>/api/v2/callbacks/events`` with ``Authorization: Bearer <token>``.

    The connection is kept alive between events: a worker sends a handful per attempt, but a
    platform answering hundreds of attempts a second should not pay a handshake for each.
    """

    waits_on_network = True

    def __init__(self, *, base_url: str, token: str, timeout: float) -> None:
        parts = urlsplit(base_url)
        self._https = parts.scheme == "https"
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port
        self._path = parts.path.rstrip("/") + EVENTS_PATH
        self._token = token
        self._timeout = timeout
        self._connection: http.client.HTTPConnection | None = None

    def deliver(self, *, spooled: spool.SpooledEvent) -> Delivery:
        body = wire.encode(spooled.event)
        # A kept-alive connection may have been closed by the server since the last event:
        # one fresh try then is not a retry, it is how keep-alive works.
        tries = 2 if self._connection is not None else 1
        failure: Exception | None = None
        for _ in range(tries):
            try:
                status, payload = self._post(body)
            except (OSError, http.client.HTTPException) as exc:
                self.close()
                failure = exc
                continue
            return _classify(status, payload)
        return Delivery(DeliveryOutcome.RETRY, f"platform unreachable: {failure!r}")

    def _post(self, body: bytes) -> tuple[int, bytes]:
        if self._connection is None:
            connection_class = (
                http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            )
            self._connection = connection_class(self._host, self._port, timeout=self._timeout)
        self._connection.request(
            "POST",
            self._path,
            body=body,
            headers={
                "Content-Type": "application/json",
                "Authorization": f"Bearer {self._token}",
            },
        )
        response = self._connection.getresponse()
        payload = response.read()
        if response.will_close:
            self.close()
        return response.status, payload

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


def _classify(status: int, payload: bytes) -> Delivery:
    snippet = payload[:300].decode(errors="replace")
    if 200 <= status < 300:
        try:
            answer = json.loads(payload)
        except (UnicodeDecodeError, json.JSONDecodeError):
            return Delivery(
                DeliveryOutcome.DELIVERED, f"HTTP {status}, unreadable body {snippet!r}"
            )
        if not isinstance(answer, dict):
            return Delivery(DeliveryOutcome.DELIVERED, f"HTTP {status}, body {snippet!r}")
        outcome = answer.get("outcome")
        if outcome not in _PLATFORM_OUTCOMES:
            outcome = f"unexpected outcome {outcome!r}"
        stop = answer.get("stop") is True
        return Delivery(
            DeliveryOutcome.DELIVERED, f"{outcome}: {answer.get('reason', '')}", stop=stop
        )
    if status >= 500 or status in _TRANSIENT_CLIENT_ERRORS:
        return Delivery(DeliveryOutcome.RETRY, f"HTTP {status}: {snippet}")
    return Delivery(DeliveryOutcome.REJECTED, f"HTTP {status}: {snippet}")


class OutboxTransport:
    """Hard-links each spooled event into the outbox as ``<instance>.<attempt>.<seq>.json``.

    A link is one atomic system call and copies nothing; the platform reads the file, records
    the event and deletes its name (:func:`acknowledge`), leaving the spool's name in place.
    """

    waits_on_network = False

    def __init__(self, *, directory: Path) -> None:
        self._directory = directory

    def deliver(self, *, spooled: spool.SpooledEvent) -> Delivery:
        event = spooled.event
        target = self._directory / outbox_name(
            event["instance_id"], event["attempt_no"], event["seq"]
        )
        try:
            try:
                os.link(spooled.path, target)
            except FileNotFoundError:
                if not spooled.path.exists():
                    raise
                # The outbox itself is missing (the first event of a new home): made once.
                self._directory.mkdir(parents=True, exist_ok=True, mode=0o700)
                os.link(spooled.path, target)
        except FileExistsError:
            return Delivery(DeliveryOutcome.DELIVERED, "already in the outbox")
        except OSError as exc:
            # Another file system (EXDEV) or no hard links: fall back to a durable copy.
            try:
                layout.write_atomically(target, spooled.path.read_bytes(), durable=False)
            except OSError:
                return Delivery(DeliveryOutcome.RETRY, f"outbox not writable: {exc!r}")
        return Delivery(DeliveryOutcome.DELIVERED, "in the outbox")

    def close(self) -> None:
        pass


def make_transport(spec: port.AttemptSpec) -> Transport:
    match spec.callback:
        case port.HttpCallback(base_url=base_url, timeout=timeout):
            return HttpTransport(
                base_url=base_url, token=spec.attempt_token, timeout=timeout.total_seconds()
            )
        case port.OutboxCallback(directory=directory):
            return OutboxTransport(directory=directory)


def platform_base_url(callback: port.CallbackTarget) -> str | None:
    """Where the task API finds the platform for the synchronous commit check."""
    match callback:
        case port.HttpCallback(base_url=base_url):
            return base_url
        case port.OutboxCallback(commit_base_url=commit_base_url):
            return commit_base_url


# --- the platform's side of the outbox ------------------------------------------------------


def outbox_name(instance_id: str, attempt_no: int, seq: int) -> str:
    return f"{instance_id}.{attempt_no}.{seq:08d}.json"


def post(directory: Path, event: wire.WorkerEvent) -> None:
    """Write one event into an outbox as its only copy (a reporter with no spool of its own)."""
    target = directory / outbox_name(event["instance_id"], event["attempt_no"], event["seq"])
    try:
        layout.write_atomically(target, wire.encode(event), durable=False)
    except FileNotFoundError:
        # The outbox itself is missing (the first event of a new home): made once.
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        layout.write_atomically(target, wire.encode(event), durable=False)


def _parse_outbox_name(name: str) -> tuple[str, int, int] | None:
    if name.startswith(".") or not name.endswith(".json"):
        return None
    parts = name.removesuffix(".json").rsplit(".", 2)
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
        return None
    return parts[0], int(parts[1]), int(parts[2])


def drain_outbox(
    directory: Path, *, takes: Callable[[tuple[str, int, int]], bool] | None = None
) -> Iterator[tuple[Path, wire.WorkerEvent]]:
    """The events waiting in an outbox, in (instance, attempt, seq) order.

    Record each event durably, then :func:`acknowledge` its path; an event not acknowledged is
    yielded again by the next drain (delivery is at least once: dedup by ``event_id``). A file
    that does not parse is renamed ``*.invalid`` so that it neither blocks nor vanishes.
    ``takes``, given each file's (instance, attempt, seq), leaves the files it refuses unread
    for another drainer of the same outbox (or a later drain).
    """
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return
    waiting = sorted(
        (key, name)
        for name in names
        if (key := _parse_outbox_name(name)) is not None and (takes is None or takes(key))
    )
    for _, name in waiting:
        path = directory / name
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            continue  # acknowledged by another drainer meanwhile
        try:
            event = wire.decode(data)
        except ValueError:
            with contextlib.suppress(FileNotFoundError):
                os.replace(path, path.with_name(name + ".invalid"))
            continue
        yield path, event


def acknowledge(path: Path) -> None:
    """Delete an outbox file whose event the platform has durably recorded."""
    layout.remove_quietly(path)
