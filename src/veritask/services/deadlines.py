"""Runs late for their definition's ``expected_finish`` raise a ``deadline`` alert.

The expected finish is counted from the run's logical time (a scheduled or backfilled run)
or, for a manual or API run without one, from its creation. Only active runs are read, so the
pass stays small; the alert is deduplicated per run and routed by the definition's owner.
"""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa

from veritask.core.states import RunExecutionState
from veritask.ledger import alerts, dialects, schema
from veritask.ledger.vocabulary import AlertCategory
from veritask.services.platform import Platform

_ACTIVE = (RunExecutionState.QUEUED.value, RunExecutionState.RUNNING.value)


def alert_late_runs(platform: Platform) -> int:
    """Raise a deadline alert for each active run past its expected finish; how many new."""
    now = platform.now()
    r, v, d = schema.runs.c, schema.definition_versions.c, schema.definitions.c
    with dialects.read_transaction(platform.engine) as connection:
        rows = connection.execute(
            sa.select(r.id, r.logical_time, r.created_at, v.spec, d.id.label("definition_id"))
            .join(
                schema.definition_versions,
                sa.and_(v.definition_id == r.definition_id, v.version == r.definition_version),
            )
            .join(schema.definitions, d.id == r.definition_id)
            .where(r.execution_state.in_(_ACTIVE))
        ).all()
    raised = 0
    for row in rows:
        seconds = row.spec.get("expected_finish") if isinstance(row.spec, dict) else None
        if not isinstance(seconds, int | float):
            continue
        start = row.logical_time or row.created_at
        due = start + timedelta(seconds=seconds)
        if now <= due:
            continue
        raised += alerts.raise_alert(
            platform.ledger,
            category=AlertCategory.DEADLINE,
            dedup_key=f"{AlertCategory.DEADLINE}:{row.id}",
            message=f"the run was expected to finish by {due.isoformat()} and is still active",
            evidence={"expected_finish_seconds": seconds, "due": due.isoformat()},
            run_id=row.id,
        )
    return raised
