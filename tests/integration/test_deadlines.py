"""The deadline pass: an active run past its definition's ``expected_finish`` raises one
``deadline`` alert, routed by the definition's owner; a run within it raises none (on SQLite
and PostgreSQL)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from veritask.core.states import TriggerKind
from veritask.ledger import alerts, dialects
from veritask.ledger.ledger import Ledger, utc_now
from veritask.ledger.vocabulary import AlertCategory
from veritask.scheduling import triggers
from veritask.services import deadlines
from veritask.services.platform import Platform

LATE = """
name: late
owner: data-platform
expected_finish: 1h
tasks:
  greet: {run: "true"}
"""
UNBOUNDED = """
name: unbounded
tasks:
  greet: {run: "true"}
"""


@pytest.fixture
def platform(database_url: str, tmp_path: Path) -> Iterator[Platform]:
    opened = Platform.open(database_url, tmp_path)
    try:
        yield opened
    finally:
        opened.close()


def _later(platform: Platform, by: timedelta) -> Platform:
    """The same database, seen by a clock ``by`` ahead."""
    return Platform(Ledger(platform.engine, clock=lambda: utc_now() + by), platform.home)


def test_a_run_past_its_expected_finish_is_alerted_once(platform: Platform) -> None:
    for text in (LATE, UNBOUNDED):
        triggers.apply_definition(platform.ledger, text)
    run_id = triggers.trigger(
        platform.ledger, name="late", kind=TriggerKind.MANUAL, actor="api"
    ).run_id
    triggers.trigger(platform.ledger, name="unbounded", kind=TriggerKind.MANUAL, actor="api")

    assert deadlines.alert_late_runs(_later(platform, timedelta(minutes=59))) == 0
    later = _later(platform, timedelta(hours=2))
    assert deadlines.alert_late_runs(later) == 1
    assert deadlines.alert_late_runs(later) == 0  # deduplicated per run

    with dialects.read_transaction(platform.engine) as connection:
        raised = alerts.list_alerts(connection)
    assert [(a.category, a.run_id, a.owner) for a in raised] == [
        (AlertCategory.DEADLINE, run_id, "data-platform")
    ]
    assert raised[0].evidence["expected_finish_seconds"] == 3600
