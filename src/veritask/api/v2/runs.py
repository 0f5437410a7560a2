"""``/api/v2/runs`` and ``/api/v2/instances``: read runs, instances, histories and logs; cancel;
override."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, status
from fastapi.responses import JSONResponse

from veritask.api import convert, problems, schemas
from veritask.api.security import Operator, PlatformDep, Viewer
from veritask.core.events import OverrideScope
from veritask.core.states import InstanceState
from veritask.services import attestations, logs, overrides, run_instances, runs
from veritask.services.runs import SubjectType

router = APIRouter(tags=["runs"])

After = Annotated[int | None, Query(ge=0, le=2**62, description="Continue after this position")]
Limit = Annotated[int, Query(ge=1, le=runs.MAX_HISTORY)]


@router.get(
    "/runs/{run_id}",
    response_model=schemas.RunDetail,
    responses=problems.documented(404),
    summary="Show a run: both states with reasons, instances with attempts",
)
def get_run(run_id: str, platform: PlatformDep, _: Viewer) -> schemas.RunDetail:
    """A run of more than 500 instances shows its first 500 (in pipeline order) and
    ``instances_next_cursor``; ``GET /runs/{id}/instances?cursor=`` gives the rest."""
    head = run_instances.run_head(platform, run_id)
    return convert.run_detail(head.detail, head.next_cursor)


@router.get(
    "/runs/{run_id}/instances",
    response_model=schemas.InstancePage,
    responses=problems.documented(404, 422),
    summary="A run's instances, a page at a time, in pipeline order",
)
def get_run_instances(
    run_id: str,
    platform: PlatformDep,
    _: Viewer,
    cursor: Annotated[str | None, Query(max_length=2000)] = None,
    limit: Annotated[int, Query(ge=1, le=run_instances.MAX_PAGE)] = run_instances.PAGE,
) -> schemas.InstancePage:
    found = run_instances.instances(platform, run_id, cursor=cursor, limit=limit)
    return schemas.InstancePage.model_validate(
        {"items": found.items, "next_cursor": found.next_cursor}
    )


@router.get(
    "/runs/{run_id}/summary",
    response_model=schemas.Run,
    responses=problems.documented(404),
    summary="A run's states and reasons without its instances (cheap to poll)",
)
def get_run_summary(run_id: str, platform: PlatformDep, _: Viewer) -> schemas.Run:
    return convert.run_summary(runs.get_run_summary(platform, run_id))


@router.get(
    "/runs/{run_id}/attestation",
    response_model=None,
    responses=problems.documented(404),
    summary="A PUBLISHED run's signed attestation: what was published and what it rests on",
)
def get_run_attestation(run_id: str, platform: PlatformDep, _: Viewer) -> JSONResponse:
    """The body (definition version and content hash, parameters, each task's attempt with
    its engine id and token hash, upstream runs, checks, overrides) and its Ed25519
    signature with the key's id; 404 for a run never made PUBLISHED (docs/integrity.md)."""
    return JSONResponse(attestations.of_run(platform, run_id).as_json())


@router.get(
    "/runs/{run_id}/events",
    response_model=schemas.History,
    responses=problems.documented(404, 422),
    summary="The run's history, its instances' included",
)
def run_history(
    run_id: str, platform: PlatformDep, _: Viewer, after: After = None, limit: Limit = 200
) -> schemas.History:
    found = runs.history(platform, SubjectType.RUN, run_id, after=after, limit=limit)
    return schemas.History.model_validate(found)


@router.post(
    "/runs/{run_id}/cancel",
    response_model=schemas.CancelRequested,
    status_code=status.HTTP_202_ACCEPTED,
    responses=problems.documented(404, 409, 413, 422),
    summary="Cancel a run",
)
def cancel_run(
    run_id: str,
    platform: PlatformDep,
    principal: Operator,
    body: schemas.CancelRequest | None = None,
) -> schemas.CancelRequested:
    """Records the request (CANCELLING) and returns; the engine's confirmation moves the run
    to CANCELLED in the background. 409 with ``current_state`` if the run already finished."""
    reason = (body or schemas.CancelRequest()).reason
    found = runs.cancel_run(platform, run_id, actor=principal.actor, reason=reason)
    return schemas.CancelRequested.model_validate(found)


@router.get(
    "/instances/{instance_id}",
    response_model=schemas.InstanceDetail,
    responses=problems.documented(404),
    summary="Show an instance: attempts, progress and history",
)
def get_instance(instance_id: str, platform: PlatformDep, _: Viewer) -> schemas.InstanceDetail:
    return convert.instance_detail(runs.get_instance(platform, instance_id))


@router.get(
    "/instances/{instance_id}/events",
    response_model=schemas.History,
    responses=problems.documented(404, 422),
    summary="The instance's history, its attempts' included",
)
def instance_history(
    instance_id: str, platform: PlatformDep, _: Viewer, after: After = None, limit: Limit = 200
) -> schemas.History:
    found = runs.history(platform, SubjectType.INSTANCE, instance_id, after=after, limit=limit)
    return schemas.History.model_validate(found)


@router.get(
    "/instances/{instance_id}/logs",
    response_model=schemas.LogChunk,
    responses=problems.documented(404, 422),
    summary="Tail, follow or search an attempt's log",
)
def instance_logs(
    instance_id: str,
    platform: PlatformDep,
    _: Viewer,
    attempt: Annotated[int | None, Query(ge=1, le=1_000_000)] = None,
    offset: Annotated[
        int | None, Query(ge=0, le=2**62, description="Read from this byte on (to follow)")
    ] = None,
    tail: Annotated[int, Query(ge=0, le=logs.MAX_CHUNK)] = logs.DEFAULT_TAIL,
    search: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=logs.MAX_CHUNK)] = logs.MAX_CHUNK,
) -> schemas.LogChunk:
    found = logs.read_log(
        platform,
        instance_id,
        attempt_no=attempt,
        offset=offset,
        tail=tail,
        search=search,
        limit=limit,
    )
    return schemas.LogChunk.model_validate(found)


@router.post(
    "/instances/{instance_id}/cancel",
    response_model=schemas.CancelRequested,
    status_code=status.HTTP_202_ACCEPTED,
    responses=problems.documented(404, 409, 413, 422),
    summary="Cancel an instance",
)
def cancel_instance(
    instance_id: str,
    platform: PlatformDep,
    principal: Operator,
    body: schemas.CancelRequest | None = None,
) -> schemas.CancelRequested:
    """Asks the engine to stop the current attempt (CANCELLING); 409 with ``current_state``
    when there is nothing to stop."""
    reason = (body or schemas.CancelRequest()).reason
    found = runs.cancel_instance(platform, instance_id, actor=principal.actor, reason=reason)
    return schemas.CancelRequested.model_validate(found)


@router.post(
    "/instances/{instance_id}/override",
    response_model=schemas.Overridden,
    responses=problems.documented(404, 409, 413, 422),
    summary="Set SUCCESS or FAILED by hand (audited)",
)
def override(
    instance_id: str,
    body: schemas.OverrideRequest,
    platform: PlatformDep,
    principal: Operator,
) -> schemas.Overridden:
    """An operator event on the current attempt epoch, for this instance, its downstream
    tasks, or the whole run. It erases no fact; 409 if an attempt in scope still runs."""
    found = overrides.override(
        platform,
        instance_id,
        to_state=InstanceState(body.state),
        scope=OverrideScope(body.scope),
        reason=body.reason,
        actor=principal.actor,
    )
    return schemas.Overridden.model_validate(found)


@router.get(
    "/logs/search",
    response_model=schemas.LogSearch,
    responses=problems.documented(404, 422),
    summary="Search the logs of a definition's recent runs, a run, or an instance",
)
def search_logs(
    platform: PlatformDep,
    _: Viewer,
    text: Annotated[str, Query(min_length=1, max_length=200)],
    definition: Annotated[str | None, Query(max_length=128)] = None,
    run: Annotated[str | None, Query(max_length=128)] = None,
    instance: Annotated[str | None, Query(max_length=256)] = None,
    limit: Annotated[int, Query(ge=1, le=logs.MAX_MATCHES)] = logs.MAX_MATCHES,
) -> schemas.LogSearch:
    """Matching lines (case-insensitive) with their run, instance, task, attempt and line
    number; exactly one of ``definition``, ``run`` or ``instance``."""
    found = logs.search_logs(
        platform, text, definition=definition, run_id=run, instance_id=instance, max_matches=limit
    )
    return schemas.LogSearch.model_validate(found)
