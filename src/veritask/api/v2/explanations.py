"""``GET /api/v2/runs/{id}/explain`` and ``/instances/{id}/explain``: a state as known at an
instant beside what is known now for that instant, and why (docs/explain.md)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import Field, JsonValue

from veritask.api import problems, schemas
from veritask.api.security import PlatformDep, Viewer
from veritask.core.explanation import Axis, ChangeKind
from veritask.core.states import InstanceState, PublicationState, RunExecutionState
from veritask.services import explanations

router = APIRouter(tags=["explain"])

AsOf = Annotated[
    str | None,
    Query(
        max_length=64,
        description=("An RFC 3339 date and time (UTC when it has no offset); absent: the present"),
    ),
]
AxisParameter = Annotated[
    Axis | None,
    Query(
        description=(
            "Only one column: `observed` (what was recorded by as_of: known then) or `event` "
            "(what happened by as_of, learned then or later: known now); absent: both"
        )
    ),
]


class Cause(schemas.Out):
    event_id: str
    kind: str
    actor: str
    attempt_no: int
    event_time: datetime
    observed_at: datetime
    evidence: dict[str, JsonValue]
    outcome: str
    late: bool = Field(description="It happened by as_of but was recorded after it")
    rule: str | None = Field(
        description="The rule of the transition table that allowed the move (a run's: the "
        "reason's phrase); null when no single rule names it"
    )
    rule_why: str | None


class Column(schemas.Out):
    axis: Axis
    state: InstanceState | None = Field(description="Null when no event was in the column yet")
    reason: str | None
    attempt_no: int
    events: int = Field(description="How many events the column folds")
    moved_from: InstanceState | None
    made_by: Cause | None


class RefusedEvent(schemas.Out):
    event_id: str | None
    attempt_no: int | None
    kind: str | None
    actor: str | None
    event_time: datetime | None
    observed_at: datetime
    reason: str
    rule: str | None = Field(description="The rule the event broke (the refusal's phrase key)")
    table_rules: list[str] = Field(
        description="For a move the transition table lacks: the table's rules of its kind"
    )


class Change(schemas.Out):
    kind: ChangeKind
    from_state: str
    to_state: str
    cause: Cause
    operator: str | None
    why: str | None


class InstanceExplanation(schemas.Out):
    id: str
    run_id: str
    task: str
    map_index: int
    as_of: datetime | None
    axis: str = Field(description="both, observed or event")
    known_then: Column | None
    known_now: Column | None
    state_now: InstanceState
    late: list[Cause]
    refused: list[RefusedEvent]
    afterwards: list[Change]


class RunColumn(schemas.Out):
    axis: Axis
    execution_state: RunExecutionState | None
    execution_reason: str | None
    execution_made_by: Cause | None
    publication_state: PublicationState | None
    publication_reason: str | None
    publication_made_by: Cause | None


class RunExplanation(schemas.Out):
    id: str
    definition: str
    as_of: datetime | None
    axis: str
    known_then: RunColumn | None
    known_now: RunColumn | None
    execution_state_now: RunExecutionState
    publication_state_now: PublicationState
    late: list[Cause]
    afterwards: list[Change]
    instances: list[InstanceExplanation]


@router.get(
    "/runs/{run_id}/explain",
    response_model=RunExplanation,
    responses=problems.documented(404, 422),
    summary="A run, its publication and its instances as known at an instant, and now",
)
def explain_run(
    run_id: str, platform: PlatformDep, _: Viewer, as_of: AsOf = None, axis: AxisParameter = None
) -> RunExplanation:
    """`known_then` folds the events recorded by `as_of`; `known_now` those that happened by
    it, including the ones learned later (marked `late`)."""
    moment = explanations.moment(as_of)
    found = explanations.explain_run(platform, run_id, as_of=moment, axis=axis)
    return RunExplanation.model_validate(found)


@router.get(
    "/instances/{instance_id}/explain",
    response_model=InstanceExplanation,
    responses=problems.documented(404, 422),
    summary="An instance as known at an instant, beside what is known now for it",
)
def explain_instance(
    instance_id: str,
    platform: PlatformDep,
    _: Viewer,
    as_of: AsOf = None,
    axis: AxisParameter = None,
) -> InstanceExplanation:
    moment = explanations.moment(as_of)
    found = explanations.explain_instance(platform, instance_id, as_of=moment, axis=axis)
    return InstanceExplanation.model_validate(found)
