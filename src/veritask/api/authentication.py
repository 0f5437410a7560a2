"""Authentication before anything else: the token is checked before the body is read, the
path's ids are looked up or anything is stored.

``AuthenticateFirst`` is an ASGI middleware in front of the routes. For a request under
``/api/`` whose route needs a token (the routes that depend on :func:`security.require` or on
the attempt token), it answers 401 when the token names nobody and 403 when its role is too
small, before the route's body is parsed (a malformed body would otherwise answer 400/422
first) and before any lookup (an unknown id would otherwise answer 404 first: an oracle of
what exists). What it found is left in the request's state for the route's dependencies.
Public routes (``/healthz``, ``/readyz``, ``/metrics`` and the OpenAPI document) pass as they
are; so do paths that match no route.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from fastapi import APIRouter
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.routing import compile_path
from starlette.types import ASGIApp, Receive, Scope, Send

from veritask.api import problems
from veritask.api.security import ATTEMPT, PRINCIPAL_STATE, REQUIREMENT, SENDER_STATE, bearer
from veritask.services import callbacks, errors, tokens
from veritask.services.platform import Platform
from veritask.services.tokens import TokenRole

Requirement = TokenRole | str | None


@dataclass(frozen=True)
class _Guarded:
    """One route's path, its methods and what it demands of its caller."""

    pattern: re.Pattern[str]
    methods: frozenset[str]
    needs: TokenRole | str


class AuthenticateFirst:
    """Check the bearer token of every route that needs one before the route runs.

    ``routers`` are the routers the app includes, each with the prefix it is included under,
    in the order the app matches them.
    """

    def __init__(self, app: ASGIApp, *, routers: Sequence[tuple[str, APIRouter]]) -> None:
        self.app = app
        self._guarded = tuple(_guarded(routers))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not str(scope.get("path", "")).startswith("/api/"):
            await self.app(scope, receive, send)
            return
        needed = self._requirement(str(scope["path"]), str(scope.get("method", "GET")))
        if needed is None:
            await self.app(scope, receive, send)
            return
        platform: Platform = scope["app"].state.platform
        token = bearer(Headers(scope=scope).get("authorization"))
        try:
            state = await run_in_threadpool(_authenticate, platform, token, needed)
        except (errors.Unauthenticated, errors.Forbidden) as exc:
            unauthenticated = isinstance(exc, errors.Unauthenticated)
            response = problems.problem(
                401 if unauthenticated else 403,
                str(exc),
                kind="unauthenticated" if unauthenticated else "forbidden",
                headers={"WWW-Authenticate": "Bearer"} if unauthenticated else None,
            )
            await response(scope, receive, send)
            return
        except Exception as exc:
            # The database down while checking the token is the platform's trouble: 503.
            if not problems.is_platform_trouble(exc):
                raise
            await problems.unavailable(exc)(scope, receive, send)
            return
        scope.setdefault("state", {}).update(state)
        await self.app(scope, receive, send)

    def _requirement(self, path: str, method: str) -> Requirement:
        wanted = "GET" if method == "HEAD" else method
        for guarded in self._guarded:
            if wanted in guarded.methods and guarded.pattern.match(path):
                return guarded.needs
        return None


def _guarded(routers: Sequence[tuple[str, APIRouter]]) -> list[_Guarded]:
    found: list[_Guarded] = []
    for prefix, router in routers:
        for route in router.routes:
            if not isinstance(route, APIRoute):
                continue
            needs = _needs(route.dependant)
            if needs is not None:
                pattern, _, _ = compile_path(prefix + route.path)
                found.append(_Guarded(pattern, frozenset(route.methods or ()), needs))
    return found


def _needs(dependant: Dependant) -> Requirement:
    """What a route's dependencies demand of its caller: a role, the attempt token, or None."""
    for dependency in dependant.dependencies:
        found: Requirement = getattr(dependency.call, REQUIREMENT, None)
        if found is not None:
            return found
        below = _needs(dependency)
        if below is not None:
            return below
    return None


def _authenticate(
    platform: Platform, token: str | None, needed: TokenRole | str
) -> dict[str, object]:
    if needed == ATTEMPT:
        if not token:
            raise errors.Unauthenticated("send the attempt token: Authorization: Bearer <token>")
        sender = callbacks.sender_of(platform, token)
        if sender is None:
            raise errors.Unauthenticated("the attempt token names no attempt")
        return {SENDER_STATE: sender}
    if not token:
        raise errors.Unauthenticated("send an API token: Authorization: Bearer <token>")
    principal = tokens.authenticate(platform, token)
    if principal is None:
        raise errors.Unauthenticated("the token is unknown or revoked")
    role = TokenRole(needed)
    if not tokens.allows(principal, role):
        raise errors.Forbidden(
            f"token {principal.name!r} has the role {principal.role}; this needs {role}"
        )
    return {PRINCIPAL_STATE: principal}
