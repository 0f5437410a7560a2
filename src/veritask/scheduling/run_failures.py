"""The alert a failed run opens for a person: its definition's owner (docs/operations.md).

A run that ends FAILED (its failing tasks out of retries, or a deadlock) opens one
``run_failed`` alert, routed like every alert by its definition's ``owner``, unless the
definition says ``alert_on_failure: false``. One per run while it is unresolved: a run cleared
and failed again does not open a second.
"""

from __future__ import annotations

from veritask.core import alert_messages
from veritask.definitions.model import Definition
from veritask.ledger import alerts
from veritask.ledger.ledger import Ledger
from veritask.ledger.vocabulary import AlertCategory


def alert_failed_run(ledger: Ledger, *, run_id: str, definition: Definition, reason: str) -> None:
    """Open the run's failure alert, unless its definition turned it off."""
    if not definition.alert_on_failure:
        return
    alerts.raise_quietly(
        ledger,
        category=AlertCategory.RUN_FAILED,
        dedup_key=f"run_failed:{run_id}",
        message=alert_messages.RUN_FAILED.format(reason=reason),
        run_id=run_id,
        evidence={"definition": definition.name, "reason": reason},
    )
