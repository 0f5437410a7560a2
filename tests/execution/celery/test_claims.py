"""The per-attempt records in Redis (``claims.py``), against a real Redis."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from tests.execution.celery.conftest import REDIS_URL
from veritask.execution import wire
from veritask.execution.celery import claims as claim_records

LEASE = timedelta(seconds=10)


@pytest.fixture
def claims(celery_services: None) -> Iterator[claim_records.Claims]:
    found = claim_records.Claims.connect(REDIS_URL, retention=timedelta(minutes=5))
    yield found
    found.close()


def test_the_first_delivery_claims_and_a_second_is_refused(
    claims: claim_records.Claims,
) -> None:
    key = f"inst-{secrets.token_hex(6)}/1"

    assert claims.claim_and_lease(key, "host-a:1", lease=LEASE) == (True, False)
    assert claims.claim_and_lease(key, "host-b:2", lease=LEASE) == (False, False)
    # The same process, a later delivery of the same attempt: refused too.
    assert claims.claim_and_lease(key, "host-a:1", lease=LEASE) == (False, False)
    holder = claims.holder(key)
    assert holder is not None and holder.worker == "host-a:1"
    assert claims.progress(key).lease_holder == "host-a:1"
    claims.forget(key)


def test_a_claim_sent_again_after_a_lost_reply_is_still_its_senders(
    claims: claim_records.Claims, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What redis-py sends again when the first reply was lost is the same command: the same
    # delivery, the same claim time. The clock is held still to send it.
    key = f"inst-{secrets.token_hex(6)}/1"
    claimed_at = datetime(2026, 11, 30, 16, 0, 0, 1, tzinfo=UTC)
    monkeypatch.setattr(wire, "utc_now", lambda: claimed_at)

    assert claims.claim_and_lease(key, "host-a:1", lease=LEASE) == (True, False)
    claims.release_lease(key)  # as if the lease had lapsed meanwhile: the retry sets it again
    assert claims.claim_and_lease(key, "host-a:1", lease=LEASE) == (True, False)
    assert claims.progress(key).lease_holder == "host-a:1"
    # Another delivery of the same process claims at another time.
    monkeypatch.setattr(wire, "utc_now", lambda: claimed_at + timedelta(microseconds=1))
    assert claims.claim_and_lease(key, "host-a:1", lease=LEASE) == (False, False)
    claims.forget(key)


def test_a_stop_requested_before_the_claim_is_reported_to_the_claimant(
    claims: claim_records.Claims,
) -> None:
    key = f"inst-{secrets.token_hex(6)}/1"
    claims.request_cancel(key)

    assert claims.claim_and_lease(key, "host-a:1", lease=LEASE) == (True, True)
    claims.forget(key)
