"""``/api/v2/pools``: list pools, create or resize one, delete one (writes: admins only;
docs/scheduling.md, "Pools and priorities")."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter, Response, status
from pydantic import Field

from veritask.api import problems, schemas
from veritask.api.security import Admin, PlatformDep, Viewer
from veritask.services import pools

router = APIRouter(prefix="/pools", tags=["pools"])


class PoolRequest(schemas.In):
    slots: int = Field(
        ge=0,
        le=pools.MAX_SLOTS,
        description="How many slots the pool has; 0 holds every task that names it",
    )


class Pool(schemas.Out):
    name: str
    slots: int | None = Field(
        description="The pool's slots; null for the default pool while nobody defined it "
        "(unlimited)"
    )
    used: int = Field(description="Slots held by the active attempts that name the pool")
    waiting: int = Field(description="Tasks that may run and wait for the pool's slots")
    actor: str | None = Field(description="Who set the pool's size last")
    updated_at: datetime | None


class PoolList(schemas.Out):
    items: list[Pool]


@router.get(
    "",
    response_model=PoolList,
    responses=problems.documented(),
    summary="List pools with the slots in use",
)
def list_pools(platform: PlatformDep, _: Viewer) -> PoolList:
    return PoolList(items=[Pool.model_validate(p) for p in pools.list_pools(platform)])


@router.get(
    "/{name}", response_model=Pool, responses=problems.documented(404), summary="Show a pool"
)
def get_pool(name: str, platform: PlatformDep, _: Viewer) -> Pool:
    return Pool.model_validate(pools.get_pool(platform, name))


@router.put(
    "/{name}",
    response_model=Pool,
    responses={
        201: {"model": Pool, "description": "The pool was created"},
        **problems.documented(413, 422),
    },
    summary="Create or resize a pool",
)
def set_pool(
    name: str, body: PoolRequest, response: Response, platform: PlatformDep, principal: Admin
) -> Pool:
    """Takes effect at the next opening: tasks waiting for a pool that grew open at once; a
    pool shrunk below the slots in use stops nothing, its running attempts finish. 201 when
    the pool is new, 200 when it was resized."""
    found, created = pools.set_pool(platform, name, slots=body.slots, actor=principal.actor)
    if created:
        response.status_code = status.HTTP_201_CREATED
    return Pool.model_validate(found)


@router.delete(
    "/{name}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=problems.documented(404),
    summary="Delete a pool",
)
def delete_pool(name: str, platform: PlatformDep, _: Admin) -> Response:
    """Running attempts finish; tasks that name the pool wait, saying it is not defined."""
    pools.delete_pool(platform, name)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
