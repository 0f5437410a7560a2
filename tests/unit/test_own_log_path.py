"""A worker's report may name only its own attempt's log, whatever host keeps it."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from veritask.core.events import Event, EventKind, names_a_foreign_log, own_log_tail
from veritask.execution import layout


def _completed(log_path: object) -> Event:
    return Event(
        "e1",
        "i1",
        2,
        EventKind.COMPLETED,
        "worker",
        datetime(2026, 1, 1, tzinfo=UTC),
        {"exit_code": 0, "error_category": "none", "log_path": log_path},  # type: ignore[dict-item]
        seq=3,
        attempt_token="t",
    )


def test_the_core_names_the_same_file_as_the_executor_layout() -> None:
    log = layout.ExecutorHome(Path("/home/x/executor")).attempt("i1", 2).log
    assert log.parts[-4:] == own_log_tail("i1", 2)


@pytest.mark.parametrize(
    "path", ["", "/srv/a/executor/attempts/i1/2/task.log", "/celery/host/attempts/i1/2/task.log"]
)
def test_its_own_log_under_any_home_is_accepted(path: str) -> None:
    assert not names_a_foreign_log(_completed(path))


@pytest.mark.parametrize(
    "path",
    [
        "/srv/a/token",
        "/srv/a/executor/attempts/i1/1/task.log",
        "/srv/a/executor/attempts/other/2/task.log",
        "/srv/a/attempts/i1/2/task.log/../../../../token",
        "/srv/a/../attempts/i1/2/task.log",
        "executor/attempts/i1/2/task.log",
        "/srv/a/attempts/i1/2/task.log\x00",
        7,
    ],
)
def test_any_other_file_is_foreign(path: object) -> None:
    assert names_a_foreign_log(_completed(path))
