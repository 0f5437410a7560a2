"""How a task's process ended, as one error category: the one rule every engine that sees a
process end applies (the worker for its own task, the container engine for a container's).

The order is the rule: a stop we asked for names the end whatever the process did with it; the
kernel's out-of-memory kill comes next, then any other signal; a process that never started
is a start error; only then does the exit code speak (0, the skip code, anything else).
"""

from __future__ import annotations

from dataclasses import dataclass

from veritask.core import events

ErrorCategory = events.ErrorCategory


@dataclass(frozen=True)
class Ending:
    """What the engine saw of the process's end."""

    exit_code: int | None
    signal: int | None
    """The signal that ended it, if one did."""
    skip_exit_code: int
    stopped_by_us: ErrorCategory | None = None
    """``CANCELLED`` or ``TIMEOUT`` when the process ended by a stop the platform asked for."""
    started: bool = True
    """False when the task could not be started (command not found, image entry refused)."""
    out_of_memory: bool = False
    """The kernel killed it for going past its memory limit."""


def categorize(ending: Ending) -> ErrorCategory:
    if ending.stopped_by_us is not None:
        return ending.stopped_by_us
    if ending.out_of_memory:
        return ErrorCategory.OUT_OF_MEMORY
    if ending.signal is not None:
        return ErrorCategory.KILLED
    if not ending.started:
        return ErrorCategory.START_ERROR
    if ending.exit_code == 0:
        return ErrorCategory.NONE
    if ending.exit_code == ending.skip_exit_code:
        return ErrorCategory.SKIPPED
    return ErrorCategory.TASK_ERROR
