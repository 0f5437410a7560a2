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


def probe(reads: list[str], writes: list[str]) -> jsontypes.JSONObject:
    """What this task may read and write of ``reads`` and ``writes``; reports its progress,
    commits, and says who it runs as and whether its own environment block holds ``VERITASK_``
    names it was not given."""
    task_api.report_progress("probing", done=1, total=2)
    reached: list[jsontypes.JSONValue] = []
    for path in reads:
        try:
            with open(path, "rb") as file:
                file.read(1)
            reached.append(path)
        except OSError:
            pass
    for path in writes:
        try:
            with open(path, "wb") as file:
                file.write(b"planted")
            reached.append(path)
        except OSError:
            pass
    with open("/proc/self/environ", "rb") as environ:
        found = {entry.split(b"=")[0].decode() for entry in environ.read().split(b"\0") if entry}
    names: list[jsontypes.JSONValue] = [*sorted(found)]
    task_api.commit_output("probe-marker")
    with open("mine.txt", "w") as mine:
        mine.write("written in the working directory")
    return {"uid": os.getuid(), "reached": reached, "environ_names": names}
