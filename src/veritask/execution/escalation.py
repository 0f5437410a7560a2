"""Stopping a task's processes when its worker does not.

A stop goes to the worker first: it sends SIGTERM to the task's group and SIGKILL after the
attempt's grace period. A worker that is gone, frozen (SIGSTOP, a paused VM) or stuck in the
kernel does neither, and its task runs on. So whoever repeats the stop (the reconciler calls
``cancel`` on every sweep until the stop is confirmed) also checks the task's processes: once
the worker's grace period since the first request has passed and one still runs, they get
SIGTERM, and after one more grace period SIGKILL. The clock is the attempt's
``cancel_requested`` file, written once by the first request.

The task's processes are its group, and, without the worker that is their subreaper, the
processes in the attempt's cgroup (where the worker made one, cgroups.py) and every process
whose environment holds the attempt's mark (``task_env.attempt_mark``): one that left the
group (``setsid``, a daemon's double fork) stays in the cgroup and keeps the mark.
"""

from __future__ import annotations

import signal
import time

from veritask.execution import cgroups, layout, procfs, records, task_env


def task_alive(task: records.ProcessRecord, attempt: layout.AttemptDir | None = None) -> bool:
    """The task's leader, or any process of its group started since, still runs; with
    ``attempt``, also any process marked as the attempt's (one that left the group)."""
    if procfs.is_running(task.pid, task.start_ticks):
        return True
    if task.pgid is not None and procfs.group_members(task.pgid, started_since=task.start_ticks):
        return True
    if attempt is None:
        return False
    cgroup = cgroups.locate(attempt.path)
    if cgroup is not None and cgroups.members(cgroup):
        return True
    return bool(marked_processes(attempt, task))


def marked_processes(attempt: layout.AttemptDir, task: records.ProcessRecord) -> list[int]:
    """The live processes, started since the task, whose environment marks them as the
    attempt's; a scan of /proc, so only asked once the task's group has ended."""
    try:
        token = records.read_spec(attempt).attempt_token
    except (OSError, ValueError):
        return []
    found = procfs.marked(task_env.attempt_mark(token), started_since=task.start_ticks)
    return [stat.pid for stat in found]


def stop_task_group(attempt: layout.AttemptDir, *, worker_acts: bool) -> bool:
    """Signal the task's processes if the stop is overdue; True while one still runs.

    ``worker_acts``: a worker process of the attempt exists and was given the stop, so the
    first grace period is its own; a gone worker has none, and the task is signalled at once.
    """
    task = records.read_process_record(attempt.task_record)
    cgroup = cgroups.locate(attempt.path)
    if task is None or task.pgid is None or not task_alive(task, attempt):
        if cgroup is not None:
            cgroups.remove(cgroup)  # its worker, gone, could not
        return False
    try:
        requested_at = attempt.cancel_request.stat().st_mtime
    except FileNotFoundError:
        return True  # no stop was requested: nothing is overdue
    spec = records.read_spec(attempt)
    grace = spec.grace_period.total_seconds()
    overdue = time.time() - requested_at - (grace if worker_acts else 0.0)
    if overdue < 0:
        return True
    signum = signal.SIGTERM if overdue < grace else signal.SIGKILL
    procfs.signal_group(task.pgid, signum)
    if cgroup is not None:
        cgroups.signal_all(cgroup, signum)
    mark = task_env.attempt_mark(spec.attempt_token)
    for stat in procfs.marked(mark, started_since=task.start_ticks):
        if stat.pgrp != task.pgid:
            procfs.signal_process(stat.pid, stat.start_ticks, signum)
    return True
