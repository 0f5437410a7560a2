"""A warehouse (a PostgreSQL database standing for the SQL engine) and a ledger on PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from tests.conftest import POSTGRES, PostgresServer
from veritask.execution.sql import connections


@pytest.fixture
def database_kind() -> str:
    """The scheduler processes of these tests share the ledger: PostgreSQL only."""
    return POSTGRES


@pytest.fixture
def warehouse_url(postgres_server: PostgresServer) -> Iterator[str]:
    """A fresh database on the test server, as libpq wants its URL."""
    name = postgres_server.create_database("vt_warehouse")
    try:
        yield connections.libpq_url(postgres_server.url_for(name))
    finally:
        postgres_server.drop_database(name)


def warehouse_query(url: str, query: str) -> list[tuple[object, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(query)
        return cursor.fetchall() if cursor.description else []
