"""``/api/v2/definitions``: apply, read, enable, disable, delete; and trigger a run."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response, status
from starlette.concurrency import run_in_threadpool

from veritask.api import convert, problems, schemas
from veritask.api.security import Admin, Operator, PlatformDep, Viewer
from veritask.core import refusals
from veritask.core.states import TriggerKind
from veritask.services import definitions, errors, runs
from veritask.services.runs import SubjectType

router = APIRouter(prefix="/definitions", tags=["definitions"])

_YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml", "text/plain")

_APPLY_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/ApplyDefinition"}},
            "application/yaml": {"schema": {"type": "string"}},
        },
    }
}


@router.get(
    "",
    response_model=schemas.DefinitionList,
    responses=problems.documented(),
    summary="List definitions",
)
def list_definitions(platform: PlatformDep, _: Viewer) -> schemas.DefinitionList:
    found = definitions.list_definitions(platform)
    return schemas.DefinitionList(items=[schemas.Definition.model_validate(d) for d in found])


@router.post(
    "",
    response_model=schemas.AppliedDefinition,
    status_code=status.HTTP_201_CREATED,
    responses={
        200: {"model": schemas.AppliedDefinition, "description": "The same content: unchanged"},
        **problems.documented(409, 413, 422),
    },
    openapi_extra=_APPLY_BODY,
    summary="Apply a definition (YAML or JSON)",
)
async def apply_definition(
    request: Request, response: Response, platform: PlatformDep, principal: Admin
) -> schemas.AppliedDefinition:
    """Send ``{"source": "<YAML or JSON>"}``, or the YAML itself with a YAML content type.

    201 when a new version was saved, 200 when a version with this content exists already.
    """
    source = await _source(request)
    # The services are synchronous: run them off the event loop, as FastAPI does for def routes.
    applied = await run_in_threadpool(
        definitions.apply_definition, platform, source, actor=principal.actor
    )
    if not applied.created:
        response.status_code = status.HTTP_200_OK
    return schemas.AppliedDefinition.model_validate(applied)


async def _source(request: Request) -> str:
    body = await request.body()
    content_type = request.headers.get("content-type", "application/json").split(";")[0].strip()
    try:
        text = body.decode()
    except UnicodeDecodeError:
        raise errors.UnreadableInput.about("body", refusals.NOT_UTF8.format()) from None
    if content_type in _YAML_TYPES:
        return text
    if content_type != "application/json":
        raise errors.InvalidInput.about(
            "content-type", f"send application/json or application/yaml, not {content_type}"
        )
    try:
        return schemas.ApplyDefinition.model_validate_json(body).source
    except ValueError as exc:
        raise errors.InvalidInput.about(
            "body", f'expected {{"source": "<YAML or JSON text>"}}: {exc}'
        ) from None


@router.get(
    "/{name}",
    response_model=schemas.DefinitionDetail,
    responses=problems.documented(404),
    summary="Show a definition with its versions",
)
def get_definition(name: str, platform: PlatformDep, _: Viewer) -> schemas.DefinitionDetail:
    return convert.definition_detail(definitions.get_definition(platform, name))


@router.post(
    "/{name}/enable",
    response_model=schemas.Definition,
    responses=problems.documented(404, 409),
    summary="Let the definition start runs again",
)
def enable(name: str, platform: PlatformDep, principal: Admin) -> schemas.Definition:
    found = definitions.set_enabled(platform, name, enabled=True, actor=principal.actor)
    return schemas.Definition.model_validate(found)


@router.post(
    "/{name}/disable",
    response_model=schemas.Definition,
    responses=problems.documented(404, 409),
    summary="Start no new runs (schedule, triggers, backfills); active runs go on",
)
def disable(name: str, platform: PlatformDep, principal: Admin) -> schemas.Definition:
    found = definitions.set_enabled(platform, name, enabled=False, actor=principal.actor)
    return schemas.Definition.model_validate(found)


@router.delete(
    "/{name}",
    response_model=schemas.Deletion,
    status_code=status.HTTP_202_ACCEPTED,
    responses=problems.documented(404, 409),
    summary="Delete a definition (a lifecycle: deleting, deleted, purging, purged)",
)
def delete(
    name: str,
    platform: PlatformDep,
    principal: Admin,
    purge: Annotated[
        bool,
        Query(
            description="Purge the attempts' folders, logs and results as soon as the runs "
            "stopped, not after the retention window"
        ),
    ] = False,
) -> schemas.Deletion:
    """Disables the definition and cancels its active runs; it is ``deleted`` once the
    engines confirmed every stop (history stays readable, the name may be applied again),
    then purged after the retention window or, with ``purge``, at once. 202: the rest
    happens in the background."""
    found = definitions.delete_definition(platform, name, actor=principal.actor, purge=purge)
    return schemas.Deletion.model_validate(found)


@router.get(
    "/{name}/events",
    response_model=schemas.History,
    responses=problems.documented(404, 422),
    summary="The definition's history: versions and lifecycle steps",
)
def definition_history(
    name: str,
    platform: PlatformDep,
    _: Viewer,
    after: Annotated[int | None, Query(ge=0, le=2**62)] = None,
    limit: Annotated[int, Query(ge=1, le=runs.MAX_HISTORY)] = 200,
) -> schemas.History:
    found = runs.history(platform, SubjectType.DEFINITION, name, after=after, limit=limit)
    return schemas.History.model_validate(found)


@router.post(
    "/{name}/runs",
    response_model=schemas.Triggered,
    status_code=status.HTTP_202_ACCEPTED,
    responses={
        200: {"model": schemas.Triggered, "description": "A run with this key existed"},
        **problems.documented(404, 409, 413, 422),
    },
    summary="Trigger a run",
)
def trigger(
    name: str,
    body: schemas.TriggerRun,
    response: Response,
    platform: PlatformDep,
    principal: Operator,
) -> schemas.Triggered:
    """Records the run and returns its id (202); the scheduler runs it in the background. A
    trigger with an idempotency key that exists returns that run (200), or 409 if that run
    was triggered with other parameters."""
    kind = TriggerKind(body.trigger_kind)
    triggered = runs.trigger_run(
        platform,
        name,
        actor=principal.actor if kind is TriggerKind.MANUAL else "api",
        kind=kind,
        parameters=body.parameters,
        key=body.idempotency_key,
        logical_time=body.logical_time,
    )
    if not triggered.created:
        response.status_code = status.HTTP_200_OK
    response.headers["Location"] = f"/api/v2/runs/{triggered.run_id}"
    return schemas.Triggered.model_validate(triggered)
