"""Fixtures for the scheduler tests: a harness per test, on SQLite and on PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from tests.scheduling.harness import FAST, Harness
from tests.unit.test_phrases import unread
from veritask.execution import local
from veritask.ledger.ledger import utc_now
from veritask.scheduling.settings import Settings

MakeHarness = Callable[..., Harness]


@pytest.fixture
def make_harness(database_url: str, tmp_path: Path) -> Iterator[MakeHarness]:
    """Build a harness (once) with a chosen executor or settings; closed after the test.

    After the test, every alert the scheduler raised must be a sentence the phrasebook reads
    (the web UI shows it in the reader's language), whatever path raised it.
    """
    made: list[Harness] = []

    def make(
        *,
        executor_class: type[local.LocalExecutor] = local.LocalExecutor,
        settings: Settings = FAST,
        clock: Callable[[], datetime] = utc_now,
    ) -> Harness:
        home = tmp_path / "home"
        executor = executor_class(home=home, slots=4, idle_exit_after=timedelta(seconds=60))
        harness = Harness(database_url, home, executor=executor, settings=settings, clock=clock)
        made.append(harness)
        return harness

    yield make
    unread_alerts: list[str] = []
    for harness in made:
        try:
            unread_alerts += [message for _, message, _ in harness.alerts() if unread(message)]
        finally:
            harness.close()
    assert unread_alerts == [], "alert messages no phrase wrote"


@pytest.fixture
def harness(make_harness: MakeHarness) -> Harness:
    return make_harness()
