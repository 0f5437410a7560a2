"""Python callables that the tests run as tasks, in a child forked from a worker."""

from __future__ import annotations

import os

from veritask.core import jsontypes
from veritask.execution import task_api


def add(a: int, b: int) -> jsontypes.JSONObject:
    print(f"adding {a} and {b}")
    return {"sum": a + b, "instance_id": os.environ["VERITASK_INSTANCE_ID"]}


def commit(marker: str) -> jsontypes.JSONObject:
    """Reports progress, then asks to commit; tells the test what the platform answered."""
    task_api.report_progress("writing", done=1, total=2, message="half way")
    try:
        task_api.commit_output(marker)
    except task_api.FencedAttempt as exc:
        return {"committed": False, "fenced": exc.reason}
    task_api.report_progress("done", done=2, total=2)
    return {"committed": True}


def skip_it(reason: str) -> None:
    task_api.skip(reason)


def environment(names: list[str]) -> jsontypes.JSONObject:
    """Which of these variables the task's process has, and their values."""
    return {name: os.environ.get(name) for name in names}


def chatty(count: int) -> None:
    """Reports its progress ``count`` times as fast as it can."""
    for done in range(1, count + 1):
        task_api.report_progress("counting", done=done, total=count)
