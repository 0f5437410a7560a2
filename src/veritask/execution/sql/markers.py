"""The marker tables in the SQL server and the script that one attempt runs there.

Three tables in the schema ``veritask`` of the server hold all that ``describe`` needs when no
Veritask process survived:

- ``sql_attempts``: the claim. The script inserts its row (with its backend's pid and start
  time) and commits before the work; the primary key lets one copy of an attempt run, ever.
- ``sql_completions``: the completion marker, inserted **in the work's own transaction**: it
  exists if and only if the work committed.
- ``sql_cancels``: stop requests. A copy that starts after one was made refuses to run.

The statement runs between the claim and the marker, in one transaction with the marker.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from psycopg import sql

from veritask.core.jsontypes import JSONValue

SCHEMA = "veritask"
#: PostgreSQL keeps the first 63 bytes of an application name.
APPLICATION_PREFIX = "veritask-sql:"

CREATE_TABLES = """
SELECT pg_advisory_xact_lock(hashtext('veritask.sql markers'));
CREATE SCHEMA IF NOT EXISTS veritask;
CREATE TABLE IF NOT EXISTS veritask.sql_attempts (
    attempt_key text PRIMARY KEY,
    instance_id text NOT NULL,
    attempt_no integer NOT NULL,
    application_name text NOT NULL,
    token_digest text NOT NULL,
    backend_pid integer NOT NULL,
    backend_start timestamptz NOT NULL,
    started_at timestamptz NOT NULL,
    timeout_seconds double precision,
    grace_seconds double precision NOT NULL,
    error_sqlstate text,
    error_message text
);
CREATE TABLE IF NOT EXISTS veritask.sql_completions (
    attempt_key text PRIMARY KEY,
    ended_at timestamptz NOT NULL
);
CREATE TABLE IF NOT EXISTS veritask.sql_cancels (
    attempt_key text PRIMARY KEY,
    requested_at timestamptz NOT NULL
);
"""

#: The attempt's row, its completion and its stop request, in one read.
READ_ATTEMPT = """
SELECT a.backend_pid, a.backend_start, a.started_at, a.timeout_seconds, a.grace_seconds,
       a.error_sqlstate, a.error_message, a.token_digest, c.ended_at, x.requested_at
FROM (SELECT %(key)s::text AS attempt_key) k
LEFT JOIN veritask.sql_attempts a ON a.attempt_key = k.attempt_key
LEFT JOIN veritask.sql_completions c ON c.attempt_key = k.attempt_key
LEFT JOIN veritask.sql_cancels x ON x.attempt_key = k.attempt_key
"""

#: The server processes of an attempt, by application name (the claim's pid is among them).
READ_ACTIVITY = """
SELECT pid, backend_start, state, wait_event_type, wait_event, query_start, xact_start
FROM pg_stat_activity WHERE application_name = %(application_name)s
ORDER BY backend_start
"""

#: The server itself, as a started report names it, and its clock (reports are numbered by it).
READ_SERVER = """
SELECT (SELECT system_identifier::text FROM pg_control_system()) AS system_identifier,
       host(inet_server_addr()) AS address, inet_server_port() AS port,
       current_database() AS database, pg_postmaster_start_time() AS started_at,
       current_setting('server_version') AS version, clock_timestamp() AS now
"""

REQUEST_CANCEL = """
INSERT INTO veritask.sql_cancels (attempt_key, requested_at) VALUES (%(key)s, now())
ON CONFLICT (attempt_key) DO UPDATE SET requested_at = veritask.sql_cancels.requested_at
RETURNING requested_at, now() - requested_at AS age
"""

RECORD_ERROR = """
UPDATE veritask.sql_attempts SET error_sqlstate = %(sqlstate)s, error_message = %(message)s
WHERE attempt_key = %(key)s AND error_sqlstate IS NULL
"""

FORGET = (
    "DELETE FROM veritask.sql_attempts WHERE attempt_key = %(key)s",
    "DELETE FROM veritask.sql_completions WHERE attempt_key = %(key)s",
    "DELETE FROM veritask.sql_cancels WHERE attempt_key = %(key)s",
)


@dataclass(frozen=True)
class AttemptName:
    """How one attempt is named in the server."""

    instance_id: str
    attempt_no: int

    @property
    def key(self) -> str:
        return f"{self.instance_id}/{self.attempt_no}"

    @property
    def application_name(self) -> str:
        """Short enough for PostgreSQL's 63 bytes, whatever the instance id; the key's hash
        cannot collide in practice, and the marker row keeps the full key beside it."""
        digest = hashlib.sha256(self.key.encode()).hexdigest()[:32]
        return f"{APPLICATION_PREFIX}{digest}"


def token_digest(token: str) -> str:
    """The token never leaves Veritask; its digest tells a same-token repeat from another."""
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class Step:
    """One statement of an attempt's pipeline and its bound values, as text.

    ``types`` are the values' type OIDs (0: the server takes the type the statement gives the
    parameter, as for ``day = $1`` on a date column).
    """

    query: str
    values: tuple[str | None, ...] = ()
    types: tuple[int, ...] = ()


def script(
    name: AttemptName,
    *,
    statement: str,
    token: str,
    timeout: timedelta | None,
    grace: timedelta,
    parameters: Sequence[JSONValue] = (),
) -> tuple[Step, ...]:
    """The whole attempt as statements sent at once, in one pipeline, to one server process.

    Each statement is a message of its own (parse, bind, execute), with its values bound
    apart from its text: whatever the admin's statement holds (an open ``/*``, a trailing
    ``-- comment``), it cannot reach into the claim, the marker or another statement, and a
    value is only ever a value. After an error the server skips the rest up to the final
    sync, so the work's transaction rolls back with its marker.

    All at once, so that the server runs them to the end even if the client that sent them
    dies: it reads the messages from its socket's buffer, and it writes nothing until the
    sync (``client_min_messages`` keeps notices from being sent mid-way).
    """
    key = name.key
    claim = (
        key,
        name.instance_id,
        str(name.attempt_no),
        name.application_name,
        token_digest(token),
        None if timeout is None else repr(timeout.total_seconds()),
        repr(grace.total_seconds()),
    )
    # The platform stops the statement at its timeout (cancel, then terminate after the grace
    # period); the server's own limit, later, stops it when no Veritask process is left to ask.
    backstop = None if timeout is None else timeout + grace
    timeout_ms = 0 if backstop is None else max(1, int(backstop.total_seconds() * 1000))
    return (
        Step("SET client_min_messages = error"),
        Step("SET client_connection_check_interval = 0"),
        # The claim, committed before the work: a second copy fails here, before any work.
        Step("BEGIN"),
        Step(_CLAIM, claim, (0,) * len(claim)),
        Step(
            sql.SQL(
                "DO $veritask$ BEGIN IF EXISTS (SELECT 1 FROM veritask.sql_cancels "
                "WHERE attempt_key = {}) THEN RAISE EXCEPTION 'cancelled before it started' "
                "USING ERRCODE = 'query_canceled'; END IF; END $veritask$"
            )
            .format(sql.Literal(key))
            .as_string(None)
        ),
        Step("COMMIT"),
        # The work and its completion marker: one transaction, so one cannot be without the other.
        Step("BEGIN"),
        Step(_STATEMENT_TIMEOUT, (str(timeout_ms),), (0,)),
        _work(statement, parameters),
        Step(_STATEMENT_TIMEOUT, ("0",), (0,)),
        Step(_COMPLETE, (key,), (0,)),
        Step("COMMIT"),
    )


_CLAIM = (
    "INSERT INTO veritask.sql_attempts (attempt_key, instance_id, attempt_no, "
    "application_name, token_digest, backend_pid, backend_start, started_at, "
    "timeout_seconds, grace_seconds) VALUES ($1, $2, $3, $4, $5, pg_backend_pid(), "
    "(SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()), "
    "clock_timestamp(), $6, $7)"
)
#: For the rest of the work's transaction (``SET LOCAL``).
_STATEMENT_TIMEOUT = "SELECT set_config('statement_timeout', $1, true)"
_COMPLETE = (
    "INSERT INTO veritask.sql_completions (attempt_key, ended_at) VALUES ($1, clock_timestamp())"
)
#: The type OIDs a value says of itself (PostgreSQL's fixed catalogue numbers).
_BOOLEAN, _BIGINT, _NUMERIC, _DOUBLE = 16, 20, 1700, 701


def _work(statement: str, parameters: Sequence[JSONValue]) -> Step:
    """The admin's statement as written; its ``$1``, ``$2``… are bound to ``parameters``."""
    return Step(
        statement,
        tuple(_bound_value(value) for value in parameters),
        tuple(_bound_type(value) for value in parameters),
    )


def _bound_type(value: JSONValue) -> int:
    """A number or a boolean says its type; text (and JSON) is left to the statement."""
    if isinstance(value, bool):
        return _BOOLEAN
    if isinstance(value, int):
        return _BIGINT if -(2**63) <= value < 2**63 else _NUMERIC
    if isinstance(value, float):
        return _DOUBLE
    return 0


def _bound_value(value: JSONValue) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(value, ensure_ascii=False)
