"""A run's instances page by page, in pipeline order: what ``GET /api/v2/runs/{id}`` shows
of a run of thousands of tasks, and ``GET /api/v2/runs/{id}/instances?cursor=`` continues.

A page reads every instance of the run light (no fold), orders them, then reads the facts
and the attempts of that page's instances alone: a run of 20,000 tasks answers its first
page as fast as a run of a few hundred answers whole.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Final

from veritask.core import refusals
from veritask.core.states import InstanceState
from veritask.ledger import dialects, pools, queries, run_store, run_upstreams
from veritask.ledger.database import Connection
from veritask.ledger.rows import RunRow
from veritask.services import ordering, reading, views
from veritask.services.errors import InvalidInput, NotFound
from veritask.services.platform import Platform

#: Instances per page unless asked otherwise, and the most a page holds.
PAGE: Final = 500
MAX_PAGE: Final = 1000
_MAY_WAIT: Final = frozenset({InstanceState.CREATED, InstanceState.UP_FOR_RETRY})


@dataclass(frozen=True)
class InstancePage:
    """Instances of a run in pipeline order, and the cursor of the next page (None: last)."""

    items: tuple[views.Instance, ...]
    next_cursor: str | None


@dataclass(frozen=True)
class RunHead:
    """A run with the first page of its instances, and the cursor of the next page."""

    detail: views.RunDetail
    next_cursor: str | None


def run_head(platform: Platform, run_id: str, *, limit: int = PAGE) -> RunHead:
    """The run, its upstream runs and its first ``limit`` instances."""
    _check_limit(limit)
    with dialects.read_transaction(platform.engine) as connection:
        row = _run_row(connection, run_id)
        names = queries.definition_names(connection, [row.definition_id])
        upstreams = run_upstreams.upstream_runs(connection, run_id)
        page = _page(connection, platform, row, after=None, limit=limit)
    detail = views.RunDetail(
        reading.run_view(row, names.get(row.definition_id, "")),
        page.items,
        tuple(views.UpstreamRun(u.run_id, u.definition) for u in upstreams),
    )
    return RunHead(detail, page.next_cursor)


def instances(
    platform: Platform, run_id: str, *, cursor: str | None = None, limit: int = PAGE
) -> InstancePage:
    """The ``limit`` instances after ``cursor`` (from the first without one)."""
    _check_limit(limit)
    after = _decoded(cursor) if cursor else None
    with dialects.read_transaction(platform.engine) as connection:
        row = _run_row(connection, run_id)
        return _page(connection, platform, row, after=after, limit=limit)


def _page(
    connection: Connection,
    platform: Platform,
    row: RunRow,
    *,
    after: tuple[str, int] | None,
    limit: int,
) -> InstancePage:
    briefs = run_store.instances_brief(connection, row.id)
    order = ordering.version_order(connection, row.definition_id, row.definition_version)
    listed = ordering.in_pipeline_order(
        briefs, order, task=lambda b: b.task_key, index=lambda b: b.map_index
    )
    start = 0
    if after is not None:
        # Instances are never deleted: the last one a page showed is still there.
        found = [n for n, b in enumerate(listed) if (b.task_key, b.map_index) == after]
        if not found:
            raise InvalidInput.about("cursor", refusals.NOT_A_CURSOR.format())
        start = found[0] + 1
    chosen = listed[start : start + limit]
    ids = [b.id for b in chosen]
    rows = {r.id: r for r in queries.instances_by_id(connection, ids)}
    attempts = queries.attempts_of_instances(connection, ids)
    waits = pools.waiting_reasons(
        connection, [b.id for b in chosen if b.state in _MAY_WAIT], now=platform.now()
    )
    items = tuple(
        reading.instance_view(rows[b.id], attempts.get(b.id, ()), waiting=waits.get(b.id))
        for b in chosen
    )
    more = start + limit < len(listed)
    last = chosen[-1] if chosen else None
    return InstancePage(items, _encoded(last.task_key, last.map_index) if more and last else None)


def _check_limit(limit: int) -> None:
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidInput.about("limit", refusals.BETWEEN.format(low=1, high=MAX_PAGE))


def _encoded(task: str, map_index: int) -> str:
    text = json.dumps([task, map_index], separators=(",", ":"))
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def _decoded(cursor: str) -> tuple[str, int]:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        value = json.loads(base64.urlsafe_b64decode(padded.encode()))
    except (ValueError, binascii.Error):
        value = None
    match value:
        case [str() as task, int() as map_index]:
            return task, map_index
        case _:
            raise InvalidInput.about("cursor", refusals.NOT_A_CURSOR.format())


def _run_row(connection: Connection, run_id: str) -> RunRow:
    row = queries.get_run(connection, run_id)
    if row is None:
        raise NotFound(refusals.NO_RUN.format(run_id=run_id))
    return row
