"""Runs late for their definition's ``expected_finish`` raise a ``deadline`` alert.

The expected finish is counted from the run's logical time (a scheduled or backfilled run)
or, for a manual or API run without one, from its creation. Only active runs are read, so the
pass stays small; the alert is deduplicated per run and routed by the definition's owner.
"""

from __future__ import annotations

from datetime import timedelta

from veritask.core import alert_messages
from veritask.core.states import RunExecutionState
from veritask.ledger import alerts, dialects, queries
from veritask.ledger import definitions as stored_definitions
from veritask.ledger.vocabulary import AlertCategory
from veritask.services.platform import Platform

_ACTIVE = (RunExecutionState.QUEUED.value, RunExecutionState.RUNNING.value)


def alert_late_runs(platform: Platform) -> int:
    """Raise a deadline alert for each active run past its expected finish; how many new."""
    now = platform.now()
    with dialects.read_transaction(platform.engine) as connection:
        rows = queries.runs_in_states(connection, _ACTIVE)
        # Each version's spec once, however many of its runs are active (a spec can be large).
        versions = {(row.definition_id, row.definition_version) for row in rows}
        expected: dict[tuple[str, int], float] = {}
        for definition_id, version in versions:
            spec = stored_definitions.version_spec(connection, definition_id, version)
            seconds = spec.get("expected_finish")
            if isinstance(seconds, int | float):
                expected[(definition_id, version)] = seconds
    raised = 0
    for row in rows:
        seconds = expected.get((row.definition_id, row.definition_version))
        if seconds is None:
            continue
        start = row.logical_time or row.created_at
        due = start + timedelta(seconds=seconds)
        if now <= due:
            continue
        raised += alerts.raise_alert(
            platform.ledger,
            category=AlertCategory.DEADLINE,
            dedup_key=f"{AlertCategory.DEADLINE}:{row.id}",
            message=alert_messages.DEADLINE.format(due=due.isoformat()),
            evidence={"expected_finish_seconds": seconds, "due": due.isoformat()},
            run_id=row.id,
        )
    return raised
