"""A small client of the Docker Engine API (v1.41), which Docker and Podman both serve: plain
HTTP over the engine's unix socket (or TCP), with httpx. Only what the container engine uses.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final
from urllib.parse import quote

import httpx

from veritask.core import jsontypes
from veritask.execution import errors

#: Where a scheduler finds the engine; without it, where Docker clients look (DOCKER_HOST,
#: else the default socket).
HOST_ENV: Final = "VERITASK_CONTAINER_HOST"
DOCKER_HOST_ENV: Final = "DOCKER_HOST"
DEFAULT_HOST: Final = "unix:///var/run/docker.sock"
API_VERSION: Final = "v1.41"
REQUEST_TIMEOUT_SECONDS: Final = 30.0


def host_from_environment(environ: Mapping[str, str]) -> str:
    return environ.get(HOST_ENV) or environ.get(DOCKER_HOST_ENV) or DEFAULT_HOST


def configured(environ: Mapping[str, str]) -> bool:
    """A container engine is configured when named, or when the default socket exists."""
    if environ.get(HOST_ENV):
        return True
    host = host_from_environment(environ)
    return host.startswith("unix://") and os.path.exists(host.removeprefix("unix://"))


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes

    def json(self) -> jsontypes.JSONObject:
        loaded = json.loads(self.body or b"{}")
        if not isinstance(loaded, dict):
            raise errors.ExecutorError(f"the container engine answered {loaded!r}")
        return loaded

    def list(self) -> list[jsontypes.JSONValue]:
        loaded = json.loads(self.body or b"[]")
        if not isinstance(loaded, list):
            raise errors.ExecutorError(f"the container engine answered {loaded!r}")
        return loaded

    @property
    def message(self) -> str:
        try:
            found = json.loads(self.body).get("message")
        except (ValueError, AttributeError):
            found = None
        return str(found or self.body[:200].decode(errors="replace"))


class Client:
    """Calls of the Docker Engine API; every transport error is a retryable ExecutorError."""

    def __init__(self, host: str, *, timeout: float = REQUEST_TIMEOUT_SECONDS) -> None:
        self.host = host
        engine_transport, base = transport(host)
        self._http = httpx.Client(
            transport=engine_transport, base_url=f"{base}/{API_VERSION}", timeout=timeout
        )

    def call(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: jsontypes.JSONObject | None = None,
        timeout: float | None = None,
    ) -> Answer:
        try:
            response = self._http.request(
                method,
                path,
                params=params,
                json=body,
                timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT,
            )
        except httpx.HTTPError as exc:
            raise errors.ExecutorError(
                f"the container engine at {self.host} cannot be reached: {exc}", retryable=True
            ) from exc
        return Answer(response.status_code, response.content)

    def close(self) -> None:
        self._http.close()


def transport(host: str) -> tuple[httpx.HTTPTransport, str]:
    """The transport to the engine at ``host`` and the base URL its requests go to."""
    if host.startswith("unix://"):
        return httpx.HTTPTransport(uds=host.removeprefix("unix://")), "http://engine"
    if host.startswith(("tcp://", "http://")):
        return httpx.HTTPTransport(), "http://" + host.split("://", 1)[1]
    raise ValueError(f"{HOST_ENV} must be unix://<path> or tcp://<host>:<port>, not {host!r}")


def path_name(name: str) -> str:
    return quote(name, safe="")


def parse_time(value: object) -> datetime | None:
    """An engine time (RFC 3339 with nanoseconds); None for the zero time or no time."""
    if not isinstance(value, str) or not value or value.startswith("0001-"):
        return None
    text = value.replace("Z", "+00:00")
    head, dot, rest = text.partition(".")
    if dot:
        digits = "".join(c for c in rest if c.isdigit())
        zone = rest[len(digits) :]
        text = f"{head}.{digits[:6].ljust(6, '0')}{zone}"
    moment = datetime.fromisoformat(text)
    if moment.utcoffset() is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def demultiplex(raw: bytes) -> bytes:
    """The log bytes of a container without a terminal: frames of an 8-byte header (stream,
    0, 0, 0, length) and the bytes; stdout and stderr interleaved as written."""
    out = bytearray()
    at = 0
    while at + 8 <= len(raw):
        stream, length = raw[at], struct.unpack(">I", raw[at + 4 : at + 8])[0]
        if stream not in (0, 1, 2):
            return raw  # not multiplexed (a terminal's raw stream)
        out += raw[at + 8 : at + 8 + length]
        at += 8 + length
    return bytes(out) if at == len(raw) else raw


class FrameReader:
    """``demultiplex`` for a stream that comes in pieces: each ``feed`` returns the bytes of
    the frames it completed; a frame cut between two pieces waits for the next."""

    def __init__(self) -> None:
        self._pending = bytearray()
        self._raw = False

    def feed(self, chunk: bytes) -> bytes:
        if self._raw:
            return chunk
        self._pending += chunk
        out = bytearray()
        while len(self._pending) >= 8:
            stream = self._pending[0]
            if stream not in (0, 1, 2):
                # Not multiplexed (a terminal's raw stream): everything passes as it is.
                self._raw = True
                out += self._pending
                self._pending.clear()
                break
            length = struct.unpack(">I", self._pending[4:8])[0]
            if len(self._pending) < 8 + length:
                break
            out += self._pending[8 : 8 + length]
            del self._pending[: 8 + length]
        return bytes(out)

    def rest(self) -> bytes:
        """What is left of a frame the stream cut off."""
        return bytes(self._pending[8:])
