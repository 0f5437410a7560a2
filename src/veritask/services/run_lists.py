"""The runs list: filters, text search and keyset pages, newest first (``GET /api/v2/runs``,
``veritask runs``, ``/ui/runs``).

Every range is half-open, ``[from, to)``. A time without a zone is read as UTC here; the web
UI reads the times of its form in the viewer's zone before it asks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from veritask.core import refusals
from veritask.core.states import PublicationState, RunExecutionState, TriggerKind
from veritask.ledger import dialects, pagination, queries, run_lists
from veritask.ledger.rows import RunRow
from veritask.services import reading, views
from veritask.services.errors import InvalidInput
from veritask.services.platform import Platform

MAX_PAGE: Final = 200
MAX_TEXT: Final = 200


@dataclass(frozen=True)
class RunFilters:
    """What the list keeps; empty or None means "any"."""

    definition: str | None = None
    execution_states: Collection[RunExecutionState] = ()
    publication_states: Collection[PublicationState] = ()
    trigger_kinds: Collection[TriggerKind] = ()
    logical_from: datetime | None = None
    logical_to: datetime | None = None
    created_from: datetime | None = None
    created_to: datetime | None = None
    text: str | None = None


@dataclass(frozen=True)
class RunList:
    """One page of runs, newest first, with the cursors of the pages on either side."""

    items: tuple[views.Run, ...]
    next_cursor: str | None
    """Older runs: pass as ``cursor``; None on the last page."""
    previous_cursor: str | None
    """Newer runs: pass as ``before``; None on the first page."""


def list_runs(
    platform: Platform,
    filters: RunFilters,
    *,
    cursor: str | None = None,
    before: str | None = None,
    limit: int = 50,
) -> RunList:
    """The runs that match every filter, one keyset page at a time.

    ``cursor`` continues after the previous page's ``next_cursor`` (older runs); ``before``
    goes back from a page's ``previous_cursor`` (newer runs). A definition that does not
    exist is a 404, like ``GET /runs?definition=`` has always answered.
    """
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidInput.about("limit", refusals.BETWEEN.format(low=1, high=MAX_PAGE))
    after_position = _cursor("cursor", cursor)
    before_position = _cursor("before", before)
    wanted = _ledger_filter(filters)
    with dialects.read_transaction(platform.engine) as connection:
        definition_id = None
        if filters.definition is not None:
            definition_id = reading.definition_named(connection, filters.definition).id
        page = run_lists.filtered_runs(
            connection,
            dataclasses.replace(wanted, definition_id=definition_id),
            after=after_position,
            before=before_position,
            limit=limit,
        )
        names = queries.definition_names(connection, (r.definition_id for r in page.items))
    items = tuple(reading.run_view(r, names.get(r.definition_id, "")) for r in page.items)
    first, last = (page.items[0], page.items[-1]) if page.items else (None, None)
    came_back = after_position is not None or (before_position is not None and page.more_before)
    return RunList(
        items,
        _encoded(last) if page.more_after and last else None,
        _encoded(first) if came_back and first else None,
    )


def _ledger_filter(filters: RunFilters) -> run_lists.RunFilter:
    text = filters.text.strip() if filters.text else None
    if text is not None and len(text) > MAX_TEXT:
        raise InvalidInput.about("q", refusals.AT_MOST_CHARACTERS.format(n=MAX_TEXT))
    logical_from = _utc("logical_from", filters.logical_from)
    logical_to = _utc("logical_to", filters.logical_to)
    created_from = _utc("created_from", filters.created_from)
    created_to = _utc("created_to", filters.created_to)
    for start, end, names in (
        (logical_from, logical_to, ("logical_from", "logical_to")),
        (created_from, created_to, ("created_from", "created_to")),
    ):
        if start is not None and end is not None and end <= start:
            raise InvalidInput.about(names[1], refusals.LATER_THAN.format(other=names[0]))
    return run_lists.RunFilter(
        execution_states=frozenset(filters.execution_states),
        publication_states=frozenset(filters.publication_states),
        trigger_kinds=frozenset(filters.trigger_kinds),
        logical_from=logical_from,
        logical_to=logical_to,
        created_from=created_from,
        created_to=created_to,
        text=text or None,
    )


def _utc(name: str, moment: datetime | None) -> datetime | None:
    if moment is None:
        return None
    try:
        return (moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)).astimezone(UTC)
    except OverflowError:
        raise InvalidInput.about(name, refusals.TIME_OUT_OF_RANGE.format()) from None


def _cursor(name: str, text: str | None) -> pagination.Cursor | None:
    if not text:
        return None
    try:
        return pagination.Cursor.decode(text)
    except ValueError:
        raise InvalidInput.about(name, refusals.NOT_A_CURSOR.format()) from None


def _encoded(row: RunRow) -> str:
    return pagination.Cursor(created_at=row.created_at, id=row.id).encode()
