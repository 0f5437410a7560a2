"""Alert delivery by webhook: JSON, signed with HMAC-SHA256, retried with backoff, and every
attempt recorded in ``alert_deliveries``.

Targets come from the environment: ``VERITASK_ALERT_WEBHOOK_URL`` for every alert, and
``VERITASK_ALERT_WEBHOOK_URL_<OWNER>`` (the owner upper-cased, ``-`` and ``.`` as ``_``) for the
alerts of definitions with that owner; ``VERITASK_ALERT_WEBHOOK_SECRET`` signs them. The
scheduler's housekeeping calls :func:`deliver_due` every few seconds; several schedulers
share the queue by claiming each alert with compare-and-set before sending it.

The signature: ``X-Veritask-Signature: sha256=<hex>``, the HMAC-SHA256 with the secret of
``<X-Veritask-Timestamp> + "." + <the raw body>`` (docs/operations.md shows how to check it).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Final

import httpx

from veritask.core.jsontypes import JSONObject
from veritask.ledger import alerts, dialects
from veritask.ledger.vocabulary import DeliveryState
from veritask.services.platform import Platform

log = logging.getLogger(__name__)

SIGNATURE_HEADER: Final = "X-Veritask-Signature"
TIMESTAMP_HEADER: Final = "X-Veritask-Timestamp"
DELIVERY_HEADER: Final = "X-Veritask-Delivery"
URL_VARIABLE: Final = "VERITASK_ALERT_WEBHOOK_URL"
SECRET_VARIABLE: Final = "VERITASK_ALERT_WEBHOOK_SECRET"
#: Alerts sent per pass: one slow target never holds housekeeping for long.
BATCH: Final = 20
#: How long a claimed alert is left to the claimer before another process may send it.
CLAIM: Final = timedelta(seconds=60)


@dataclass(frozen=True)
class WebhookSettings:
    """Where alerts go, how they are signed, how often a failed delivery is tried again."""

    default_url: str | None = None
    owner_urls: Mapping[str, str] = field(default_factory=dict)
    secret: str | None = None
    max_attempts: int = 5
    first_backoff: timedelta = timedelta(seconds=10)
    max_backoff: timedelta = timedelta(minutes=10)
    timeout: timedelta = timedelta(seconds=10)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts: at least 1")

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> WebhookSettings:
        found = os.environ if environ is None else environ
        prefix = URL_VARIABLE + "_"
        owners = {
            key[len(prefix) :]: value for key, value in found.items() if key.startswith(prefix)
        }
        return cls(
            default_url=found.get(URL_VARIABLE) or None,
            owner_urls=owners,
            secret=found.get(SECRET_VARIABLE) or None,
        )

    @property
    def configured(self) -> bool:
        return bool(self.default_url or self.owner_urls)

    def target_for(self, owner: str | None) -> str | None:
        """The owner's own webhook if it has one, else the default."""
        if owner is not None:
            own = self.owner_urls.get(owner_variable(owner))
            if own:
                return own
        return self.default_url

    def backoff(self, attempt_no: int) -> timedelta:
        """Wait after failed attempt ``attempt_no``: doubling from ``first_backoff``, capped."""
        grown: timedelta = self.first_backoff * (2 ** (attempt_no - 1))
        return min(grown, self.max_backoff)


def owner_variable(owner: str) -> str:
    """The suffix of an owner's variable: ``data-platform`` -> ``DATA_PLATFORM``."""
    return re.sub(r"[^A-Z0-9]", "_", owner.upper())


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """The signature header's value for this body."""
    digest = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + digest.hexdigest()


def deliver_due(platform: Platform, settings: WebhookSettings, http: httpx.Client) -> int:
    """Send every alert whose delivery is due; the number of attempts made."""
    now = platform.now()
    with dialects.read_transaction(platform.engine) as connection:
        due = alerts.due_deliveries(connection, now, limit=BATCH)
    attempts = 0
    for alert_id, due_at in due:
        if _claim(platform, alert_id, due_at, now):
            attempts += _deliver_one(platform, settings, http, alert_id)
    return attempts


def _claim(platform: Platform, alert_id: int, seen: datetime, now: datetime) -> bool:
    with platform.engine.begin() as connection:
        return alerts.claim_delivery(connection, alert_id, seen=seen, until=now + CLAIM)


def _deliver_one(
    platform: Platform, settings: WebhookSettings, http: httpx.Client, alert_id: int
) -> int:
    with dialects.read_transaction(platform.engine) as connection:
        alert = alerts.get_alert(connection, alert_id)
        previous = alerts.count_deliveries(connection, alert_id)
    if alert is None:
        return 0
    target = settings.target_for(alert.owner)
    if target is None:
        _settle(platform, alert_id, DeliveryState.UNROUTED, None)
        return 0
    attempt_no = previous + 1
    body = json.dumps(payload(alert, attempt_no), sort_keys=True).encode()
    timestamp = str(int(platform.now().timestamp()))
    headers = {
        "Content-Type": "application/json",
        TIMESTAMP_HEADER: timestamp,
        DELIVERY_HEADER: f"{alert_id}-{attempt_no}",
    }
    if settings.secret:
        headers[SIGNATURE_HEADER] = sign(settings.secret, timestamp, body)
    status: int | None = None
    error: str | None = None
    try:
        response = http.post(
            target, content=body, headers=headers, timeout=settings.timeout.total_seconds()
        )
        status = response.status_code
        if not 200 <= status < 300:
            error = f"HTTP {status}"
    except httpx.HTTPError as exc:
        error = f"{type(exc).__name__}: {exc}"
    delivered = error is None
    now = platform.now()
    with platform.engine.begin() as connection:
        alerts.record_delivery(
            connection,
            alert_id,
            target=target,
            attempt_no=attempt_no,
            attempted_at=now,
            delivered=delivered,
            status_code=status,
            error=error,
        )
    if delivered:
        _settle(platform, alert_id, DeliveryState.DELIVERED, None)
    elif attempt_no >= settings.max_attempts:
        log.warning(
            "alert %s: delivery to %s failed %s times: %s", alert_id, target, attempt_no, error
        )
        _settle(platform, alert_id, DeliveryState.FAILED, None)
    else:
        _settle(platform, alert_id, DeliveryState.PENDING, now + settings.backoff(attempt_no))
    return 1


def _settle(
    platform: Platform, alert_id: int, state: DeliveryState, next_at: datetime | None
) -> None:
    with platform.engine.begin() as connection:
        alerts.settle_delivery(connection, alert_id, state, next_at)


def payload(alert: alerts.AlertRow, attempt_no: int) -> JSONObject:
    """The JSON a webhook receives."""
    return {
        "type": "veritask.alert",
        "delivery_attempt": attempt_no,
        "alert": {
            "id": alert.id,
            "category": alert.category.value,
            "status": alert.status.value,
            "message": alert.message,
            "owner": alert.owner,
            "definition": alert.definition,
            "run_id": alert.run_id,
            "instance_id": alert.instance_id,
            "attempt_no": alert.attempt_no,
            "opened_at": alert.opened_at.isoformat(),
            "evidence": alert.evidence,
        },
    }
