"""The executors beside ``local`` that the environment asks for, by executor name.

- ``sql``: when any ``VERITASK_SQL_URL_<NAME>`` is set (``execution/sql/connections.py``).
- ``celery``: when ``VERITASK_CELERY_BROKER`` is set (``execution/celery/settings.py``).

The scheduler processes (``python -m veritask.scheduling``, ``veritask up``/``scheduler``) add
these to their ``local`` executor, so a definition's ``executor:`` names one of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from veritask.core import problems
from veritask.execution import port, task_env
from veritask.execution.sql import connections

LOCAL_EXECUTOR: Final = "local"
#: The scheduler process checks a ``wait:`` task's condition itself (``execution/waits.py``).
WAIT_EXECUTOR: Final = "wait"
SQL_EXECUTOR: Final = "sql"
CELERY_EXECUTOR: Final = "celery"
#: Every executor name an engine of this platform answers to, configured here or not.
KNOWN: Final = (LOCAL_EXECUTOR, WAIT_EXECUTOR, SQL_EXECUTOR, CELERY_EXECUTOR)
#: What the environment sets for an engine that needs settings (none for the others).
SETTINGS: Final = {
    SQL_EXECUTOR: f"{connections.ENV_PREFIX}<NAME>",
    CELERY_EXECUTOR: "VERITASK_CELERY_BROKER",
}


def configured(environ: Mapping[str, str]) -> frozenset[str]:
    """The executor names a scheduler started with ``environ`` serves (no engine is built)."""
    names = {LOCAL_EXECUTOR, WAIT_EXECUTOR}
    if connections.from_environment(environ):
        names.add(SQL_EXECUTOR)
    if environ.get(SETTINGS[CELERY_EXECUTOR]):
        names.add(CELERY_EXECUTOR)
    return frozenset(names)


def unknown_problem(name: str) -> str | None:
    """Why no task may name the executor ``name`` anywhere: no engine has it (or None)."""
    if name in KNOWN:
        return None
    return problems.UNKNOWN_EXECUTOR.format(name=name, known=", ".join(KNOWN))


def executor_problem(name: str, environ: Mapping[str, str]) -> str | None:
    """Why a task may not name the executor ``name`` here, or None when it may: a name no
    engine of this platform has, or an engine whose settings ``environ`` lacks."""
    unknown = unknown_problem(name)
    if unknown is not None:
        return unknown
    if name not in configured(environ):
        return problems.EXECUTOR_NOT_CONFIGURED.format(name=name, setting=SETTINGS[name])
    return None


def from_environment(environ: Mapping[str, str]) -> dict[str, port.Executor]:
    """The configured engines; an engine whose settings are absent is not registered.

    Raises ValueError for a task pass-through list that names a platform setting: the
    scheduler refuses to start rather than fail every attempt of its ``local`` workers."""
    task_env.passthrough_names(environ)
    found: dict[str, port.Executor] = {}
    servers = connections.from_environment(environ)
    if servers:
        from veritask.execution.sql import engine  # only deployments that use it pay the import

        found[SQL_EXECUTOR] = engine.SqlExecutor(servers=servers)
    from veritask.execution.celery import settings  # light: no Celery import

    celery = settings.CelerySettings.from_environment(environ)
    if celery is not None:
        from veritask.execution.celery import executor

        found[CELERY_EXECUTOR] = executor.CeleryExecutor(celery)
    return found
