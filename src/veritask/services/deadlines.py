"""Runs late for their definition's ``expected_finish`` raise a ``deadline`` alert.

The expected finish is counted from the run's logical time (a scheduled or backfilled run)
or, for a manual or API run without one, from its creation. Only active runs are read, so the
pass stays small; the alert is deduplicated per run and routed by the definition's owner.
A late run whose roots still wait for other pipelines (``wait_for``) raises a ``dependency``
alert instead, naming what it waits for: nothing of its own has run, the upstream is late.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from veritask.core import alert_messages
from veritask.core.states import InstanceState, RunExecutionState, TriggerKind
from veritask.ledger import alerts, dialects, queries
from veritask.ledger import definitions as stored_definitions
from veritask.ledger.database import Connection
from veritask.ledger.vocabulary import AlertCategory
from veritask.scheduling import dependencies, versions
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
        with dialects.read_transaction(platform.engine) as connection:
            waiting = _still_waiting(connection, row.id, now)
        if waiting is not None:
            raised += alerts.raise_alert(
                platform.ledger,
                category=AlertCategory.DEPENDENCY,
                dedup_key=f"{AlertCategory.DEPENDENCY}:late:{row.id}",
                message=alert_messages.STILL_WAITING.format(due=due.isoformat(), reason=waiting),
                evidence={"expected_finish_seconds": seconds, "due": due.isoformat()},
                run_id=row.id,
            )
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


def _still_waiting(connection: Connection, run_id: str, now: datetime) -> str | None:
    """Why the run's roots have not started, when they wait for other pipelines; else None."""
    row = queries.get_run(connection, run_id)
    if row is None or row.execution_state != RunExecutionState.RUNNING.value:
        return None
    definition = versions.read(connection, row.definition_id, row.definition_version)
    if not definition.wait_for:
        return None
    roots = {key for key, task in definition.tasks.items() if not task.after}
    instances = queries.instances_of_run(connection, row.id)
    if any(i.task_key in roots and i.state != InstanceState.CREATED.value for i in instances):
        return None
    waited = dependencies.waited_time(
        connection,
        run_id=row.id,
        trigger_kind=TriggerKind(row.trigger_kind),
        logical_time=row.logical_time,
    )
    verdict = dependencies.check(
        connection,
        definition,
        logical_time=waited,  # as the scheduler does (dependencies.waited_time)
        created_at=row.created_at,
        now=now,
    )
    return None if verdict.released else verdict.reason
