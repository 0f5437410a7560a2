"""A route class for the UI: a service's refusal becomes a page in the viewer's language.

The API maps service errors to problem documents (``api.problems``); a person in a browser
gets an HTML page instead, with the refusal translated by its kind and the service's own
sentence beside it as the detail.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request
from fastapi.responses import Response
from fastapi.routing import APIRoute

from veritask.services import errors
from veritask.ui import context

_STATUS = (
    (errors.NotFound, 404, "error.not_found"),
    (errors.Conflict, 409, "error.conflict"),
    (errors.InvalidInput, 422, "error.invalid"),
    (errors.Forbidden, 403, "error.forbidden"),
)


class UiRoute(APIRoute):
    """Renders :class:`~veritask.services.errors.ServiceError` as an error page."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def guarded(request: Request) -> Response:
            try:
                return await handler(request)
            except errors.ServiceError as exc:
                return refusal_page(request, exc)

        return guarded


def status_of(exc: errors.ServiceError) -> int:
    """The HTTP status of a service's refusal, as the API answers it."""
    return _kind_of(exc)[0]


def _kind_of(exc: errors.ServiceError) -> tuple[int, str]:
    for kind, code, message in _STATUS:
        if isinstance(exc, kind):
            return code, message
    return 500, "error.unexpected"


def refusal_page(request: Request, exc: errors.ServiceError) -> Response:
    """The error page for a service's refusal."""
    status, key = _kind_of(exc)
    found = context.visitor(request)
    return context.render(
        found,
        "error.html",
        status=status,
        message=found.t(key),
        detail=str(exc),
        runs=exc.run_ids if isinstance(exc, errors.Conflict) else (),
    )
