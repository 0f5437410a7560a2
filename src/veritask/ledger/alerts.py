"""Alerts: one unresolved alert per condition, each with its owner category (design.md 5.4)."""

from __future__ import annotations

from veritask.core.jsontypes import JSONObject
from veritask.ledger import dialects, schema
from veritask.ledger.ledger import Ledger
from veritask.ledger.vocabulary import AlertCategory, AlertStatus


def raise_alert(
    ledger: Ledger,
    *,
    category: AlertCategory,
    dedup_key: str,
    message: str,
    evidence: JSONObject,
    run_id: str | None = None,
    instance_id: str | None = None,
    attempt_no: int | None = None,
    definition_id: str | None = None,
    owner: str | None = None,
) -> bool:
    """Open an alert unless one for the same condition is still unresolved; True if new."""
    with ledger.engine.begin() as connection:
        return dialects.insert_ignoring_conflict(
            connection,
            schema.alerts,
            {
                "category": category.value,
                "dedup_key": dedup_key,
                "status": AlertStatus.OPEN.value,
                "message": message,
                "evidence": evidence,
                "run_id": run_id,
                "instance_id": instance_id,
                "attempt_no": attempt_no,
                "definition_id": definition_id,
                "owner": owner,
                "opened_at": ledger.clock(),
            },
            conflict_columns=[],
        )
