"""Databases for tests: every ledger test runs on SQLite and on PostgreSQL.

Fixtures:

- ``database_url``: the URL of a fresh, migrated database for this test, parametrized
  ``[sqlite, postgres]``. SQLite is a file in ``tmp_path`` copied from a template migrated
  once per session; PostgreSQL is ``CREATE DATABASE vt_<random> TEMPLATE <session template>``
  (procrastinate's approach), dropped after the test.
- ``empty_database_url``: the same, never migrated (for migration tests).
- ``engine``: ``dialects.create_engine(database_url)``, disposed after the test.
- ``database_kind``: ``"sqlite"`` or ``"postgres"``.

Tasks run as the user who runs the tests (``VERITASK_TASK_USER`` is set to it here, for every
process the tests start): they write to ``tmp_path`` and read the repository, which a root's
test run keeps private. Only the isolation tests (``tests/execution/test_task_isolation.py``)
run tasks as another user.

PostgreSQL is found at ``VERITASK_TEST_POSTGRES_URL`` (default
``postgresql+psycopg://postgres@127.0.0.1:5432/postgres``). If it cannot be reached its
parameters are skipped, unless ``VERITASK_REQUIRE_SERVICES=1``: then they fail.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa
from psycopg import sql
from sqlalchemy.engine import Engine

from veritask.execution import task_user
from veritask.ledger import dialects, migrate

os.environ.setdefault(task_user.SETTING, pwd.getpwuid(os.geteuid()).pw_name)

POSTGRES_ADMIN_URL = os.environ.get(
    "VERITASK_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
SQLITE = "sqlite"
POSTGRES = "postgres"


@dataclass(frozen=True)
class PostgresServer:
    """The test server, administered through a maintenance database."""

    admin_url: sa.URL

    def url_for(self, database: str) -> str:
        """The SQLAlchemy URL of ``database`` on this server."""
        return self.admin_url.set(database=database).render_as_string(hide_password=False)

    def _admin(self) -> psycopg.Connection[tuple[object, ...]]:
        return psycopg.connect(
            host=self.admin_url.host or "127.0.0.1",
            port=self.admin_url.port or 5432,
            user=self.admin_url.username or "postgres",
            password=self.admin_url.password or None,
            dbname=self.admin_url.database or "postgres",
            autocommit=True,
            connect_timeout=3,
        )

    def create_database(self, prefix: str, *, template: str | None = None) -> str:
        """Create a database with a random name; return the name."""
        name = f"{prefix}_{secrets.token_hex(6)}"
        statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template is not None:
            statement = sql.SQL("{} TEMPLATE {}").format(statement, sql.Identifier(template))
        with self._admin() as admin:
            admin.execute(statement)
        return name

    def drop_database(self, name: str) -> None:
        """Drop the database, ending any session still connected to it."""
        with self._admin() as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )

    def check_reachable(self) -> None:
        """Raise ``psycopg.OperationalError`` if the server cannot be reached."""
        with self._admin() as admin:
            admin.execute("SELECT 1")


@pytest.fixture(scope="session")
def postgres_server() -> PostgresServer:
    """The PostgreSQL test server; skipped (or failed, if required) when unreachable."""
    server = PostgresServer(admin_url=dialects.normalize_url(POSTGRES_ADMIN_URL))
    try:
        server.check_reachable()
    except psycopg.OperationalError as exc:
        message = f"PostgreSQL at {server.admin_url.render_as_string()} is unreachable: {exc}"
        if os.environ.get("VERITASK_REQUIRE_SERVICES") == "1":
            pytest.fail(f"VERITASK_REQUIRE_SERVICES=1 and {message}", pytrace=False)
        pytest.skip(message)
    return server


@pytest.fixture(scope="session")
def postgres_template(postgres_server: PostgresServer) -> Iterator[str]:
    """A migrated database that each test's database is copied from, built once a session.

    Its name is random so that concurrent sessions against one server do not collide.
    """
    name = postgres_server.create_database("veritask_template")
    try:
        migrate.upgrade(postgres_server.url_for(name))
        yield name
    finally:
        postgres_server.drop_database(name)


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated SQLite file that each test's database is copied from."""
    path = tmp_path_factory.mktemp("template") / "veritask.db"
    migrate.upgrade(f"sqlite:///{path}")
    return path


@pytest.fixture(params=[SQLITE, pytest.param(POSTGRES, marks=pytest.mark.postgres)])
def database_kind(request: pytest.FixtureRequest) -> str:
    """Which database this test runs on."""
    kind: str = request.param
    return kind


@pytest.fixture
def database_url(
    database_kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[str]:
    """A fresh migrated database for this test (see the module docstring)."""
    if database_kind == SQLITE:
        template: Path = request.getfixturevalue("sqlite_template")
        path = tmp_path / "veritask.db"
        shutil.copyfile(template, path)
        yield f"sqlite:///{path}"
        return
    server: PostgresServer = request.getfixturevalue("postgres_server")
    template_name: str = request.getfixturevalue("postgres_template")
    name = server.create_database("vt", template=template_name)
    try:
        yield server.url_for(name)
    finally:
        server.drop_database(name)


@pytest.fixture
def empty_database_url(
    database_kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[str]:
    """A fresh database with no tables at all."""
    if database_kind == SQLITE:
        yield f"sqlite:///{tmp_path / 'empty.db'}"
        return
    server: PostgresServer = request.getfixturevalue("postgres_server")
    name = server.create_database("vt")
    try:
        yield server.url_for(name)
    finally:
        server.drop_database(name)


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    """An engine on this test's migrated database."""
    created = dialects.create_engine(database_url)
    try:
        yield created
    finally:
        created.dispose()
