"""Fixtures for the scheduler tests: a harness per test, on SQLite and on PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from tests.scheduling.harness import FAST, Harness
from veritask.execution import local
from veritask.scheduling.settings import Settings

MakeHarness = Callable[..., Harness]


@pytest.fixture
def make_harness(database_url: str, tmp_path: Path) -> Iterator[MakeHarness]:
    """Build a harness (once) with a chosen executor or settings; closed after the test."""
    made: list[Harness] = []

    def make(
        *,
        executor_class: type[local.LocalExecutor] = local.LocalExecutor,
        settings: Settings = FAST,
    ) -> Harness:
        home = tmp_path / "home"
        executor = executor_class(home=home, slots=4, idle_exit_after=timedelta(seconds=60))
        harness = Harness(database_url, home, executor=executor, settings=settings)
        made.append(harness)
        return harness

    yield make
    for harness in made:
        harness.close()


@pytest.fixture
def harness(make_harness: MakeHarness) -> Harness:
    return make_harness()
