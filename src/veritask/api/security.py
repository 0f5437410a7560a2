"""Who is calling: API bearer tokens with roles, and attempt tokens on the callbacks.

Every route but ``/healthz``, ``/readyz`` and the OpenAPI document needs a token. People and
scripts use API tokens (viewer < operator < admin); workers and task code use their attempt
token, and only on the callback routes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from veritask.services import errors, tokens, views
from veritask.services.platform import Platform
from veritask.services.tokens import TokenRole

api_token = HTTPBearer(
    auto_error=False,
    scheme_name="ApiToken",
    description="An API token (`veritask token create`); its role decides what it may do",
)
attempt_token = HTTPBearer(
    auto_error=False,
    scheme_name="AttemptToken",
    description="The attempt token the worker was given; it names one attempt",
)


def platform_of(request: Request) -> Platform:
    """The platform the app was created with."""
    found: Platform = request.app.state.platform
    return found


PlatformDep = Annotated[Platform, Depends(platform_of)]


def require(role: TokenRole) -> Callable[..., views.Principal]:
    """A dependency that admits API tokens whose role includes ``role``."""

    def dependency(
        platform: PlatformDep,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(api_token)],
    ) -> views.Principal:
        if credentials is None or not credentials.credentials:
            raise errors.Unauthenticated("send an API token: Authorization: Bearer <token>")
        principal = tokens.authenticate(platform, credentials.credentials)
        if principal is None:
            raise errors.Unauthenticated("the token is unknown or revoked")
        if not tokens.allows(principal, role):
            raise errors.Forbidden(
                f"token {principal.name!r} has the role {principal.role}; this needs {role}"
            )
        return principal

    return dependency


def the_attempt_token(
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(attempt_token)],
) -> str:
    """The attempt token of a callback (checked against the attempt by the services)."""
    if credentials is None or not credentials.credentials:
        raise errors.Unauthenticated("send the attempt token: Authorization: Bearer <token>")
    return credentials.credentials


Viewer = Annotated[views.Principal, Depends(require(TokenRole.VIEWER))]
Operator = Annotated[views.Principal, Depends(require(TokenRole.OPERATOR))]
Admin = Annotated[views.Principal, Depends(require(TokenRole.ADMIN))]
AttemptToken = Annotated[str, Depends(the_attempt_token)]
