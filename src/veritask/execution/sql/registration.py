"""The ``sql`` engine's registration: a statement run in a SQL server named by
``VERITASK_SQL_URL_<NAME>``; its driver (psycopg) is one of Veritask's own dependencies."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

from veritask.execution import port
from veritask.execution.sql import connections

NAME = "sql"


class Source(StrEnum):
    """Where the SQL engine's observations come from."""

    ACTIVITY = "sql_activity"
    """The SQL server's activity view (``pg_stat_activity``), by application name and pid."""
    MARKER = "sql_marker"
    """The marker tables in the SQL server: the claim row and the completion row written in
    the same transaction as the work."""


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
    sources=frozenset(Source),
)
