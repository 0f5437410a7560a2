"""``GET /api/v2/runs``: runs, newest first, by definition, states, trigger kind, logical and
created time, and a text search; one keyset page at a time."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BeforeValidator

from veritask.api import problems, schemas
from veritask.api.security import PlatformDep, Viewer
from veritask.core.states import PublicationState, RunExecutionState, TriggerKind
from veritask.services import run_lists

router = APIRouter(tags=["runs"])


def _iso_8601(value: object) -> object:
    """Only ISO 8601 text: pydantic would also read ``0.5`` as seconds since 1970."""
    if isinstance(value, str):
        try:
            datetime.fromisoformat(value)
        except ValueError:
            raise ValueError("an ISO 8601 date and time, such as 2026-01-31T02:00:00Z") from None
    return value


Moment = Annotated[
    datetime | None,
    BeforeValidator(_iso_8601),
    Query(description="An ISO 8601 date and time; without an offset it is read as UTC"),
]


@router.get(
    "/runs",
    response_model=schemas.RunPage,
    responses=problems.documented(404, 422),
    summary="List runs, newest first, filtered",
)
def list_runs(
    platform: PlatformDep,
    _: Viewer,
    definition: Annotated[str | None, Query(max_length=128)] = None,
    execution_state: Annotated[list[RunExecutionState] | None, Query()] = None,
    state: Annotated[
        list[RunExecutionState] | None, Query(description="The older name of execution_state")
    ] = None,
    publication_state: Annotated[list[PublicationState] | None, Query()] = None,
    trigger_kind: Annotated[list[TriggerKind] | None, Query()] = None,
    logical_from: Moment = None,
    logical_to: Moment = None,
    created_from: Moment = None,
    created_to: Moment = None,
    q: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=run_lists.MAX_TEXT,
            description="Part of the run's id, idempotency key or parameters (any case)",
        ),
    ] = None,
    cursor: Annotated[str | None, Query(max_length=512)] = None,
    limit: Annotated[int, Query(ge=1, le=run_lists.MAX_PAGE)] = 50,
) -> schemas.RunPage:
    """Every filter narrows the list; a repeated state or kind means any of them. Ranges are
    half-open, ``[from, to)``. Pass the answer's ``next_cursor`` as ``cursor`` for the next
    page (with the same filters)."""
    filters = run_lists.RunFilters(
        definition=definition,
        execution_states=[*(execution_state or ()), *(state or ())],
        publication_states=publication_state or (),
        trigger_kinds=trigger_kind or (),
        logical_from=logical_from,
        logical_to=logical_to,
        created_from=created_from,
        created_to=created_to,
        text=q,
    )
    page = run_lists.list_runs(platform, filters, cursor=cursor, limit=limit)
    return schemas.RunPage.model_validate(page)
