"""``/api/v2/tokens``: create API tokens (admins only)."""

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
