"""The ``dependency`` alert of a wait still checking past its ``expected`` duration.

The wait executor (``execution/waits.py``) tells its listener once per attempt; this module is
the listener the scheduler gives it, so that the executor never writes the ledger.
"""

from __future__ import annotations

from collections.abc import Callable

from veritask.core import alert_messages
from veritask.execution import waits
from veritask.ledger import alerts
from veritask.ledger.ledger import Ledger
from veritask.ledger.vocabulary import AlertCategory


def alerter(ledger: Ledger) -> Callable[[waits.Overdue], None]:
    """Raise one ``dependency`` alert per overdue wait attempt (its dedup key says which)."""

    def raise_overdue(overdue: waits.Overdue) -> None:
        category = AlertCategory.DEPENDENCY
        alerts.raise_quietly(
            ledger,
            category=category,
            dedup_key=f"{category}:{overdue.instance_id}:{overdue.attempt_no}:expected",
            message=alert_messages.WAIT_OVERDUE.format(
                task=overdue.task or overdue.instance_id,
                definition=overdue.definition or "?",
                seconds=overdue.expected.total_seconds(),
                since=overdue.since.isoformat(),
                seen=overdue.seen,
            ),
            run_id=overdue.run_id,
            instance_id=overdue.instance_id,
            attempt_no=overdue.attempt_no,
            evidence={
                "wait": overdue.task,
                "expected_seconds": overdue.expected.total_seconds(),
                "since": overdue.since.isoformat(),
                "seen": overdue.seen,
            },
        )

    return raise_overdue
