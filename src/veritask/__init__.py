"""Veritask. ``from veritask import pipeline, task, Param`` is the Python spelling of a
definition (docs/python.md); those names are loaded on first use, so ``import veritask`` (which
every process does) stays light."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from veritask.pipelines import (
        Catchup,
        Check,
        Cron,
        Defaults,
        OnPublished,
        Param,
        Publish,
        Retry,
        Secret,
        Step,
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
    "Publish",
    "Retry",
    "Secret",
    "Step",
    "WaitFor",
    "on_published",
    "pipeline",
    "shell",
    "sql",
    "task",
    "wait",
]

_PIPELINE_NAMES = frozenset(__all__)


def __getattr__(name: str) -> object:
    if name in _PIPELINE_NAMES:
        from veritask import pipelines

        return getattr(pipelines, name)
    raise AttributeError(f"module 'veritask' has no attribute {name!r}")
