"""Runs started by published data (docs/scheduling.md, "Runs started by published data").

Each pass reads, for every active definition with ``trigger: {on_published: …}``, the
upstreams' publications that none of its runs answers yet, and creates the runs they call
for, with the upstream's logical time and the upstream runs as their evidence:

- ``when: any``: one run per PUBLISHED upstream run, keyed by that run's id;
- ``when: all``: one run per logical time, once every upstream has a PUBLISHED run of it,
  keyed by the logical time.

The keys make a second pass, a restart and a second scheduler find the run instead of making
another. The pass reads the ledger, not a feed of changes: a publication made while no
scheduler ran is found by the next pass, as far back as the downstream's last apply or enable.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from veritask.core.states import TriggerKind
from veritask.definitions.model import OnPublished, PublishedWhen
from veritask.ledger import dialects
from veritask.ledger import run_upstreams as upstream_store
from veritask.ledger.database import Connection
from veritask.ledger.ledger import Ledger
from veritask.scheduling import triggers, versions


@dataclass(frozen=True)
class DueRun:
    """A run that publications call for."""

    definition: str
    key: str
    logical_time: datetime
    upstream_run_ids: tuple[str, ...]


def start_published_runs(ledger: Ledger) -> int:
    """Create the runs that the upstreams' publications call for; how many were new."""
    with dialects.read_transaction(ledger.engine) as connection:
        due = [
            run
            for row in upstream_store.triggered_definitions(connection)
            for run in _due_runs(connection, row)
        ]
    created = 0
    for run in due:
        try:
            result = triggers.trigger(
                ledger,
                name=run.definition,
                kind=TriggerKind.PUBLISHED,
                actor="scheduler",
                key=run.key,
                logical_time=run.logical_time,
                upstream_run_ids=run.upstream_run_ids,
            )
        except triggers.Refused:
            continue  # disabled or deleted since the read: it starts nothing new
        created += int(result.created)
    return created


def _due_runs(connection: Connection, row: upstream_store.TriggeredDefinition) -> list[DueRun]:
    trigger = versions.read(connection, row.id, row.current_version).trigger
    if trigger is None:
        return []
    if trigger.when is PublishedWhen.ANY:
        publications = upstream_store.unanswered_publications(
            connection, downstream_id=row.id, upstreams=trigger.upstreams, since=row.since
        )
        return [DueRun(row.name, p.run_id, p.logical_time, (p.run_id,)) for p in publications]
    times = upstream_store.completed_logical_times(
        connection, downstream_id=row.id, upstreams=trigger.upstreams, since=row.since
    )
    return [
        run
        for moment in times
        if (run := _when_all_published(connection, row.name, trigger, moment)) is not None
    ]


def _when_all_published(
    connection: Connection, name: str, trigger: OnPublished, logical_time: datetime
) -> DueRun | None:
    """The run of a logical time that every upstream published: it names each upstream's
    newest publication of it (None: one was deleted since it was counted)."""
    newest = upstream_store.newest_publications(
        connection, upstreams=trigger.upstreams, logical_time=logical_time
    )
    if any(upstream not in newest for upstream in trigger.upstreams):
        return None
    evidence = tuple(newest[upstream] for upstream in trigger.upstreams)
    return DueRun(name, logical_time.isoformat(), logical_time, evidence)
