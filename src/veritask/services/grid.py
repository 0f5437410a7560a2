"""A definition's grid: its recent runs (oldest at the left, newest at the right) by its tasks
(in pipeline order), each cell one task's instance in one run, with its state and reason.

The read is two statements whatever the number of runs (``ledger.run_lists``): the newest
runs, then all their instances with their stored states and reasons, never their folds
(decoding 20,000 folds costs more than the rest of the page). Rows written before reasons
were stored are folded once per snapshot version (a third statement, for those alone), and
that (state, reason) is kept, since a snapshot version never changes. A stored version's
pipeline order is kept too, since a version never changes.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from veritask.core import refusals
from veritask.core.states import InstanceState, RunExecutionState
from veritask.definitions import parse
from veritask.ledger import dialects, run_lists
from veritask.ledger.rows import InstanceRow, RunRow
from veritask.services import ordering, reading, views
from veritask.services.errors import InvalidInput
from veritask.services.platform import Platform

DEFAULT_RUNS: Final = 25
MAX_RUNS: Final = 100


@dataclass(frozen=True)
class Cell:
    """One task in one run: the instance (the first of a mapped task's that matters most)."""

    instance_id: str
    state: InstanceState
    reason: str
    instances: int
    """How many instances the task has in this run (more than 1 when it is mapped)."""
    run_id: str = ""
    counts: tuple[tuple[InstanceState, int], ...] = ()
    """An expanded mapped task's instances by state, most first (empty otherwise)."""


@dataclass(frozen=True)
class Row:
    """A task and its cell in each of the grid's runs (None: the task is not in that run)."""

    task: str
    cells: tuple[Cell | None, ...]


@dataclass(frozen=True)
class Grid:
    """The runs as columns, oldest first, and the tasks as rows, in pipeline order."""

    definition: str
    runs: tuple[views.Run, ...]
    rows: tuple[Row, ...]
    durations: tuple[timedelta | None, ...] = ()
    """Each run's duration, in the order of ``runs``: from its creation to its last change
    of state once it ended (None if that was never recorded), or until now while it goes on."""


def definition_grid(platform: Platform, name: str, *, runs: int = DEFAULT_RUNS) -> Grid:
    """The grid of the definition's ``runs`` newest runs (1 to 100)."""
    if not 1 <= runs <= MAX_RUNS:
        raise InvalidInput.about("runs", refusals.BETWEEN.format(low=1, high=MAX_RUNS))
    with dialects.read_transaction(platform.engine) as connection:
        definition = reading.definition_named(connection, name)
        newest = run_lists.newest_runs(connection, definition_id=definition.id, count=runs)
        cells = run_lists.grid_cells(connection, [run.id for run in newest])
        with _LOCK:
            unseen = [
                c.instance_id
                for c in cells
                if c.reason is None and (c.instance_id, c.version) not in _REASONS
            ]
        folded = {
            found.instance_id: _folded(found)
            for found in run_lists.instance_folds(connection, unseen)
        }
        wanted = {run.definition_version for run in newest}
        if definition.current_version is not None:
            wanted.add(definition.current_version)
        missing = {v for v in wanted if ordering.cached_order(definition.id, v) is None}
        for stored in run_lists.definition_versions(
            connection, definition_id=definition.id, versions=missing
        ):
            order = ordering.task_order(parse.definition_from_json(stored.spec))
            ordering.remember_order(definition.id, stored.version, order)
    # The current version's order first, then tasks only older versions had, newest first.
    versions = sorted(wanted, key=lambda v: (v != definition.current_version, -v))
    task_order = _merged(ordering.cached_order(definition.id, v) or () for v in versions)
    columns = list(reversed(newest))
    by_run_and_task: dict[tuple[str, str], list[run_lists.GridCell]] = {}
    for cell in cells:
        by_run_and_task.setdefault((cell.run_id, cell.task_key), []).append(cell)
    extra = sorted({task for _, task in by_run_and_task} - set(task_order))
    rows = tuple(
        Row(
            task,
            tuple(_cell(by_run_and_task.get((run.id, task), ()), folded) for run in columns),
        )
        for task in (*task_order, *extra)
    )
    now = platform.now()
    return Grid(
        name,
        tuple(reading.run_view(run, name) for run in columns),
        rows,
        tuple(_duration(run, now) for run in columns),
    )


#: A run in one of these states has ended; its last change of state is when.
_ENDED: Final = frozenset(
    {RunExecutionState.SUCCESS, RunExecutionState.FAILED, RunExecutionState.CANCELLED}
)


def _duration(run: RunRow, now: datetime) -> timedelta | None:
    if RunExecutionState(run.execution_state) not in _ENDED:
        return max(timedelta(0), now - run.created_at)
    if run.updated_observed_at is None:
        return None
    return max(timedelta(0), run.updated_observed_at - run.created_at)


#: How much a state asks for attention, for the one instance a mapped task's cell shows.
_ATTENTION: Final = {
    "bad": 0,
    "warn": 1,
    "live": 2,
    "waiting": 3,
    "good": 4,
    "muted": 5,
}
_BAD: Final = frozenset(
    {
        InstanceState.FAILED,
        InstanceState.START_FAILED,
        InstanceState.UPSTREAM_FAILED,
        InstanceState.TIMEOUT,
    }
)
_WARN: Final = frozenset(
    {InstanceState.LOST, InstanceState.UP_FOR_RETRY, InstanceState.CANCELLING}
    | {InstanceState.CANCEL_FAILED}
)
_LIVE: Final = frozenset({InstanceState.RUNNING})
_GOOD: Final = frozenset({InstanceState.SUCCESS})
_MUTED: Final = frozenset({InstanceState.CANCELLED, InstanceState.SKIPPED, InstanceState.REMOVED})


def _attention(state: InstanceState) -> int:
    for family, members in (
        ("bad", _BAD),
        ("warn", _WARN),
        ("live", _LIVE),
        ("good", _GOOD),
        ("muted", _MUTED),
    ):
        if state in members:
            return _ATTENTION[family]
    return _ATTENTION["waiting"]


def _cell(
    found: Iterable[run_lists.GridCell], folded: dict[str, tuple[InstanceState, str]]
) -> Cell | None:
    instances = sorted(found, key=lambda c: c.map_index)
    if not instances:
        return None
    # An expanded mapped task is its instances; the one that records the expansion is not.
    mapped = [c for c in instances if c.map_index >= 0]
    instances = mapped or instances
    shown = [(_state_and_reason(c, folded), c) for c in instances]
    (state, reason), chosen = min(shown, key=lambda pair: _attention(pair[0][0]))
    counts: dict[InstanceState, int] = {}
    if mapped:
        for (each, _), _found in shown:
            counts[each] = counts.get(each, 0) + 1
    ordered = tuple(sorted(counts.items(), key=lambda pair: (-pair[1], pair[0].value)))
    return Cell(chosen.instance_id, state, reason, len(instances), chosen.run_id, ordered)


def _state_and_reason(
    cell: run_lists.GridCell, folded: dict[str, tuple[InstanceState, str]]
) -> tuple[InstanceState, str]:
    """The instance's state and reason: as stored, or for a row written before reasons were
    stored, folded just now or kept from an earlier read of the same snapshot version."""
    if cell.reason is not None:
        return InstanceState(cell.state), cell.reason
    just_now = folded.get(cell.instance_id)
    if just_now is not None:
        return just_now
    with _LOCK:
        known = _REASONS.get((cell.instance_id, cell.version))
    if known is not None:
        return known
    state = InstanceState(cell.state)  # forgotten meanwhile: the stored state, no reason yet
    return state, ""


def _folded(found: run_lists.InstanceFold) -> tuple[InstanceState, str]:
    snapshot = reading.snapshot_of(
        InstanceRow(
            id=found.instance_id,
            run_id="",
            task_key="",
            map_index=-1,
            state="",
            epoch=0,
            retry_at=None,
            policy=found.policy,
            version=found.version,
            fold=found.fold,
            updated_observed_at=None,
        )
    )
    result = (snapshot.state, snapshot.reason)
    with _LOCK:
        if len(_REASONS) >= _REASONS_KEPT:
            _REASONS.clear()
        _REASONS[(found.instance_id, found.version)] = result
    return result


def _merged(orders: Iterable[tuple[str, ...]]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(task for order in orders for task in order))


#: Folded (state, reason) by (instance id, snapshot version): a function of rows that never
#: change once written, and a live grid of 100 runs x 200 tasks is read again each time the
#: ledger moves. (Pipeline orders are kept by ``ordering``.)
_REASONS: dict[tuple[str, int], tuple[InstanceState, str]] = {}
_REASONS_KEPT: Final = 200_000
_LOCK = threading.Lock()
