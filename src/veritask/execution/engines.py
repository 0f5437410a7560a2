"""The executors beside ``local`` that the environment asks for, by executor name.

- ``sql``: when any ``VERITASK_SQL_URL_<NAME>`` is set (``execution/sql/connections.py``).
- ``celery``: when ``VERITASK_CELERY_BROKER`` is set (``execution/celery/settings.py``).

The scheduler processes (``python -m veritask.scheduling``, ``veritask up``/``scheduler``) add
these to their ``local`` executor, so a definition's ``executor:`` names one of them.
"""

from __future__ import annotations

from collections.abc import Mapping

from veritask.execution import port, task_env
from veritask.execution.sql import connections

SQL_EXECUTOR = "sql"
CELERY_EXECUTOR = "celery"


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
