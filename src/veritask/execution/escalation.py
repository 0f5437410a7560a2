"""Stopping a task's process group when its worker does not.

A stop goes to the worker first: it sends SIGTERM to the task's group and SIGKILL after the
attempt's grace period. A worker that is gone, frozen (SIGSTOP, a paused VM) or stuck in the
kernel does neither, and its task runs on. So whoever repeats the stop (the reconciler calls
``cancel`` on every sweep until the stop is confirmed) also checks the task's group: once the
worker's grace period since the first request has passed and the group still runs, the group
gets SIGTERM, and after one more grace period SIGKILL. The clock is the attempt's
``cancel_requested`` file, written once by the first request.
"""

from __future__ import annotations

import signal
import time

from veritask.execution import layout, procfs, records


def task_alive(task: records.ProcessRecord) -> bool:
    """The task's leader, or any process of its group started since, still runs."""
    if procfs.is_running(task.pid, task.start_ticks):
        return True
    return task.pgid is not None and bool(
        procfs.group_members(task.pgid, started_since=task.start_ticks)
    )


def stop_task_group(attempt: layout.AttemptDir, *, worker_acts: bool) -> bool:
    """Signal the task's group if the stop is overdue; True while the group still runs.

    ``worker_acts``: a worker process of the attempt exists and was given the stop, so the
    first grace period is its own; a gone worker has none, and the group is signalled at once.
    """
    task = records.read_process_record(attempt.task_record)
    if task is None or task.pgid is None or not task_alive(task):
        return False
    try:
        requested_at = attempt.cancel_request.stat().st_mtime
    except FileNotFoundError:
        return True  # no stop was requested: nothing is overdue
    grace = records.read_spec(attempt).grace_period.total_seconds()
    overdue = time.time() - requested_at - (grace if worker_acts else 0.0)
    if overdue < 0:
        return True
    procfs.signal_group(task.pgid, signal.SIGTERM if overdue < grace else signal.SIGKILL)
    return True
