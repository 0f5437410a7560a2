"""``/api/v1``: the reads of v2 in the four-value vocabulary older clients know
(docs/state-machine.md, 'The `/api/v1` vocabulary').

Every state is shown as ``state`` (WAITING, RUNNING, SUCCESS, FAILED) with ``raw_state`` beside
it, so nothing is lost on the way down. The mapping is the core's one table
(``core.vocabulary``): run and attempt states share the instance states' names, and the two
attempt-only states map as their instance would end (NOT_RECEIVED and ABANDONED: FAILED).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import JsonValue

from veritask.api import problems, schemas
from veritask.api.security import PlatformDep, Viewer
from veritask.core import vocabulary
from veritask.core.vocabulary import CoarseState
from veritask.services import definitions, runs, views
from veritask.services.runs import SubjectType

router = APIRouter(prefix="/api/v1", tags=["v1"])


def coarse(raw: str) -> CoarseState | None:
    """The v1 value of a raw state name, or None for a name outside the vocabulary."""
    return vocabulary.coarse(raw)


class V1Attempt(schemas.Out):
    attempt_no: int
    state: CoarseState
    raw_state: str
    reason: str
    started_at: datetime | None
    ended_at: datetime | None
    exit_code: int | None
    error_message: str | None = None


class V1Instance(schemas.Out):
    id: str
    run_id: str
    task: str
    state: CoarseState
    raw_state: str
    reason: str
    attempts: list[V1Attempt]


class V1Run(schemas.Out):
    id: str
    definition: str
    state: CoarseState
    raw_state: str
    reason: str | None
    publication_state: str
    created_at: datetime
    logical_time: datetime | None


class V1RunDetail(V1Run):
    instances: list[V1Instance]


class V1RunPage(schemas.Out):
    items: list[V1Run]
    next_cursor: str | None


class V1Event(schemas.Out):
    position: int
    event_id: str
    kind: str
    actor: str
    event_time: datetime
    observed_at: datetime
    evidence: dict[str, JsonValue]
    outcome: str
    reason: str | None
    state: CoarseState | None
    raw_state: str | None


class V1History(schemas.Out):
    subject_type: str
    subject_id: str
    events: list[V1Event]
    next_after: int | None


def _attempt(a: views.Attempt) -> V1Attempt:
    return V1Attempt(
        attempt_no=a.attempt_no,
        state=coarse(a.state.value) or CoarseState.FAILED,
        raw_state=a.state.value,
        reason=a.reason,
        started_at=a.started_at,
        ended_at=a.ended_at,
        exit_code=a.exit_code,
        error_message=a.error_message,
    )


def _instance(i: views.Instance) -> V1Instance:
    return V1Instance(
        id=i.id,
        run_id=i.run_id,
        task=i.task,
        state=coarse(i.state.value) or CoarseState.FAILED,
        raw_state=i.state.value,
        reason=i.reason,
        attempts=[_attempt(a) for a in i.attempts],
    )


def _run_fields(r: views.Run) -> dict[str, object]:
    return {
        "id": r.id,
        "definition": r.definition,
        "state": coarse(r.execution_state.value),
        "raw_state": r.execution_state.value,
        "reason": r.execution_reason,
        "publication_state": r.publication_state.value,
        "created_at": r.created_at,
        "logical_time": r.logical_time,
    }


def _history(h: views.History) -> V1History:
    events = [
        V1Event(
            position=e.position,
            event_id=e.event_id,
            kind=e.kind,
            actor=e.actor,
            event_time=e.event_time,
            observed_at=e.observed_at,
            evidence=e.evidence,
            outcome=e.outcome,
            reason=e.reason,
            state=coarse(e.to_state) if e.to_state else None,
            raw_state=e.to_state,
        )
        for e in h.events
    ]
    return V1History(
        subject_type=h.subject_type, subject_id=h.subject_id, events=events, next_after=h.next_after
    )


After = Annotated[int | None, Query(ge=0, le=2**62)]
Limit = Annotated[int, Query(ge=1, le=runs.MAX_HISTORY)]


@router.get("/definitions", response_model=schemas.DefinitionList, responses=problems.documented())
def list_definitions(platform: PlatformDep, _: Viewer) -> schemas.DefinitionList:
    found = definitions.list_definitions(platform)
    return schemas.DefinitionList(items=[schemas.Definition.model_validate(d) for d in found])


@router.get(
    "/definitions/{name}/events",
    response_model=V1History,
    responses=problems.documented(404, 422),
)
def definition_history(
    name: str, platform: PlatformDep, _: Viewer, after: After = None, limit: Limit = 200
) -> V1History:
    return _history(runs.history(platform, SubjectType.DEFINITION, name, after=after, limit=limit))


@router.get("/runs", response_model=V1RunPage, responses=problems.documented(404, 422))
def list_runs(
    platform: PlatformDep,
    _: Viewer,
    definition: Annotated[str | None, Query(max_length=128)] = None,
    cursor: Annotated[str | None, Query(max_length=512)] = None,
    limit: Annotated[int, Query(ge=1, le=runs.MAX_PAGE)] = 50,
) -> V1RunPage:
    page = runs.list_runs(platform, definition=definition, cursor=cursor, limit=limit)
    return V1RunPage(
        items=[V1Run.model_validate(_run_fields(r)) for r in page.items],
        next_cursor=page.next_cursor,
    )


@router.get("/runs/{run_id}", response_model=V1RunDetail, responses=problems.documented(404))
def get_run(run_id: str, platform: PlatformDep, _: Viewer) -> V1RunDetail:
    found = runs.get_run(platform, run_id)
    return V1RunDetail.model_validate(
        {**_run_fields(found.run), "instances": [_instance(i) for i in found.instances]}
    )


@router.get(
    "/runs/{run_id}/events", response_model=V1History, responses=problems.documented(404, 422)
)
def run_history(
    run_id: str, platform: PlatformDep, _: Viewer, after: After = None, limit: Limit = 200
) -> V1History:
    return _history(runs.history(platform, SubjectType.RUN, run_id, after=after, limit=limit))


@router.get(
    "/instances/{instance_id}", response_model=V1Instance, responses=problems.documented(404)
)
def get_instance(instance_id: str, platform: PlatformDep, _: Viewer) -> V1Instance:
    return _instance(runs.get_instance(platform, instance_id).instance)


@router.get(
    "/instances/{instance_id}/events",
    response_model=V1History,
    responses=problems.documented(404, 422),
)
def instance_history(
    instance_id: str, platform: PlatformDep, _: Viewer, after: After = None, limit: Limit = 200
) -> V1History:
    found = runs.history(platform, SubjectType.INSTANCE, instance_id, after=after, limit=limit)
    return _history(found)
