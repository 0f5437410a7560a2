"""The ``sql`` engine's registration: a statement run in a SQL server named by
``VERITASK_SQL_URL_<NAME>``; its driver (psycopg) is one of Veritask's own dependencies."""

from __future__ import annotations

from collections.abc import Mapping

from veritask.execution import port
from veritask.execution.sql import connections

NAME = "sql"


def _configured(environ: Mapping[str, str]) -> bool:
    return bool(connections.from_environment(environ))


def _build(environ: Mapping[str, str]) -> port.Executor:
    from veritask.execution.sql import engine  # only deployments that use it pay the import

    return engine.SqlExecutor(servers=connections.from_environment(environ))


ENGINE = port.Engine(
    name=NAME,
    description="one SQL statement run in a PostgreSQL server, watched through its markers",
    setting=f"{connections.ENV_PREFIX}<NAME>",
    configured=_configured,
    build=_build,
    sources=frozenset({port.ObservationSource.SQL_ACTIVITY, port.ObservationSource.SQL_MARKER}),
)
