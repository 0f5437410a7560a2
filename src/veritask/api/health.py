"""``/healthz`` (the process answers) and ``/readyz`` (the database answers and is migrated).

Neither needs a token: load balancers and orchestrators call them.
"""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from veritask.api import problems, schemas
from veritask.api.security import PlatformDep
from veritask.services import health

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=schemas.Health, summary="The process is up")
def healthz() -> schemas.Health:
    return schemas.Health(status="ok")


@router.get(
    "/readyz",
    response_model=schemas.Readiness,
    responses={503: {"model": schemas.Readiness, "description": "Not ready; `detail` says why"}},
    summary="The database is reachable and migrated",
)
def readyz(platform: PlatformDep, response: Response) -> schemas.Readiness:
    found = health.readiness(platform)
    if not found.ready:
        response.status_code = status.HTTP_503_SERVICE_UNAVAILABLE
        response.headers["Retry-After"] = str(problems.RETRY_AFTER_SECONDS)
    return schemas.Readiness.model_validate(found)
