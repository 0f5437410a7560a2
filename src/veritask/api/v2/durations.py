"""Durations from transition times: a run's phases per instance, its timeline, and a
definition's p50/p95 over its recent runs (docs/state-machine.md, 'Durations')."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import Field

from veritask.api import problems, schemas
from veritask.api.security import PlatformDep, Viewer
from veritask.services import durations
from veritask.services.durations import Phase

router = APIRouter(tags=["durations"])

SECONDS = "Seconds per phase (closed intervals only): dependency_wait, queue, execution, retry_wait"


class PhaseInterval(schemas.Out):
    phase: Phase
    attempt_no: int
    start: datetime
    end: datetime | None = Field(description="Null while the phase goes on")
    clock_skew_seconds: float | None = Field(
        default=None,
        description=(
            "Set when the end was stamped this many seconds before the start although the "
            "platform learned of it after: the clocks disagree, the phase is shown zero long"
        ),
    )


class InstanceTimeline(schemas.Out):
    instance_id: str
    task_key: str
    map_index: int
    state: str
    phases: list[PhaseInterval]
    seconds: dict[str, float] = Field(description=SECONDS)


class RunDurations(schemas.Out):
    run_id: str
    definition: str
    seconds: dict[str, float] = Field(description=SECONDS + ", summed over the instances")
    instances: list[InstanceTimeline]


class PhaseStatistics(schemas.Out):
    count: int
    p50: float
    p95: float


class DefinitionDurations(schemas.Out):
    definition: str
    runs: int = Field(description="How many of the newest runs were read")
    tasks: dict[str, dict[str, PhaseStatistics]] = Field(
        description="Task key (`*` for every task) -> phase -> seconds"
    )


@router.get(
    "/runs/{run_id}/durations",
    response_model=RunDurations,
    responses=problems.documented(404),
    summary="Where a run's time went: per instance and phase, with the phase intervals",
)
def run_durations(run_id: str, platform: PlatformDep, _: Viewer) -> RunDurations:
    return RunDurations.model_validate(durations.run_durations(platform, run_id))


@router.get(
    "/definitions/{name}/durations",
    response_model=DefinitionDurations,
    responses=problems.documented(404, 422),
    summary="p50/p95 of each phase per task over the definition's newest runs",
)
def definition_durations(
    name: str,
    platform: PlatformDep,
    _: Viewer,
    runs: Annotated[int, Query(ge=1, le=durations.MAX_RECENT_RUNS)] = durations.DEFAULT_RECENT_RUNS,
) -> DefinitionDurations:
    found = durations.definition_durations(platform, name, recent_runs=runs)
    return DefinitionDurations.model_validate(found)
