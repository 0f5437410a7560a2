"""One check on every string a request carries: no NUL character (U+0000).

PostgreSQL refuses NUL in text and JSON values, so a NUL that reached the database answered
500 there (and would be a NUL in a name everywhere else). ``RefuseNul`` refuses it at the edge,
for every route under ``/api/``, with a 422 that names where it was: ``path``, ``query.<name>``
or ``body.<field path>``. It runs after authentication and the body-size cap, so it reads
only bodies of callers who proved themselves, and only up to the cap.
"""

from __future__ import annotations

import json
from urllib.parse import parse_qsl

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from veritask.api import problems, schemas
from veritask.core import jsontypes, refusals

_NUL = "\x00"


class RefuseNul:
    """Refuse a request whose path, query or body holds a NUL character (422)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not str(scope.get("path", "")).startswith("/api/"):
            await self.app(scope, receive, send)
            return
        messages: list[Message] = []
        body = b""
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        where = _first_nul(scope, body)
        if where is not None:
            message_text = refusals.NO_NUL.format()
            response = problems.problem(
                422,
                f"{where}: {message_text}",
                kind="invalid-input",
                field_errors=[schemas.FieldError(field=where, line=None, message=message_text)],
            )
            await response(scope, receive, send)
            return

        async def replay() -> Message:
            if messages:
                return messages.pop(0)
            return await receive()

        await self.app(scope, replay, send)


def _first_nul(scope: Scope, body: bytes) -> str | None:
    """Where the request first holds a NUL: ``path``, ``query.<name>``, ``body…``; or None."""
    if _NUL in str(scope.get("path", "")):
        return "path"
    query = scope.get("query_string", b"").decode("latin-1")
    for name, value in parse_qsl(query, keep_blank_values=True):
        if _NUL in name or _NUL in value:
            return f"query.{name.replace(_NUL, '')}"
    if b"\x00" not in body and b"\\u0000" not in body:
        return None  # the common case: no JSON parse here
    try:
        parsed = json.loads(body)
    except ValueError:
        return "body" if b"\x00" in body else None
    return next(jsontypes.nul_paths(parsed, "body"), None)
