"""``/api/v2/tokens``: create, list and revoke API tokens (admins only)."""

from __future__ import annotations

from fastapi import APIRouter, status

from veritask.api import problems, schemas
from veritask.api.security import Admin, PlatformDep
from veritask.services import tokens

router = APIRouter(prefix="/tokens", tags=["tokens"])


@router.post(
    "",
    response_model=schemas.NewToken,
    status_code=status.HTTP_201_CREATED,
    responses=problems.documented(413, 422),
    summary="Create an API token",
)
def create_token(body: schemas.TokenRequest, platform: PlatformDep, _: Admin) -> schemas.NewToken:
    """The token is in this answer only; the server keeps its hash."""
    created = tokens.create_token(platform, role=body.role, name=body.name)
    return schemas.NewToken.model_validate(created)


@router.get(
    "",
    response_model=schemas.TokenList,
    responses=problems.documented(),
    summary="List API tokens (never the tokens themselves)",
)
def list_tokens(platform: PlatformDep, _: Admin) -> schemas.TokenList:
    found = tokens.list_tokens(platform)
    return schemas.TokenList(items=[schemas.TokenInfo.model_validate(t) for t in found])


@router.post(
    "/{token_id}/revoke",
    response_model=schemas.TokenInfo,
    responses=problems.documented(404, 409),
    summary="Revoke an API token",
)
def revoke_token(token_id: str, platform: PlatformDep, _: Admin) -> schemas.TokenInfo:
    """From now on the token authenticates nobody; revoking it again changes nothing. 409 for
    the last admin token that still works."""
    return schemas.TokenInfo.model_validate(tokens.revoke_token(platform, token_id))
