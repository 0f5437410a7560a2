"""Backfills: ask for every fire time of a schedule in ``[from, to)``, follow and cancel them.

The scheduling layer plans and moves a backfill (scheduling/backfills.py); this module checks
the request, turns the lower layers' refusals into the services' errors, and shapes what the
API, the CLI and the web UI show: each interval with what happens (or happened) to it, and
the progress of the runs the backfill made.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from veritask.core import refusals
from veritask.core.jsontypes import JSONObject, JSONValue
from veritask.core.states import RunExecutionState
from veritask.definitions.parameters import InvalidParameters
from veritask.ledger import backfills as store
from veritask.ledger import dialects, queries
from veritask.scheduling import backfills, triggers
from veritask.services import reading
from veritask.services.errors import Conflict, FieldProblem, InvalidInput, NotFound
from veritask.services.platform import Platform

MAX_ACTIVE_RUNS: Final = 1000
MAX_LISTED: Final = 200
EXISTING_CHOICES: Final = backfills.EXISTING_CHOICES

_RUNNING = frozenset(store.ACTIVE_RUN_STATES)


@dataclass(frozen=True)
class Interval:
    """One fire time of the range: its data interval, what the backfill does with it, and the
    run that stands for it (the existing one when skipped)."""

    logical_time: datetime
    data_interval_start: datetime
    data_interval_end: datetime
    action: str
    existing_run_id: str | None
    existing_state: str | None
    run_id: str | None
    run_state: str | None


@dataclass(frozen=True)
class Progress:
    """The backfill's intervals by what became of them."""

    intervals: int
    pending: int
    created: int
    running: int
    succeeded: int
    failed: int
    cancelled: int
    skipped: int


@dataclass(frozen=True)
class Backfill:
    """A backfill (``id`` is None and ``state`` is ``dry_run`` for a preview)."""

    id: str | None
    definition: str
    start: datetime
    end: datetime
    parameters: JSONObject
    max_active_runs: int
    existing: str
    state: str
    actor: str
    reason: str | None
    created_at: datetime | None
    finished_at: datetime | None
    progress: Progress
    intervals: tuple[Interval, ...]


@dataclass(frozen=True)
class Requested:
    """The answer to a backfill request: the backfill, and whether this request made it."""

    backfill: Backfill
    created: bool


def request_backfill(
    platform: Platform,
    name: str,
    *,
    start: datetime,
    end: datetime,
    actor: str,
    parameters: Mapping[str, JSONValue] | None = None,
    max_active_runs: int = 1,
    existing: str = backfills.SKIP,
    dry_run: bool = False,
    reason: str | None = None,
) -> Requested:
    """Plan (``dry_run``) or record a backfill and create its first runs.

    An active backfill asked for again with the same range, parameters and ``existing`` is
    returned as it is (``created`` false); so is one whose intervals all have runs already.
    """
    if end < start:
        raise InvalidInput.about("to", refusals.TO_BEFORE_FROM.format())
    if existing not in EXISTING_CHOICES:
        raise InvalidInput.about(
            "existing", refusals.BACKFILL_EXISTING.format(choices=", ".join(EXISTING_CHOICES))
        )
    if not 1 <= max_active_runs <= MAX_ACTIVE_RUNS:
        raise InvalidInput.about(
            "max_active_runs", refusals.BETWEEN.format(low=1, high=MAX_ACTIVE_RUNS)
        )
    request = backfills.Request(
        name=name,
        start=start,
        end=end,
        actor=actor,
        parameters=dict(parameters or {}),
        max_active_runs=max_active_runs,
        existing=existing,
        reason=(reason or "").strip() or None,
    )
    with _refusals(platform, name):
        if dry_run:
            _, checked, planned = backfills.plan(platform.ledger, request)
            return Requested(_preview(request, checked, planned), False)
        started = backfills.start_backfill(platform.ledger, request)
    assert started.backfill_id is not None
    return Requested(get_backfill(platform, started.backfill_id), started.created)


def list_backfills(
    platform: Platform, *, definition: str | None = None, limit: int = 50
) -> tuple[Backfill, ...]:
    """Backfills, newest first (without their intervals: ``get_backfill`` has them)."""
    if not 1 <= limit <= MAX_LISTED:
        raise InvalidInput.about("limit", refusals.BETWEEN.format(low=1, high=MAX_LISTED))
    with dialects.read_transaction(platform.engine) as connection:
        definition_id = None
        if definition is not None:
            definition_id = reading.definition_named(connection, definition).id
        rows = store.listing(connection, definition_id=definition_id, limit=limit)
        ids = [row.id for row in rows]
        counts = store.progress(connection, ids)
        skipped = store.skipped_counts(connection, ids)
        names = queries.definition_names(connection, {row.definition_id for row in rows})
    return tuple(
        _view(row, names.get(row.definition_id, ""), counts.get(row.id, {}), skipped, ())
        for row in rows
    )


def get_backfill(platform: Platform, backfill_id: str) -> Backfill:
    """A backfill with its intervals and progress."""
    with dialects.read_transaction(platform.engine) as connection:
        row = store.get(connection, backfill_id)
        if row is None:
            raise NotFound(refusals.NO_BACKFILL.format(backfill_id=backfill_id))
        intervals = store.intervals_of(connection, backfill_id)
        counts = store.progress(connection, [backfill_id])
        skipped = store.skipped_counts(connection, [backfill_id])
        names = queries.definition_names(connection, [row.definition_id])
    return _view(
        row,
        names.get(row.definition_id, ""),
        counts.get(backfill_id, {}),
        skipped,
        tuple(Interval(*interval) for interval in intervals),
    )


def cancel_backfill(platform: Platform, backfill_id: str, *, actor: str, reason: str) -> Backfill:
    """Create no more runs, and cancel the backfill's runs still queued or running."""
    text = reason.strip()
    if not text:
        raise InvalidInput.about("reason", refusals.CANCEL_NEEDS_REASON.format())
    try:
        backfills.cancel(platform.ledger, backfill_id, actor=actor, reason=text)
    except triggers.NotFound as exc:
        raise NotFound(str(exc)) from None
    except triggers.Refused as exc:
        with dialects.read_transaction(platform.engine) as connection:
            row = store.get(connection, backfill_id)
        raise Conflict(str(exc), current_state=row.state if row else None) from None
    return get_backfill(platform, backfill_id)


# -- shaping -----------------------------------------------------------------------------------


@contextmanager
def _refusals(platform: Platform, name: str) -> Iterator[None]:
    """The scheduling layer's refusals of a backfill as the services' errors."""
    try:
        yield
    except triggers.NotFound as exc:
        raise NotFound(str(exc)) from None
    except InvalidParameters as exc:
        found = [FieldProblem(p.field, None, p.message) for p in exc.problems]
        raise InvalidInput(str(exc), found) from None
    except backfills.TooManyIntervals as exc:
        raise InvalidInput.about("to", str(exc)) from None
    except backfills.NoSchedule as exc:
        # 422 naming the definition: the request, not the definition's state, is at fault.
        raise InvalidInput(str(exc), [FieldProblem("name", None, str(exc))]) from None
    except triggers.Refused as exc:
        with dialects.read_transaction(platform.engine) as connection:
            row = queries.get_definition(connection, name=name)
        raise Conflict(str(exc), current_state=row.lifecycle if row else None) from None


def _preview(
    request: backfills.Request, checked: JSONObject, planned: list[store.PlannedInterval]
) -> Backfill:
    intervals = tuple(Interval(*interval, run_id=None, run_state=None) for interval in planned)
    owned = sum(i.action in store.OWNING_ACTIONS for i in planned)
    return Backfill(
        id=None,
        definition=request.name,
        start=request.start,
        end=request.end,
        parameters=checked,
        max_active_runs=request.max_active_runs,
        existing=request.existing,
        state="dry_run",
        actor=request.actor,
        reason=request.reason,
        created_at=None,
        finished_at=None,
        progress=Progress(len(planned), owned, 0, 0, 0, 0, 0, len(planned) - owned),
        intervals=intervals,
    )


def _view(
    row: store.BackfillRow,
    name: str,
    counts: Mapping[str | None, int],
    skipped: Mapping[str, int],
    intervals: tuple[Interval, ...],
) -> Backfill:
    pending = counts.get(None, 0)
    owned = sum(counts.values())
    left = skipped.get(row.id, 0)
    return Backfill(
        id=row.id,
        definition=name,
        start=row.range_start,
        end=row.range_end,
        parameters=row.parameters,
        max_active_runs=row.max_active_runs,
        existing=row.existing,
        state=row.state,
        actor=row.actor,
        reason=row.reason,
        created_at=row.created_at,
        finished_at=row.finished_at,
        progress=Progress(
            intervals=owned + left,
            pending=pending,
            created=owned - pending,
            running=sum(n for state, n in counts.items() if state in _RUNNING),
            succeeded=counts.get(RunExecutionState.SUCCESS.value, 0),
            failed=counts.get(RunExecutionState.FAILED.value, 0),
            cancelled=counts.get(RunExecutionState.CANCELLED.value, 0),
            skipped=left,
        ),
        intervals=intervals,
    )
