"""Pipelines written in Python: a typed spelling of a definition (docs/python.md).

``from veritask import pipeline, task, Param`` gives the same names; this package imports only
the standard library until a pipeline is compiled (``veritask.pipelines.compile``).
"""

from __future__ import annotations

from veritask.pipelines.api import (
    Catchup,
    Check,
    Cron,
    Defaults,
    OnPublished,
    Param,
    Pipeline,
    PipelineError,
    Publish,
    Refusal,
    Result,
    Retry,
    Secret,
    Step,
    Task,
    WaitFor,
    on_published,
    pipeline,
    shell,
    sql,
    task,
    wait,
)

__all__ = [
    "Catchup",
    "Check",
    "Cron",
    "Defaults",
    "OnPublished",
    "Param",
    "Pipeline",
    "PipelineError",
    "Publish",
    "Refusal",
    "Result",
    "Retry",
    "Secret",
    "Step",
    "Task",
    "WaitFor",
    "on_published",
    "pipeline",
    "shell",
    "sql",
    "task",
    "wait",
]
