"""``/api/v2/definitions/{name}/backfills`` and ``/api/v2/backfills``: ask for, follow and
cancel backfills (docs/scheduling.md, "Backfill")."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Response, status
from pydantic import AwareDatetime, Field, JsonValue

from veritask.api import problems, schemas
from veritask.api.security import Operator, PlatformDep, Viewer
from veritask.services import backfills

router = APIRouter(tags=["backfills"])


class BackfillRequest(schemas.In):
    start: AwareDatetime = Field(
        alias="from", description="The first logical time in range (inclusive)"
    )
    end: AwareDatetime = Field(alias="to", description="The end of the range (exclusive)")
    parameters: dict[str, JsonValue] = Field(default_factory=dict)
    max_active_runs: int = Field(
        default=1,
        ge=1,
        le=backfills.MAX_ACTIVE_RUNS,
        description="At most this many of the backfill's runs active at once",
    )
    existing: Literal["skip", "failed", "all"] = Field(
        default="skip",
        description="An interval with a run: skip it, clear it if it failed, or rerun it",
    )
    dry_run: bool = Field(default=False, description="Show what would happen; change nothing")
    reason: str | None = Field(default=None, max_length=schemas.MAX_REASON)


class BackfillInterval(schemas.Out):
    logical_time: datetime
    data_interval_start: datetime
    data_interval_end: datetime
    action: Literal["create", "skip", "clear", "rerun"]
    existing_run_id: str | None
    existing_state: str | None
    run_id: str | None
    run_state: str | None


class BackfillProgress(schemas.Out):
    intervals: int
    pending: int = Field(description="Intervals whose run the backfill has not made yet")
    created: int
    running: int = Field(description="Runs queued, running or being cancelled")
    succeeded: int
    failed: int
    cancelled: int
    skipped: int = Field(description="Intervals left as they were (a run existed)")


class Backfill(schemas.Out):
    id: str | None = Field(description="None for a dry run")
    definition: str
    start: datetime = Field(serialization_alias="from")
    end: datetime = Field(serialization_alias="to")
    parameters: dict[str, JsonValue]
    max_active_runs: int
    existing: str
    state: Literal["active", "done", "cancelled", "dry_run"]
    actor: str
    reason: str | None
    created_at: datetime | None
    finished_at: datetime | None
    progress: BackfillProgress
    intervals: list[BackfillInterval] = Field(
        description="Every interval (empty in listings: read the backfill for them)"
    )


class BackfillRequested(schemas.Out):
    created: bool
    backfill: Backfill


class BackfillList(schemas.Out):
    items: list[Backfill]


@router.post(
    "/definitions/{name}/backfills",
    response_model=BackfillRequested,
    status_code=status.HTTP_201_CREATED,
    responses={
        200: {
            "model": BackfillRequested,
            "description": "A dry run, or the same active backfill asked for again",
        },
        **problems.documented(404, 409, 413, 422),
    },
    summary="Backfill a range of logical times",
)
def request_backfill(
    name: str,
    body: BackfillRequest,
    response: Response,
    platform: PlatformDep,
    principal: Operator,
) -> BackfillRequested:
    """One run per fire time of the schedule in ``[from, to)``, each with the logical time
    and data interval the schedule gives it. 201 with the new backfill; 200 for a dry run or
    when the same backfill is active already; 422 for a definition without a schedule."""
    found = backfills.request_backfill(
        platform,
        name,
        start=body.start,
        end=body.end,
        actor=principal.actor,
        parameters=body.parameters,
        max_active_runs=body.max_active_runs,
        existing=body.existing,
        dry_run=body.dry_run,
        reason=body.reason,
    )
    if not found.created:
        response.status_code = status.HTTP_200_OK
    if found.backfill.id is not None:
        response.headers["Location"] = f"/api/v2/backfills/{found.backfill.id}"
    return BackfillRequested.model_validate(found)


@router.get(
    "/backfills",
    response_model=BackfillList,
    responses=problems.documented(404, 422),
    summary="List backfills, newest first",
)
def list_backfills(
    platform: PlatformDep,
    _: Viewer,
    definition: Annotated[str | None, Query(max_length=128)] = None,
    limit: Annotated[int, Query(ge=1, le=backfills.MAX_LISTED)] = 50,
) -> BackfillList:
    found = backfills.list_backfills(platform, definition=definition, limit=limit)
    return BackfillList(items=[Backfill.model_validate(b) for b in found])


@router.get(
    "/backfills/{backfill_id}",
    response_model=Backfill,
    responses=problems.documented(404),
    summary="Show a backfill: its intervals and progress",
)
def get_backfill(backfill_id: str, platform: PlatformDep, _: Viewer) -> Backfill:
    return Backfill.model_validate(backfills.get_backfill(platform, backfill_id))


@router.post(
    "/backfills/{backfill_id}/cancel",
    response_model=Backfill,
    responses=problems.documented(404, 409, 413, 422),
    summary="Cancel a backfill",
)
def cancel_backfill(
    backfill_id: str,
    platform: PlatformDep,
    principal: Operator,
    body: schemas.CancelRequest | None = None,
) -> Backfill:
    """Creates no more runs and cancels the backfill's runs still queued or running; 409 if
    the backfill is done or cancelled already."""
    reason = (body or schemas.CancelRequest()).reason
    found = backfills.cancel_backfill(platform, backfill_id, actor=principal.actor, reason=reason)
    return Backfill.model_validate(found)
