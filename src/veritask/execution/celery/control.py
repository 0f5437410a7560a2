"""What a Veritask Celery worker's main process does when asked by remote control.

A delivery runs in a pool process, and its task is that process's child. A pool process that
is frozen (SIGSTOP, a debugger, a process stuck in the kernel) neither acts on a revoke's
SIGTERM nor refreshes its lease nor stores a result, while the worker's main process goes on
answering ``inspect``: the attempt looks active, and its task runs on. The main process is
not frozen with it, and it shares the host's process table and the attempt directory: these
commands let the executor ask it, for one attempt,

- ``veritask_stop_task_group``: to stop the task's group once the stop is overdue (the same
  escalation as the local engine's, ``execution/escalation.py``: the pool process's grace
  period first, then SIGTERM to the group, then SIGKILL);
- ``veritask_task_group``: whether the task's group still runs, and whether the process that
  delivered it is frozen.

Both answer ``{"found": false}`` on a host that has no directory for the attempt.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from celery import Celery
from celery.worker.control import control_command

from veritask.core import jsontypes
from veritask.execution import escalation, layout, procfs, records, wire

STOP_TASK_GROUP = "veritask_stop_task_group"
TASK_GROUP = "veritask_task_group"


def register(home: layout.ExecutorHome) -> None:
    """Register the commands for a worker whose attempts live under ``home``."""

    @control_command(  # type: ignore[untyped-decorator]
        name=STOP_TASK_GROUP, args=[("key", str)], signature="<attempt key>"
    )
    def stop_task_group(state: Any, key: str) -> jsontypes.JSONObject:
        with _answering() as answer:
            attempt = _attempt(home, key)
            if attempt is None:
                return {"found": False}
            # The first request starts the escalation's clock, on this host's clock.
            now = wire.format_time(wire.utc_now()).encode()
            layout.create_exclusively(attempt.cancel_request, now)
            escalation.stop_task_group(attempt, worker_acts=_delivery_alive(attempt))
            answer.update(_task_group(attempt))
        return answer

    @control_command(  # type: ignore[untyped-decorator]
        name=TASK_GROUP, args=[("key", str)], signature="<attempt key>"
    )
    def task_group(state: Any, key: str) -> jsontypes.JSONObject:
        with _answering() as answer:
            attempt = _attempt(home, key)
            answer.update({"found": False} if attempt is None else _task_group(attempt))
        return answer


def stop_task_group(app: Celery, hostname: str, key: str) -> None:
    """Ask the worker ``hostname`` to stop the attempt's task group if overdue; no answer
    is awaited (the stop is confirmed by ``describe``, and asked again until it is)."""
    app.control.broadcast(STOP_TASK_GROUP, arguments={"key": key}, destination=[hostname])


def task_group(
    app: Celery, hostname: str, key: str, *, timeout: float
) -> jsontypes.JSONObject | None:
    """What the worker ``hostname`` sees of the attempt's task group, or None without answer."""
    replies = app.control.broadcast(
        TASK_GROUP, arguments={"key": key}, destination=[hostname], reply=True, timeout=timeout
    )
    for reply in replies or []:
        answer = reply.get(hostname) if isinstance(reply, dict) else None
        if isinstance(answer, dict):
            return answer
    return None


@contextlib.contextmanager
def _answering() -> Iterator[jsontypes.JSONObject]:
    """The answer being made; a damaged or vanishing file becomes an error in it, never an
    exception in the worker's main process."""
    answer: jsontypes.JSONObject = {}
    try:
        yield answer
    except (OSError, ValueError) as exc:
        answer.clear()
        answer["error"] = str(exc)


def _attempt(home: layout.ExecutorHome, key: str) -> layout.AttemptDir | None:
    try:
        attempt = home.attempt_for_key(key)
    except ValueError:
        return None
    return attempt if attempt.path.is_dir() else None


def _delivery_alive(attempt: layout.AttemptDir) -> bool:
    with contextlib.suppress(ValueError, OSError):
        process = records.read_process_record(attempt.worker_record)
        return process is not None and procfs.is_running(process.pid, process.start_ticks)
    return False


def _task_group(attempt: layout.AttemptDir) -> jsontypes.JSONObject:
    task = records.read_process_record(attempt.task_record)
    delivery = records.read_process_record(attempt.worker_record)
    frozen = delivery is not None and procfs.is_stopped(delivery.pid, delivery.start_ticks)
    return {
        "found": True,
        "task_started": task is not None,
        "task_alive": task is not None and escalation.task_alive(task, attempt),
        "delivery_stopped": frozen,
        "exit_record": attempt.exit_record.exists(),
    }
