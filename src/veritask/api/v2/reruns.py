"""``/api/v2/runs/{id}/clear`` and ``/api/v2/runs/{id}/rerun``: run a finished run's work again,
in the same run (clear) or in a new one (rerun). See services/reruns.py."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, status
from pydantic import Field, JsonValue

from veritask.api import problems
from veritask.api.schemas import MAX_KEY, MAX_REASON, In, Out
from veritask.api.security import Operator, PlatformDep
from veritask.core.states import InstanceState, PublicationState, RunExecutionState
from veritask.services import reruns

router = APIRouter(tags=["runs"])

#: A task key (definitions/model.py keeps them short slugs).
TaskKey = Annotated[str, Field(min_length=1, max_length=128)]


class ClearRequest(In):
    failed: bool = Field(
        default=False,
        description="Clear every FAILED, UPSTREAM_FAILED, TIMEOUT, START_FAILED, CANCELLED "
        "and CANCEL_FAILED instance",
    )
    tasks: list[TaskKey] = Field(
        default_factory=list, max_length=1000, description="Or: clear these tasks"
    )
    downstream: bool = Field(default=True, description="Clear what runs after them too")
    reason: str = Field(min_length=1, max_length=MAX_REASON)


class ClearedInstance(Out):
    instance_id: str
    task: str
    previous_state: InstanceState
    next_attempt: int = Field(description="The attempt number the instance opens next")


class Cleared(Out):
    run_id: str
    scope: str
    downstream: bool
    reason: str
    instances: list[ClearedInstance]
    execution_state: RunExecutionState
    publication_state: PublicationState


class RerunRequest(In):
    parameters: dict[str, JsonValue] = Field(
        default_factory=dict, description="Merged over the old run's parameters"
    )
    version: Literal["same", "latest"] = Field(
        default="same", description="The old run's definition version, or the current one"
    )
    key: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_KEY,
        description="Idempotency key; derived from the request when not given",
    )
    reason: str | None = Field(default=None, min_length=1, max_length=MAX_REASON)


class Rerun(Out):
    run_id: str
    created: bool
    rerun_of: str
    idempotency_key: str
    definition_version: int
    parameters: dict[str, JsonValue]
    execution_state: RunExecutionState
    reason: str


@router.post(
    "/runs/{run_id}/clear",
    response_model=Cleared,
    status_code=status.HTTP_202_ACCEPTED,
    responses=problems.documented(404, 409, 413, 422),
    summary="Clear instances of a run to run them again in the same run (audited)",
)
def clear_run(
    run_id: str, body: ClearRequest, platform: PlatformDep, principal: Operator
) -> Cleared:
    """Each cleared instance opens a new attempt in this run (earlier attempts stay); what runs
    after it waits and is decided again; the run goes back to RUNNING. 409 naming an active
    instance in scope; 404 for an unknown run or task."""
    found = reruns.clear(
        platform,
        run_id,
        failed=body.failed,
        tasks=body.tasks,
        downstream=body.downstream,
        reason=body.reason,
        actor=principal.actor,
    )
    return Cleared.model_validate(found)


@router.post(
    "/runs/{run_id}/rerun",
    response_model=Rerun,
    status_code=status.HTTP_202_ACCEPTED,
    responses=problems.documented(404, 409, 413, 422),
    summary="Rerun a run as a new run (trigger_kind rerun, rerun_of the old run)",
)
def rerun_run(
    run_id: str, platform: PlatformDep, principal: Operator, body: RerunRequest | None = None
) -> Rerun:
    """The same logical time and data interval, the old parameters with ``parameters`` merged
    over them; the old run is untouched. The same request again returns the same new run."""
    request = body or RerunRequest()
    found = reruns.rerun(
        platform,
        run_id,
        parameters=request.parameters,
        version=request.version,
        key=request.key,
        reason=request.reason,
        actor=principal.actor,
    )
    return Rerun.model_validate(found)
