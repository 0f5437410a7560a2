"""The one map from exceptions to RFC 9457 ``application/problem+json`` documents.

Every error a route can meet is turned into a problem here and nowhere else: the services'
errors, request validation, unknown routes, oversized bodies, a database that is busy or
down (503, retryable), and anything unexpected (500, logged, no internals in the answer).
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Mapping
from http import HTTPStatus
from typing import Final

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import BaseRoute, Match

from veritask.api import schemas
from veritask.core import refusals
from veritask.core.errors import VeritaskError
from veritask.services import errors

log = logging.getLogger(__name__)

MEDIA_TYPE: Final = "application/problem+json"
#: What ``Retry-After`` asks of a client when the database is busy or unreachable.
RETRY_AFTER_SECONDS: Final = 1
_FULL_DISK: Final = frozenset({errno.ENOSPC, errno.EDQUOT})
TYPE_PREFIX: Final = "/problems/"


def problem(
    status: int,
    detail: str,
    *,
    kind: str | None = None,
    field_errors: list[schemas.FieldError] | None = None,
    current_state: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    """A problem response; ``kind`` names its type (default: from the status)."""
    phrase = HTTPStatus(status).phrase
    body = schemas.Problem(
        type=TYPE_PREFIX + (kind or phrase.lower().replace(" ", "-").replace("'", "")),
        title=phrase,
        status=status,
        detail=detail,
        errors=field_errors,
        current_state=current_state,
    )
    # Absent rather than null at the top (RFC 9457 extension members), whole inside `errors`.
    content = {key: value for key, value in body.model_dump().items() if value is not None}
    return JSONResponse(
        content,
        status_code=status,
        media_type=MEDIA_TYPE,
        headers=dict(headers or {}),
    )


def _service_error(_: Request, exc: Exception) -> JSONResponse:
    match exc:
        case errors.NotFound():
            return problem(404, str(exc), kind="not-found")
        case errors.StaleAttempt():
            return problem(409, str(exc), kind="stale-attempt", current_state=exc.current_state)
        case errors.Conflict():
            return problem(409, str(exc), kind="conflict", current_state=exc.current_state)
        case errors.UnreadableInput():
            found = [
                schemas.FieldError(field=p.field, line=p.line, message=p.message)
                for p in exc.problems
            ]
            return problem(400, str(exc), kind="bad-request", field_errors=found or None)
        case errors.InvalidInput():
            found = [
                schemas.FieldError(field=p.field, line=p.line, message=p.message)
                for p in exc.problems
            ]
            return problem(422, str(exc), kind="invalid-input", field_errors=found or None)
        case errors.Unauthenticated():
            return problem(
                401, str(exc), kind="unauthenticated", headers={"WWW-Authenticate": "Bearer"}
            )
        case errors.Forbidden():
            return problem(403, str(exc), kind="forbidden")
        case errors.SchedulerRefused():
            return problem(409, str(exc), kind="scheduler-refused")
        case VeritaskError() if exc.retryable:
            return unavailable(exc)
        case _:
            return _unexpected(_, exc)


def is_platform_trouble(exc: BaseException) -> bool:
    """Whether ``exc`` is the platform's own trouble rather than the request's or a bug: the
    database busy, unreachable or full (the ledger says so by ``retryable``), or a full disk.
    """
    if isinstance(exc, VeritaskError):
        return exc.retryable
    return isinstance(exc, OSError) and exc.errno in _FULL_DISK


def unavailable(exc: BaseException) -> JSONResponse:
    """503, retryable: the database (or the disk) cannot serve now; nothing was half-written,
    since every change is one transaction that did not commit."""
    log.warning("unavailable: %s", exc)
    return problem(
        503,
        f"try again: {exc}",
        kind="unavailable",
        headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
    )


def _validation_error(_: Request, exc: Exception) -> JSONResponse:
    found: list[schemas.FieldError] = []
    if isinstance(exc, RequestValidationError):
        for error in exc.errors():
            location = ".".join(str(part) for part in error.get("loc", ()))
            found.append(
                schemas.FieldError(field=location, line=None, message=str(error.get("msg", "")))
            )
    detail = "; ".join(f"{e.field}: {e.message}" for e in found) or "the request is invalid"
    return problem(422, detail, kind="invalid-input", field_errors=found or None)


def _http_error(request: Request, exc: Exception) -> JSONResponse:
    if not isinstance(exc, StarletteHTTPException):
        return _unexpected(request, exc)
    detail = exc.detail if isinstance(exc.detail, str) else HTTPStatus(exc.status_code).phrase
    unreadable = _unreadable_body(exc)
    if unreadable is not None:
        return _service_error(request, unreadable)
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        # Starlette names only the first route that matched the path; GET and POST of one
        # path are two routes here, and Allow must name both.
        headers["Allow"] = ", ".join(_allowed_methods(request))
    return problem(exc.status_code, detail, headers=headers)


def _unreadable_body(exc: StarletteHTTPException) -> errors.UnreadableInput | None:
    """FastAPI's 400 for a JSON body it could not parse, as a problem naming the body and
    what is wrong with it (FastAPI says only that parsing failed)."""
    if exc.status_code != 400 or exc.__cause__ is None:
        return None
    if isinstance(exc.__cause__, UnicodeDecodeError):
        return errors.UnreadableInput.about("body", refusals.NOT_UTF8.format())
    if isinstance(exc.__cause__, RecursionError):
        return errors.UnreadableInput.about("body", refusals.NESTED_TOO_DEEPLY.format())
    return errors.UnreadableInput.about("body", refusals.NOT_READABLE_JSON.format())


def _allowed_methods(request: Request) -> list[str]:
    methods: set[str] = set()
    for route in request.app.routes:
        if isinstance(route, BaseRoute) and route.matches(request.scope)[0] is not Match.NONE:
            methods |= getattr(route, "methods", None) or set()
    return sorted(methods)


def _unexpected(_: Request, exc: Exception) -> JSONResponse:
    # Also reached by errors raised outside the routes (a middleware, a stream's start).
    if is_platform_trouble(exc):
        return unavailable(exc)
    log.error("unexpected error", exc_info=exc)
    return problem(500, "an unexpected error; the server's log has the details", kind="internal")


def install(app: FastAPI) -> None:
    """Route every exception through this module."""
    app.add_exception_handler(VeritaskError, _service_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)


_DESCRIPTIONS: Final = {
    400: "The body could not be read (not UTF-8, not JSON)",
    401: "No token, or a token that names nobody",
    403: "The token does not allow this",
    404: "No such object",
    409: "Illegal in the object's current state; `current_state` says which",
    413: "The body is larger than the server accepts",
    422: "The input was refused; `errors` names each field (and line)",
    503: "The database is busy or unreachable; retry",
}


def documented(*statuses: int) -> dict[int | str, dict[str, object]]:
    """The OpenAPI description of these error responses (``openapi`` gives them the problem
    media type). Every route that needs a token can also answer 400, 401, 403, 422 and 503."""
    wanted = sorted({*statuses, 400, 401, 403, 422, 503})
    return {
        status: {"model": schemas.Problem, "description": _DESCRIPTIONS[status]}
        for status in wanted
    }
