"""``SqlExecutor``: attempts that are one SQL statement, run inside a PostgreSQL server.

The statement runs in a server process (a backend) that no Veritask process owns: the executor
sends the attempt's script (``markers.script``) on a connection of its own and returns. If the
process that sent it dies, the backend runs the script to its end all the same. ``describe``
needs nothing the executor remembers: the backend is found in ``pg_stat_activity`` by its
application name (``markers.AttemptName``), and the outcome in the marker tables.

The external id is ``sql:<connection>:<instance_id>/<attempt_no>``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import psycopg
from psycopg import pq
from psycopg.rows import dict_row

from veritask.execution import errors, port, secrets
from veritask.execution.sql import connections, markers

EXTERNAL_ID_PREFIX = "sql:"
CONNECT_TIMEOUT_SECONDS = 5
log = logging.getLogger(__name__)

#: SQLSTATEs the server reports when it stopped a statement, and what stopped it.
_QUERY_CANCELED = "57014"
_TERMINATED = ("57P01", "57P02", "57P03")  # admin shutdown, crash shutdown, cannot connect now


@dataclass(frozen=True)
class _Target:
    connection: str
    name: markers.AttemptName

    @property
    def external_id(self) -> str:
        return f"{EXTERNAL_ID_PREFIX}{self.connection}:{self.name.key}"


class SqlExecutor:
    """Runs ``SqlStatement`` attempts on the PostgreSQL servers named in ``servers``.

    ``servers`` maps a connection name (a task's ``connection:``) to its URL. The marker tables
    are created in each server on first use (schema ``veritask``).
    """

    def __init__(
        self,
        *,
        servers: Mapping[str, str],
        secret_providers: Sequence[secrets.SecretProvider] | None = None,
    ) -> None:
        # A URL given as ``secret:<name>`` is looked up at each connection (a rotated
        # password is taken at once); ``secret_providers`` default to this process's.
        self.servers = {
            name: url if secrets.reference(url) else connections.libpq_url(url)
            for name, url in servers.items()
        }
        self._secret_providers = secret_providers
        self._lock = threading.Lock()
        self._prepared: set[str] = set()
        #: Attempts this process sent and whose answer it still reads, by attempt key.
        self._in_flight: dict[str, threading.Thread] = {}
        # Attempts being submitted by a thread of this process right now: a copy submitted at
        # the same moment answers "not created" instead of sending a second script.
        self._submitting: set[str] = set()

    # --- the port -----------------------------------------------------------------------

    def submit(self, *, spec: port.AttemptSpec) -> port.Submission:
        if not isinstance(spec.task, port.SqlStatement):
            raise errors.ExecutorError(
                "the sql executor runs sql tasks only (a task with sql: and connection:)"
            )
        target = _Target(
            spec.task.connection, markers.AttemptName(spec.instance_id, spec.attempt_no)
        )
        with _server_errors(target.external_id):
            return self._submit(spec, spec.task, target)

    def describe(self, *, external_id: str) -> port.Observation:
        target = self._target(external_id)
        with _server_errors(external_id), self._connect(target.connection) as conn:
            return _describe(conn, target)

    def cancel(self, *, external_id: str) -> None:
        target = self._target(external_id)
        with _server_errors(external_id), self._connect(target.connection) as conn:
            self._cancel(conn, target)

    def cleanup(self, *, external_id: str) -> None:
        target = self._target(external_id)
        with _server_errors(external_id), self._connect(target.connection) as conn:
            observation = _describe(conn, target)
            if observation.engine_state in (port.EngineState.PENDING, port.EngineState.RUNNING):
                raise errors.ExecutorError(
                    f"{external_id} is {observation.engine_state}: cancel it before cleanup",
                    retryable=True,
                )
            with conn.transaction():
                for statement in markers.FORGET:
                    conn.execute(statement, {"key": target.name.key})

    def wait_for_answers(self, timeout: float) -> None:
        """Wait until this process has read the answers of what it sent (tests, shutdown)."""
        with self._lock:
            threads = list(self._in_flight.values())
        for thread in threads:
            thread.join(timeout)

    # --- submitting ---------------------------------------------------------------------

    def _submit(
        self, spec: port.AttemptSpec, task: port.SqlStatement, target: _Target
    ) -> port.Submission:
        key = target.name.key
        with self._lock:
            if key in self._in_flight or key in self._submitting:
                return port.Submission(target.external_id, created=False)
            self._submitting.add(key)
        try:
            return self._send(spec, task, target)
        finally:
            with self._lock:
                self._submitting.discard(key)

    def _send(
        self, spec: port.AttemptSpec, task: port.SqlStatement, target: _Target
    ) -> port.Submission:
        key = target.name.key
        with self._connect(task.connection) as conn:
            row = _read_attempt(conn, target.name)
            if row["token_digest"] is not None:
                if row["token_digest"] != markers.token_digest(spec.attempt_token):
                    raise errors.ExecutorError(
                        f"attempt {key} was submitted before with another attempt token",
                        retryable=False,
                    )
                return port.Submission(target.external_id, created=False)
            if row["requested_at"] is not None:
                return port.Submission(target.external_id, created=False)  # stopped for good
            if _activity(conn, target.name):
                return port.Submission(target.external_id, created=False)  # starting now
        script = markers.script(
            target.name,
            statement=task.statement,
            parameters=task.parameters,
            token=spec.attempt_token,
            timeout=spec.timeout,
            grace=spec.grace_period,
        )
        runner = psycopg.connect(
            self._url(task.connection),
            autocommit=True,
            application_name=target.name.application_name,
            connect_timeout=CONNECT_TIMEOUT_SECONDS,
        )
        try:
            runner.pgconn.send_query(script.encode())
        except BaseException:
            runner.close()
            raise
        # Another process (a second scheduler) may have sent it too: the claim's primary key
        # lets one of the two run, and the other ends before any work.
        reader = threading.Thread(
            target=self._read_answer,
            args=(runner, target),
            name=f"sql-answer-{key}",
            daemon=True,
        )
        with self._lock:
            self._in_flight[key] = reader
        reader.start()
        return port.Submission(target.external_id, created=True)

    def _read_answer(self, runner: psycopg.Connection[tuple[object, ...]], target: _Target) -> None:
        """Read the script's answer; record the server's error, if any, beside the claim.

        Only evidence is lost when this process dies first: without the error, ``describe``
        still knows the work did not commit (no completion marker, no backend).
        """
        sqlstate: str | None = None
        message: str | None = None
        try:
            pgconn = runner.pgconn
            while True:
                select.select([pgconn.socket], [], [], 1.0)
                pgconn.consume_input()
                finished = False
                while not pgconn.is_busy():
                    result = pgconn.get_result()
                    if result is None:
                        finished = True
                        break
                    if result.status == pq.ExecStatus.FATAL_ERROR and sqlstate is None:
                        sqlstate = _text(result.error_field(pq.DiagnosticField.SQLSTATE))
                        message = _text(result.error_field(pq.DiagnosticField.MESSAGE_PRIMARY))
                if finished:
                    break
        except (psycopg.Error, OSError) as exc:
            if sqlstate is None:
                message = message or str(exc) or "the connection to the server was lost"
                sqlstate = "08006"  # connection_failure: the server ended the session
        finally:
            runner.close()
            with self._lock:
                self._in_flight.pop(target.name.key, None)
        if sqlstate is None:
            return
        try:
            with self._connect(target.connection) as conn:
                conn.execute(
                    markers.RECORD_ERROR,
                    {"key": target.name.key, "sqlstate": sqlstate, "message": message},
                )
        except psycopg.Error as exc:
            log.warning("could not record the error of %s: %s", target.external_id, exc)

    # --- stopping -----------------------------------------------------------------------

    def _cancel(self, conn: psycopg.Connection[dict[str, object]], target: _Target) -> None:
        """Record the request, then cancel the statement; terminate the backend once the
        attempt's grace period has passed since the first request."""
        request = conn.execute(markers.REQUEST_CANCEL, {"key": target.name.key}).fetchone()
        row = _read_attempt(conn, target.name)
        grace = row["grace_seconds"]
        age = request["age"] if request is not None else None
        late = (
            isinstance(grace, float) and isinstance(age, timedelta) and age.total_seconds() >= grace
        )
        stop = "pg_terminate_backend" if late else "pg_cancel_backend"
        for backend in _activity(conn, target.name):
            conn.execute(f"SELECT {stop}(%(pid)s)", {"pid": backend["pid"]})

    # --- helpers ------------------------------------------------------------------------

    def _target(self, external_id: str) -> _Target:
        rest = external_id.removeprefix(EXTERNAL_ID_PREFIX)
        connection, _, key = rest.partition(":")
        instance_id, _, number = key.rpartition("/")
        if (
            not external_id.startswith(EXTERNAL_ID_PREFIX)
            or not instance_id
            or not number.isdigit()
        ):
            raise errors.ExecutorError(f"not a sql external id: {external_id!r}")
        return _Target(connection, markers.AttemptName(instance_id, int(number)))

    def _url(self, connection: str) -> str:
        url = self.servers.get(connection)
        if url is None:
            raise errors.ExecutorError(
                f"no SQL connection named {connection!r}: set "
                f"{connections.ENV_PREFIX}{connection.upper().replace('-', '_')}",
                retryable=False,
            )
        name = secrets.reference(url)
        if name is None:
            return url
        providers = self._secret_providers
        if providers is None:
            providers = secrets.providers_from_environment(os.environ)
        try:
            return connections.libpq_url(secrets.lookup(name, providers=providers))
        except secrets.SecretError as exc:
            raise errors.ExecutorError(
                f"the SQL connection {connection!r}: {exc}", retryable=False
            ) from None
        except ValueError:
            # The message would quote the URL, password and all.
            raise errors.ExecutorError(
                f"the SQL connection {connection!r}: the secret {name!r} is not a PostgreSQL URL",
                retryable=False,
            ) from None

    @contextlib.contextmanager
    def _connect(self, connection: str) -> Iterator[psycopg.Connection[dict[str, object]]]:
        with psycopg.connect(
            self._url(connection),
            autocommit=True,
            row_factory=dict_row,
            application_name="veritask-sql-executor",
            connect_timeout=CONNECT_TIMEOUT_SECONDS,
        ) as conn:
            if connection not in self._prepared:
                with conn.transaction():
                    conn.execute(markers.CREATE_TABLES)
                with self._lock:
                    self._prepared.add(connection)
            yield conn


def _read_attempt(
    conn: psycopg.Connection[dict[str, object]], name: markers.AttemptName
) -> dict[str, object]:
    row = conn.execute(markers.READ_ATTEMPT, {"key": name.key}).fetchone()
    if row is None:  # the query always returns its one row
        raise errors.ExecutorError("the marker tables gave no answer", retryable=True)
    return row


def _activity(
    conn: psycopg.Connection[dict[str, object]], name: markers.AttemptName
) -> list[dict[str, object]]:
    return conn.execute(
        markers.READ_ACTIVITY, {"application_name": name.application_name}
    ).fetchall()


def _describe(conn: psycopg.Connection[dict[str, object]], target: _Target) -> port.Observation:
    """Activity first, markers second: a backend that is gone has committed or rolled back for
    good, so "gone, and no completion marker" can only mean the work did not commit."""
    backends = _activity(conn, target.name)
    row = _read_attempt(conn, target.name)
    details: dict[str, port.DetailValue] = {
        "application_name": target.name.application_name,
        "completion_marker": row["ended_at"] is not None,
        "cancel_requested": row["requested_at"] is not None,
    }
    observe = port.ObservationDraft(target.external_id, details)
    if row["backend_pid"] is None:
        # No claim: the script has not reached it, was stopped before it, or never came.
        if backends:
            details["backend_pid"] = _int(backends[0]["pid"])
            return observe.make(port.EngineState.PENDING, port.ObservationSource.SQL_ACTIVITY)
        if row["requested_at"] is not None:
            details["reason"] = "cancelled before it started"
            return observe.make(
                port.EngineState.FAILED,
                port.ObservationSource.SQL_MARKER,
                category=port.ErrorCategory.CANCELLED,
            )
        return observe.make(port.EngineState.NOT_FOUND, port.ObservationSource.SQL_MARKER)
    pid = _int(row["backend_pid"])
    observe.engine_id = f"{target.connection}:{pid}:{_time(row['backend_start']).isoformat()}"
    observe.started_at = _time(row["started_at"])
    details.update(backend_pid=pid, error_sqlstate=_str(row["error_sqlstate"]))
    details["error_message"] = _str(row["error_message"])
    own = [b for b in backends if b["pid"] == pid and b["backend_start"] == row["backend_start"]]
    if row["ended_at"] is not None:
        observe.ended_at = _time(row["ended_at"])
        return observe.make(
            port.EngineState.SUCCEEDED,
            port.ObservationSource.SQL_MARKER,
            category=port.ErrorCategory.NONE,
        )
    if own and own[0]["state"] in ("active", "idle in transaction"):
        details.update(backend_state=_str(own[0]["state"]), wait_event=_str(own[0]["wait_event"]))
        return observe.make(port.EngineState.RUNNING, port.ObservationSource.SQL_ACTIVITY)
    details["backend_alive"] = bool(own)
    if own:
        details["backend_state"] = _str(own[0]["state"])
    return observe.make(
        port.EngineState.FAILED,
        port.ObservationSource.SQL_ACTIVITY if own else port.ObservationSource.SQL_MARKER,
        category=_category(row),
    )


def _category(row: Mapping[str, object]) -> port.ErrorCategory:
    """How a statement that did not commit ended, from the stop request and the server's code."""
    sqlstate = row["error_sqlstate"]
    if row["requested_at"] is not None:
        return port.ErrorCategory.CANCELLED
    if sqlstate == _QUERY_CANCELED and row["timeout_seconds"] is not None:
        return port.ErrorCategory.TIMEOUT
    if sqlstate in _TERMINATED or sqlstate == _QUERY_CANCELED:
        return port.ErrorCategory.KILLED
    return port.ErrorCategory.TASK_ERROR


@contextlib.contextmanager
def _server_errors(external_id: str) -> Iterator[None]:
    """Translate the driver's errors once: the server may come back, a bad statement won't."""
    try:
        yield
    except errors.ExecutorError:
        raise
    except psycopg.OperationalError as exc:
        raise errors.ExecutorError(f"{external_id}: {exc}", retryable=True) from exc
    except psycopg.Error as exc:
        raise errors.ExecutorError(f"{external_id}: {exc}", retryable=False) from exc


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode(errors="replace")


def _int(value: object) -> int:
    if not isinstance(value, int):
        raise errors.ExecutorError(f"the server answered {value!r} where a number belongs")
    return value


def _str(value: object) -> str | None:
    return None if value is None else str(value)


def _time(value: object) -> datetime:
    if not isinstance(value, datetime):
        raise errors.ExecutorError(f"the server answered {value!r} where a time belongs")
    return value
