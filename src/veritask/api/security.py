"""Who is calling: API bearer tokens with roles, and attempt tokens on the callbacks.

Every route but ``/healthz``, ``/readyz`` and the OpenAPI document needs a token. People and
scripts use API tokens (viewer < operator < admin); workers and task code use their attempt
token, and only on the callback routes. The token is checked by ``authentication.py`` before
the route runs, from the requirement each dependency here declares; the dependencies take what
it found (and check again when a request did not pass through it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Final

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from veritask.services import callbacks, errors, tokens, views
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


#: The attribute naming what a dependency demands: a ``TokenRole``, or ``ATTEMPT``.
REQUIREMENT: Final = "veritask_requires"
ATTEMPT: Final = "attempt"
#: Where the authentication middleware leaves what it found, in the request's state.
PRINCIPAL_STATE: Final = "principal"
SENDER_STATE: Final = "attempt_sender"


def bearer(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None."""
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def platform_of(request: Request) -> Platform:
    """The platform the app was created with."""
    found: Platform = request.app.state.platform
    return found


PlatformDep = Annotated[Platform, Depends(platform_of)]


def require(role: TokenRole) -> Callable[..., views.Principal]:
    """A dependency that admits API tokens whose role includes ``role``."""

    def dependency(
        request: Request,
        platform: PlatformDep,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(api_token)],
    ) -> views.Principal:
        found = getattr(request.state, PRINCIPAL_STATE, None)
        if isinstance(found, views.Principal) and tokens.allows(found, role):
            return found
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

    setattr(dependency, REQUIREMENT, role)
    return dependency


def the_attempt_token(
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(attempt_token)],
) -> str:
    """The attempt token of a callback."""
    if credentials is None or not credentials.credentials:
        raise errors.Unauthenticated("send the attempt token: Authorization: Bearer <token>")
    return credentials.credentials


def the_sender(
    request: Request, platform: PlatformDep, token: Annotated[str, Depends(the_attempt_token)]
) -> views.AttemptSender:
    """The attempt the callback's token names: the only one it may report about."""
    found = getattr(request.state, SENDER_STATE, None)
    if isinstance(found, views.AttemptSender):
        return found
    sender = callbacks.sender_of(platform, token)
    if sender is None:
        raise errors.Unauthenticated("the attempt token names no attempt")
    return sender


setattr(the_sender, REQUIREMENT, ATTEMPT)

Viewer = Annotated[views.Principal, Depends(require(TokenRole.VIEWER))]
Operator = Annotated[views.Principal, Depends(require(TokenRole.OPERATOR))]
Admin = Annotated[views.Principal, Depends(require(TokenRole.ADMIN))]
AttemptToken = Annotated[str, Depends(the_attempt_token)]
AttemptSender = Annotated[views.AttemptSender, Depends(the_sender)]
