"""How the CLI finds and talks to the API: over HTTP, like any script (docs/cli.md).

``VERITASK_URL`` and ``VERITASK_TOKEN`` win; otherwise the files that ``veritask up`` writes
into ``VERITASK_HOME`` (``url`` and ``token``) are read, so the CLI on the same machine needs
no setup. HTTP answers become the exit codes of section 7.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Final

import httpx

from veritask.core.jsontypes import JSONObject, JSONValue

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
EXIT_NOT_FOUND: Final = 3
EXIT_REFUSED: Final = 4

DEFAULT_HOME: Final = ".veritask"
URL_FILE: Final = "url"
TOKEN_FILE: Final = "token"

#: HTTP status → exit code: refused (conflict or permission), not found, bad input.
_EXIT_FOR_STATUS: Final = {
    400: EXIT_USAGE,
    401: EXIT_REFUSED,
    403: EXIT_REFUSED,
    404: EXIT_NOT_FOUND,
    409: EXIT_REFUSED,
    413: EXIT_USAGE,
    422: EXIT_USAGE,
}


class CliError(Exception):
    """Stop with this exit code and message (printed to stderr)."""

    def __init__(self, exit_code: int, message: str, problem: JSONObject | None = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.message = message
        self.problem = problem


def home() -> Path:
    """VERITASK_HOME, default ``./.veritask``."""
    return Path(os.environ.get("VERITASK_HOME", DEFAULT_HOME)).expanduser().resolve()


def _from_env_or_home(variable: str, filename: str) -> str | None:
    value = os.environ.get(variable)
    if value:
        return value.strip()
    path = home() / filename
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def api_url() -> str | None:
    return _from_env_or_home("VERITASK_URL", URL_FILE)


def api_token() -> str | None:
    return _from_env_or_home("VERITASK_TOKEN", TOKEN_FILE)


class ApiClient:
    """A thin JSON client of ``/api/v2`` that raises ``CliError`` with section 7's exit codes."""

    def __init__(self, url: str, token: str | None, *, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    @classmethod
    def from_environment(cls) -> ApiClient:
        url = api_url()
        if url is None:
            raise CliError(
                EXIT_USAGE,
                "no API to talk to: set VERITASK_URL (and VERITASK_TOKEN), or start "
                f"`veritask up`, which writes them into {home()}",
            )
        return cls(url, api_token())

    def close(self) -> None:
        self._http.close()

    def get(
        self, path: str, params: Mapping[str, str | int | list[str]] | None = None
    ) -> JSONObject:
        return self._send("GET", path, params=params)

    def post(self, path: str, body: JSONObject | None = None) -> JSONObject:
        return self._send("POST", path, body=body)

    def put(self, path: str, body: JSONObject) -> JSONObject:
        return self._send("PUT", path, body=body)

    def delete(self, path: str, params: Mapping[str, str | int] | None = None) -> JSONObject:
        return self._send("DELETE", path, params=params)

    def exists(self, path: str) -> bool:
        """Whether GET ``path`` finds something (404: no; other errors raise)."""
        try:
            self.get(path)
        except CliError as exc:
            if exc.exit_code == EXIT_NOT_FOUND:
                return False
            raise
        return True

    def _send(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str | int | list[str]] | None = None,
        body: JSONObject | None = None,
    ) -> JSONObject:
        try:
            response = self._http.request(
                method, "/api/v2" + path, params=dict(params or {}), json=body
            )
        except httpx.HTTPError as exc:
            raise CliError(
                EXIT_FAILED,
                f"cannot reach Veritask at {self.url} ({exc}); is `veritask up` running?",
            ) from None
        payload = _json(response)
        if response.is_success:
            return payload
        found = payload.get("detail")
        detail = found if isinstance(found, str) else ""
        message = f"{detail or response.reason_phrase} (HTTP {response.status_code})"
        state = payload.get("current_state")
        if isinstance(state, str):
            message += f"; current state: {state}"
        problems = payload.get("errors")
        if isinstance(problems, list):
            # A definition's refusal lists its problems in the detail already.
            extra = [_field_line(p) for p in problems if not _mentioned(p, detail)]
            message += "".join(f"\n  {line}" for line in extra)
        code = _EXIT_FOR_STATUS.get(response.status_code, EXIT_FAILED)
        raise CliError(code, message, payload)


def _json(response: httpx.Response) -> JSONObject:
    try:
        value: JSONValue = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return {"detail": response.text[:300]}
    return value if isinstance(value, dict) else {"items": value}


def _mentioned(problem: JSONValue, detail: str) -> bool:
    return isinstance(problem, dict) and str(problem.get("message")) in detail


def _field_line(problem: JSONValue) -> str:
    if not isinstance(problem, dict):
        return str(problem)
    line = problem.get("line")
    where = f"line {line}: " if isinstance(line, int) else ""
    return f"{where}{problem.get('field') or '(document)'}: {problem.get('message')}"
