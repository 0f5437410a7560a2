"""Durations of runs and definitions from their transition times (docs/state-machine.md, Durations).

``run_timeline`` gives the phase intervals of every instance of a run (what a Gantt chart
draws); ``run_durations`` the time per phase of each instance and of the run; and
``definition_durations`` the p50/p95 per task and phase over a definition's recent runs. The
arithmetic is the pure :mod:`veritask.core.durations`; this module reads and folds.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Final

from veritask.core import durations, refusals
from veritask.core.durations import Phase, PhaseInterval
from veritask.core.fold import fold
from veritask.core.policy import TaskPolicy
from veritask.ledger import dialects, queries, timelines
from veritask.ledger.database import Connection
from veritask.ledger.rows import RunRow
from veritask.services import ordering, reading
from veritask.services.errors import InvalidInput, NotFound
from veritask.services.platform import Platform

__all__ = ["Phase", "PhaseInterval", "definition_durations", "run_durations", "run_timeline"]

DEFAULT_RECENT_RUNS: Final = 20
MAX_RECENT_RUNS: Final = 500
#: The task key under which statistics over every task of a definition are given.
ALL_TASKS: Final = "*"


@dataclass(frozen=True)
class InstanceTimeline:
    """One instance of a run and the intervals of its phases, attempt by attempt."""

    instance_id: str
    task_key: str
    map_index: int
    state: str
    phases: tuple[PhaseInterval, ...]

    @property
    def seconds(self) -> dict[str, float]:
        """Time spent in each phase (closed intervals), in seconds."""
        return {
            phase.value: spent.total_seconds()
            for phase, spent in durations.totals(self.phases).items()
        }


@dataclass(frozen=True)
class RunDurations:
    """A run's time per phase: per instance, and summed over its instances."""

    run_id: str
    definition: str
    instances: tuple[InstanceTimeline, ...]

    @property
    def seconds(self) -> dict[str, float]:
        found: dict[str, float] = {}
        for instance in self.instances:
            for phase, value in instance.seconds.items():
                found[phase] = found.get(phase, 0.0) + value
        return found


@dataclass(frozen=True)
class PhaseStatistics:
    """Percentiles of one phase's time over instances (seconds)."""

    count: int
    p50: float
    p95: float


@dataclass(frozen=True)
class DefinitionDurations:
    """p50/p95 per task (and over all tasks, ``*``) and phase, over the newest runs."""

    definition: str
    runs: int
    tasks: dict[str, dict[str, PhaseStatistics]]


def run_timeline(
    platform: Platform, run_id: str, *, only: Collection[str] | None = None
) -> list[InstanceTimeline]:
    """Per instance of the run (or of those ``only`` names), in pipeline order: task key,
    state and the phase intervals (start/end UTC datetimes; ``end`` None while a phase goes
    on). ``NotFound`` if there is no such run."""
    with dialects.read_transaction(platform.engine) as connection:
        run = queries.get_run(connection, run_id)
        if run is None:
            raise NotFound(refusals.NO_RUN.format(run_id=run_id))
        instances = _instances_in_pipeline_order(connection, run)
    return [_timeline_of(i) for i in instances if only is None or i.id in only]


def run_durations(platform: Platform, run_id: str) -> RunDurations:
    """Time per phase of each instance of the run, and of the run."""
    with dialects.read_transaction(platform.engine) as connection:
        run = queries.get_run(connection, run_id)
        if run is None:
            raise NotFound(refusals.NO_RUN.format(run_id=run_id))
        definition = queries.definition_names(connection, [run.definition_id])
        instances = _instances_in_pipeline_order(connection, run)
    return RunDurations(
        run_id,
        definition.get(run.definition_id, ""),
        tuple(_timeline_of(instance) for instance in instances),
    )


def definition_durations(
    platform: Platform, name: str, *, recent_runs: int = DEFAULT_RECENT_RUNS
) -> DefinitionDurations:
    """p50 and p95 of each phase, over all tasks (first) and per task in the current
    version's pipeline order (tasks only older versions had after, by name)."""
    if not 1 <= recent_runs <= MAX_RECENT_RUNS:
        raise InvalidInput.about("runs", refusals.BETWEEN.format(low=1, high=MAX_RECENT_RUNS))
    with dialects.read_transaction(platform.engine) as connection:
        row = reading.definition_named(connection, name)
        run_ids = timelines.recent_run_ids(connection, row.id, limit=recent_runs)
        histories = timelines.instance_histories(connection, run_ids)
        order: tuple[str, ...] = ()
        if row.current_version is not None:
            order = ordering.version_order(connection, row.id, row.current_version)
    samples: dict[str, dict[str, list[float]]] = {}
    for history in histories:
        for phase, value in _timeline(history).seconds.items():
            for task in (history.task_key, ALL_TASKS):
                samples.setdefault(task, {}).setdefault(phase, []).append(value)
    return DefinitionDurations(
        name,
        len(run_ids),
        {
            task: {phase: _statistics(values) for phase, values in phases.items()}
            for task, phases in ordering.in_pipeline_order(
                samples.items(), (ALL_TASKS, *order), task=lambda pair: pair[0], index=lambda _: 0
            )
        },
    )


def _instances_in_pipeline_order(connection: Connection, run: RunRow) -> list[queries.InstanceText]:
    order = ordering.version_order(connection, run.definition_id, run.definition_version)
    return ordering.in_pipeline_order(
        queries.instance_texts_of_run(connection, run.id),
        order,
        task=lambda i: i.task_key,
        index=lambda i: i.map_index,
    )


def _timeline_of(instance: queries.InstanceText) -> InstanceTimeline:
    """From the stored snapshot, which is what folding the instance's events gives: a run's
    page reads its phases without reading its events again."""
    snapshot = reading.snapshot_of_text(instance)
    return InstanceTimeline(
        instance.id,
        instance.task_key,
        instance.map_index,
        instance.state,
        tuple(durations.observed_phases(snapshot)),
    )


def _statistics(values: Sequence[float]) -> PhaseStatistics:
    return PhaseStatistics(
        len(values), durations.percentile(values, 0.5), durations.percentile(values, 0.95)
    )


def _timeline(history: timelines.InstanceHistory) -> InstanceTimeline:
    snapshot = fold(history.instance_id, history.events, TaskPolicy.from_json(history.policy))
    return InstanceTimeline(
        history.instance_id,
        history.task_key,
        history.map_index,
        history.state,
        tuple(durations.observed_phases(snapshot)),
    )
