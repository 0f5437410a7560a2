"""The per-attempt records in Redis (``claims.py``), against a real Redis."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from datetime import timedelta

import pytest

from tests.execution.celery.conftest import REDIS_URL
from veritask.execution.celery import claims as claim_records

LEASE = timedelta(seconds=10)


@pytest.fixture
def claims(celery_services: None) -> Iterator[claim_records.Claims]:
    found = claim_records.Claims.connect(REDIS_URL, retention=timedelta(minutes=5))
    yield found
    found.close()


def claim_with(claims: claim_records.Claims, key: str, value: str) -> tuple[bool, bool]:
    """The claim script as a delivery sends it, with a claim value of the test's choosing (what
    redis-py sends again, unchanged, when the first reply was lost)."""
    answer = claims._claim_and_lease(
        keys=[f"veritask:claim:{key}", f"veritask:lease:{key}", f"veritask:cancel:{key}"],
        args=[value, claims.retention_ms, "host:1", int(LEASE.total_seconds() * 1000)],
    )
    claimed, stop = answer
    return bool(claimed), bool(stop)


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
    claims: claim_records.Claims,
) -> None:
    key = f"inst-{secrets.token_hex(6)}/1"
    value = json.dumps({"worker": "host-a:1", "claimed_at": "2026-11-30T16:00:00.000001+00:00"})

    assert claim_with(claims, key, value) == (True, False)
    claims.release_lease(key)  # as if the lease had lapsed meanwhile: the retry sets it again
    assert claim_with(claims, key, value) == (True, False)
    assert claims.progress(key).lease_holder == "host:1"
    other = value.replace("000001", "000002")  # another delivery: another claim time
    assert claim_with(claims, key, other) == (False, False)
    claims.forget(key)


def test_a_stop_requested_before_the_claim_is_reported_to_the_claimant(
    claims: claim_records.Claims,
) -> None:
    key = f"inst-{secrets.token_hex(6)}/1"
    claims.request_cancel(key)

    assert claims.claim_and_lease(key, "host-a:1", lease=LEASE) == (True, True)
    claims.forget(key)
