"""What the platform is doing now, and how far its ledger has got.

The web UI's health panel reads :func:`platform_activity`: the schedulers and whether their
heartbeat is fresh, the attempts each executor holds, how much waits to start, and what the
reconciler decided in the last hour. Its live pages poll :func:`latest_position`, one indexed
``max(position)`` per call, to learn cheaply that something changed.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Final

from veritask.core.states import ACTIVE_ATTEMPT_STATES, InstanceState, RunExecutionState
from veritask.ledger import dialects, observations
from veritask.scheduling.lease import STALE_AFTER
from veritask.services import views
from veritask.services.platform import Platform

#: How far back the panel counts the reconciler's decisions.
DECISION_WINDOW: Final = timedelta(hours=1)
RECONCILER: Final = "reconciler"
_WAITING_TO_START = (InstanceState.SCHEDULED.value, InstanceState.QUEUED.value)


def platform_activity(platform: Platform) -> views.Activity:
    """The schedulers, the executors' load, the queue and the reconciler's recent decisions."""
    now = platform.now()
    since = now - DECISION_WINDOW
    with dialects.read_transaction(platform.engine) as connection:
        schedulers = observations.schedulers(connection)
        loads = observations.attempts_by_executor(
            connection, [state.value for state in ACTIVE_ATTEMPT_STATES]
        )
        waiting = observations.count_instances_in(connection, _WAITING_TO_START)
        queued_runs = observations.count_runs_in(connection, RunExecutionState.QUEUED.value)
        decisions = observations.event_kinds_since(connection, actor=RECONCILER, since=since)
    return views.Activity(
        schedulers=tuple(
            views.SchedulerProcess(
                row.id,
                row.host,
                row.pid,
                row.started_at,
                row.heartbeat_at,
                now - row.heartbeat_at <= STALE_AFTER,
            )
            for row in schedulers
        ),
        executors=tuple(views.ExecutorLoad(row[0] or "?", int(row[1])) for row in loads),
        instances_waiting_to_start=int(waiting),
        runs_queued=int(queued_runs),
        reconciler_decisions=tuple(views.DecisionCount(row[0], int(row[1])) for row in decisions),
        decisions_since=since,
        observed_at=now,
    )


def definitions_mark(platform: Platform) -> int:
    """A number that grows whenever an event is recorded or a definition changes.

    The newest event position plus the time of the newest definition change, in
    milliseconds: each part only grows, so their sum grows when either does, which is all a
    page that shows definitions and their runs needs to know to fetch itself again.
    """
    with dialects.read_transaction(platform.engine) as connection:
        position = observations.latest_position(connection)
        changed = observations.definitions_changed_at(connection)
    return position + (_milliseconds(changed) if changed is not None else 0)


def _milliseconds(moment: datetime) -> int:
    aware = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
    return int(aware.timestamp() * 1000)


def latest_position(
    platform: Platform, *, run_id: str | None = None, instance_id: str | None = None
) -> int:
    """The position of the newest event (of the run or instance when given), 0 if none.

    Positions only grow, so a reader that saw position P and now sees more knows that
    something changed, without reading what.
    """
    with dialects.read_transaction(platform.engine) as connection:
        return observations.latest_position(connection, run_id=run_id, instance_id=instance_id)
