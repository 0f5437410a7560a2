"""A small client of a Spark standalone master: its REST submission server (``/v1/submissions``,
the port ``spark.master.rest.port``, 6066 by default) and its web UI's JSON (``/json/``, where
the master lists its drivers). Plain HTTP with httpx; only what the Spark executor uses."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final
from urllib.parse import quote, urlsplit

import httpx

from veritask.core import jsontypes
from veritask.execution import errors

#: The master's REST submission server, e.g. ``http://127.0.0.1:6066``.
MASTER_ENV: Final = "VERITASK_SPARK_MASTER"
#: The master's web UI (where ``/json/`` lists the drivers); default: the master's host, 8080.
UI_ENV: Final = "VERITASK_SPARK_UI"
DEFAULT_UI_PORT: Final = 8080
REQUEST_TIMEOUT_SECONDS: Final = 30.0
#: The Spark version a request says its client speaks (the server answers with its own).
CLIENT_SPARK_VERSION: Final = "3.5.0"


def configured(environ: Mapping[str, str]) -> bool:
    return bool(environ.get(MASTER_ENV))


def ui_from_environment(environ: Mapping[str, str], master: str) -> str:
    named = environ.get(UI_ENV)
    if named:
        return named.rstrip("/")
    host = urlsplit(master).hostname or "127.0.0.1"
    return f"http://{host}:{DEFAULT_UI_PORT}"


def check_url(url: str, setting: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(
            f"{setting} must be an http(s) URL like http://127.0.0.1:6066, not {url!r}"
        )
    return url.rstrip("/")


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes

    def json(self) -> jsontypes.JSONObject:
        try:
            loaded = json.loads(self.body or b"{}")
        except ValueError:
            loaded = None
        if not isinstance(loaded, dict):
            raise errors.ExecutorError(
                f"the Spark master answered {self.body[:200]!r} (HTTP {self.status})",
                retryable=self.status >= 500,
            )
        return loaded

    @property
    def message(self) -> str:
        try:
            found = json.loads(self.body).get("message")
        except (ValueError, AttributeError):
            found = None
        return str(found or self.body[:200].decode(errors="replace"))


class Client:
    """Calls of the master; every transport error is a retryable ExecutorError."""

    def __init__(
        self, master: str, *, ui: str | None = None, timeout: float = REQUEST_TIMEOUT_SECONDS
    ) -> None:
        self.master = check_url(master, MASTER_ENV)
        self.ui = check_url(ui, UI_ENV) if ui else ui_from_environment({}, self.master)
        self._http = httpx.Client(timeout=timeout)

    def call(
        self,
        method: str,
        url: str,
        *,
        body: jsontypes.JSONObject | None = None,
    ) -> Answer:
        try:
            response = self._http.request(method, url, json=body)
        except httpx.HTTPError as exc:
            raise errors.ExecutorError(
                f"the Spark master at {url} cannot be reached: {exc}", retryable=True
            ) from exc
        return Answer(response.status_code, response.content)

    def create(self, request: jsontypes.JSONObject) -> Answer:
        return self.call("POST", f"{self.master}/v1/submissions/create", body=request)

    def status(self, driver_id: str) -> Answer:
        return self.call("GET", f"{self.master}/v1/submissions/status/{quote(driver_id, safe='')}")

    def kill(self, driver_id: str) -> Answer:
        return self.call("POST", f"{self.master}/v1/submissions/kill/{quote(driver_id, safe='')}")

    def state(self) -> jsontypes.JSONObject:
        """The master's state as its web UI serves it (workers, apps, drivers)."""
        answer = self.call("GET", f"{self.ui}/json/")
        if answer.status != 200:
            raise errors.ExecutorError(
                f"the Spark master's web UI at {self.ui} answered HTTP {answer.status}",
                retryable=True,
            )
        return answer.json()

    def close(self) -> None:
        self._http.close()
