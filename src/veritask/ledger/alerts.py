"""Alerts: one unresolved alert per condition, each with its owner category (design.md 5.4)."""

from __future__ import annotations

import logging

from veritask.core.jsontypes import JSONObject
from veritask.ledger import dialects, errors, schema
from veritask.ledger.ledger import Ledger
from veritask.ledger.vocabulary import AlertCategory, AlertStatus

log = logging.getLogger(__name__)


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


def raise_quietly(
    ledger: Ledger,
    *,
    category: AlertCategory,
    dedup_key: str,
    message: str,
    evidence: JSONObject,
    run_id: str | None = None,
    instance_id: str | None = None,
    attempt_no: int | None = None,
) -> None:
    """:func:`raise_alert` for the loops: a database error is logged, never raised, so that
    failing to alert about one object never stops the work on the others."""
    try:
        raise_alert(
            ledger,
            category=category,
            dedup_key=dedup_key,
            message=message,
            evidence=evidence,
            run_id=run_id,
            instance_id=instance_id,
            attempt_no=attempt_no,
        )
    except errors.LedgerError:
        log.exception("could not raise the alert %s", dedup_key)
