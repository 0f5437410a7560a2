"""``SqlExecutor``: attempts that are one SQL statement, run inside a PostgreSQL server.

The statement runs in a server process (a backend) that no Veritask process owns: the executor
sends the attempt's script (``markers.script``) on a connection of its own and returns. If the
process that sent it dies, the backend runs the script to its end all the same. ``describe``
needs nothing the executor remembers: the backend is found in ``pg_stat_activity`` by its
application name (``markers.AttemptName``), and the outcome in the marker tables.

No worker runs the statement either: the thread that reads the answer also watches the server
and reports for the attempt (``reports``): ``started`` when the claim commits (the statement's
start, by the server's clock), phases, heartbeats, and ``completed`` with ``describe``'s answer
when it ends. If that process dies, another that holds the attempt's token takes the watching
over (``resume``).

The external id is ``sql:<connection>:<instance_id>/<attempt_no>``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import psycopg
from psycopg import pq
from psycopg.rows import dict_row

from veritask.core import jsontypes
from veritask.execution import engine_watch, errors, port, secrets
from veritask.execution.sql import connections, markers, registration, reports

EXTERNAL_ID_PREFIX = "sql:"
CONNECT_TIMEOUT_SECONDS = 5
#: The longest the server may take to accept the script (it reads all but the few statements
#: after the work before it starts the work).
SEND_TIMEOUT_SECONDS = 30
#: How often a watcher looks at the server before the statement starts (a start is reported
#: this late at most), and after (an end is, when this process did not send the statement).
WATCH_BEFORE_START_SECONDS = 0.1
WATCH_WHILE_RUNNING_SECONDS = 0.5
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
        #: Attempts this process watches (it sent them, or took them over), by attempt key.
        self._watching: dict[str, threading.Thread] = {}
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

    def resume(self, *, spec: port.AttemptSpec) -> bool:
        """Watch and report on an attempt the server runs that no process of ours watches any
        more (the one that sent it died); True if this process watches it now."""
        if not isinstance(spec.task, port.SqlStatement):
            return False
        target = _Target(
            spec.task.connection, markers.AttemptName(spec.instance_id, spec.attempt_no)
        )
        with self._lock:
            if target.name.key in self._watching:
                return True
        with _server_errors(target.external_id), self._connect(target.connection) as conn:
            row = _read_attempt(conn, target.name)
            digest = row["token_digest"]
            if digest is not None and digest != markers.token_digest(spec.attempt_token):
                raise errors.ExecutorError(
                    f"attempt {target.name.key} runs with another attempt token",
                    retryable=False,
                )
            if not _activity(conn, target.name):
                return False  # ended: describe tells how
        return self._watch(spec, target, None)

    def wait_for_answers(self, timeout: float) -> None:
        """Wait until this process has seen the end of what it watches (tests, shutdown)."""
        with self._lock:
            threads = list(self._watching.values())
        for thread in threads:
            thread.join(timeout)

    # --- submitting ---------------------------------------------------------------------

    def _submit(
        self, spec: port.AttemptSpec, task: port.SqlStatement, target: _Target
    ) -> port.Submission:
        key = target.name.key
        with self._lock:
            if key in self._watching or key in self._submitting:
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
            _send_all(runner.pgconn, script)
        except BaseException:
            runner.close()
            raise
        # Another process (a second scheduler) may have sent it too: the claim's primary key
        # lets one of the two run, and the other ends before any work.
        self._watch(spec, target, runner)
        return port.Submission(target.external_id, created=True)

    # --- watching -----------------------------------------------------------------------

    def _watch(
        self,
        spec: port.AttemptSpec,
        target: _Target,
        runner: psycopg.Connection[tuple[object, ...]] | None,
    ) -> bool:
        watcher = threading.Thread(
            target=self._follow,
            args=(spec, target, runner),
            name=f"sql-watch-{target.name.key}",
            daemon=True,
        )
        with self._lock:
            if target.name.key in self._watching:
                if runner is not None:
                    runner.close()
                return True
            self._watching[target.name.key] = watcher
        watcher.start()
        return True

    def _follow(
        self,
        spec: port.AttemptSpec,
        target: _Target,
        runner: psycopg.Connection[tuple[object, ...]] | None,
    ) -> None:
        """Read the script's answer (if this process sent it) and report what the server
        shows, until the statement ends."""
        answer = _Answer(runner) if runner is not None else None
        watch = _Watch(engine_watch.Reporter(spec), target.connection, spec.heartbeat_interval)
        # One connection for the whole watch, opened again after an error: a warehouse counts
        # its connections.
        conn: psycopg.Connection[dict[str, object]] | None = None
        try:
            while True:
                pause = watch.pause()
                if answer is not None:
                    if answer.read(pause):
                        self._record_error(target, answer)
                        answer = None
                else:
                    time.sleep(pause)
                try:
                    conn = conn or self._open(target.connection)
                    server = conn.execute(markers.READ_SERVER).fetchone() or {}
                    observation = _describe(conn, target)
                    if watch.saw(observation, server, answered=answer is None):
                        return
                except (psycopg.Error, errors.ExecutorError) as exc:
                    log.warning("could not look at %s: %s", target.external_id, exc)
                    if conn is not None:
                        conn.close()
                        conn = None
        finally:
            if conn is not None:
                conn.close()
            if answer is not None:
                answer.close()
            watch.close()
            with self._lock:
                self._watching.pop(target.name.key, None)

    def _record_error(self, target: _Target, answer: _Answer) -> None:
        """Keep the server's error beside the claim. Only evidence is lost when this process
        dies first: without it, ``describe`` still knows the work did not commit."""
        if answer.sqlstate is None:
            return
        try:
            with self._connect(target.connection) as conn:
                values = {"sqlstate": answer.sqlstate, "message": answer.message}
                conn.execute(markers.RECORD_ERROR, {"key": target.name.key, **values})
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
        with self._open(connection) as conn:
            yield conn

    def _open(self, connection: str) -> psycopg.Connection[dict[str, object]]:
        conn = psycopg.connect(
            self._url(connection),
            autocommit=True,
            row_factory=dict_row,
            application_name="veritask-sql-executor",
            connect_timeout=CONNECT_TIMEOUT_SECONDS,
        )
        try:
            if connection not in self._prepared:
                with conn.transaction():
                    conn.execute(markers.CREATE_TABLES)
                with self._lock:
                    self._prepared.add(connection)
        except BaseException:
            conn.close()
            raise
        return conn


def _send_all(pgconn: pq.abc.PGconn, script: Sequence[markers.Step]) -> None:
    """Send every statement of the script, each with its bound values, then the sync, and
    wait until the server has them all: from then on it runs them whatever becomes of us."""
    pgconn.enter_pipeline_mode()
    for step in script:
        pgconn.send_query_params(
            step.query.encode(),
            [None if value is None else value.encode() for value in step.values],
            param_types=step.types or None,
        )
    pgconn.pipeline_sync()
    deadline = time.monotonic() + SEND_TIMEOUT_SECONDS
    while pgconn.flush():
        left = deadline - time.monotonic()
        if left <= 0:
            raise psycopg.OperationalError("the server took no more of the attempt's script")
        select.select([], [pgconn.socket], [], left)


class _Answer:
    """The answer to the script, read from the connection that sent it."""

    def __init__(self, runner: psycopg.Connection[tuple[object, ...]]) -> None:
        self._runner = runner
        self.sqlstate: str | None = None
        self.message: str | None = None

    def read(self, timeout: float) -> bool:
        """Read what came within ``timeout``; True once the whole answer is in."""
        pgconn = self._runner.pgconn
        try:
            select.select([pgconn.socket], [], [], timeout)
            pgconn.consume_input()
            while not pgconn.is_busy():
                result = pgconn.get_result()
                if result is None:
                    continue  # the end of one statement's results; the next one's follow
                if result.status == pq.ExecStatus.PIPELINE_SYNC:
                    self.close()
                    return True
                if result.status == pq.ExecStatus.FATAL_ERROR and self.sqlstate is None:
                    self.sqlstate = _text(result.error_field(pq.DiagnosticField.SQLSTATE))
                    self.message = _text(result.error_field(pq.DiagnosticField.MESSAGE_PRIMARY))
        except (psycopg.Error, OSError) as exc:
            if self.sqlstate is None:
                self.message = self.message or str(exc) or "the connection to the server was lost"
                self.sqlstate = "08006"  # connection_failure: the server ended the session
            self.close()
            return True
        return False

    def close(self) -> None:
        self._runner.close()


class _Watch:
    """What one watcher has reported of an attempt, and what it reports next."""

    def __init__(self, reporter: engine_watch.Reporter, connection: str, beat: timedelta) -> None:
        self.reporter = reporter
        self.connection = connection
        self.beat_seconds = beat.total_seconds()
        self.started_at: datetime | None = None
        self.beat_due = 0.0

    def pause(self) -> float:
        if self.started_at is None:
            return WATCH_BEFORE_START_SECONDS
        return min(WATCH_WHILE_RUNNING_SECONDS, self.beat_seconds)

    def saw(
        self, observation: port.Observation, server: Mapping[str, object], *, answered: bool
    ) -> bool:
        """Report what ``observation`` shows; True when there is nothing left to watch."""
        now = _time(server.get("now"))
        if observation.started_at is not None and self.started_at is None:
            self._report_start(observation, server)
        if observation.ended or observation.engine_state is port.EngineState.NOT_FOUND:
            if not answered:
                return False  # this process sent it: its answer (the error) comes first
            if self.started_at is not None:
                self._report_end(observation, now)
            # Never claimed: cancelled before it started, or never run; the reconciler asks.
            return True
        if self.started_at is not None and time.monotonic() >= self.beat_due:
            seq = engine_watch.clock_seq(self.started_at, now)
            self.reporter.send("heartbeat", {}, seq=seq, event_time=now)
            self.beat_due = time.monotonic() + self.beat_seconds
        return False

    def _report_start(self, observation: port.Observation, server: Mapping[str, object]) -> None:
        started_at = observation.started_at
        if started_at is None:
            return
        details = observation.details
        query_start = details.get("query_start")
        identity: dict[str, jsontypes.JSONValue] = {
            key: _json(server.get(key))
            for key in ("system_identifier", "address", "port", "database", "started_at", "version")
        }
        evidence = reports.started_evidence(
            connection=self.connection,
            server=identity,
            backend_pid=_int(details.get("backend_pid")),
            backend_start=datetime.fromisoformat(str(details.get("backend_start"))),
            query_start=None if query_start is None else datetime.fromisoformat(str(query_start)),
        )
        self.reporter.send("started", evidence, seq=engine_watch.STARTED_SEQ, event_time=started_at)
        self.reporter.send(
            "progress",
            reports.progress_evidence(reports.EXECUTING),
            seq=reports.EXECUTING_SEQ,
            event_time=started_at,
        )
        self.started_at = started_at
        self.beat_due = time.monotonic() + self.beat_seconds

    def _report_end(self, observation: port.Observation, now: datetime) -> None:
        started_at = self.started_at
        if started_at is None:
            return
        seq = engine_watch.clock_seq(started_at, now)
        ended_at = observation.ended_at or now
        if observation.engine_state is port.EngineState.SUCCEEDED:
            # Its output and its completion marker were committed together, at ``ended_at``.
            writing = reports.progress_evidence(reports.WRITING_RESULTS)
            self.reporter.send("progress", writing, seq=seq, event_time=ended_at)
        completed = reports.completed_evidence(observation)
        self.reporter.send("completed", completed, seq=seq + 1, event_time=max(ended_at, now))

    def close(self) -> None:
        self.reporter.close()


def _json(value: object) -> jsontypes.JSONValue:
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


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
            return observe.make(port.EngineState.PENDING, registration.Source.ACTIVITY)
        if row["requested_at"] is not None:
            details["reason"] = "cancelled before it started"
            return observe.make(
                port.EngineState.FAILED,
                registration.Source.MARKER,
                category=port.ErrorCategory.CANCELLED,
            )
        return observe.make(port.EngineState.NOT_FOUND, registration.Source.MARKER)
    pid = _int(row["backend_pid"])
    observe.engine_id = f"{target.connection}:{pid}:{_time(row['backend_start']).isoformat()}"
    observe.started_at = _time(row["started_at"])
    details.update(backend_pid=pid, error_sqlstate=_str(row["error_sqlstate"]))
    details["backend_start"] = _time(row["backend_start"]).isoformat()
    details["error_message"] = _str(row["error_message"])
    own = [b for b in backends if b["pid"] == pid and b["backend_start"] == row["backend_start"]]
    if row["ended_at"] is not None:
        observe.ended_at = _time(row["ended_at"])
        return observe.make(
            port.EngineState.SUCCEEDED,
            registration.Source.MARKER,
            category=port.ErrorCategory.NONE,
        )
    if own and own[0]["state"] in ("active", "idle in transaction"):
        details.update(backend_state=_str(own[0]["state"]), wait_event=_str(own[0]["wait_event"]))
        query_start = own[0]["query_start"]
        if isinstance(query_start, datetime):
            details["query_start"] = query_start.isoformat()
        return observe.make(port.EngineState.RUNNING, registration.Source.ACTIVITY)
    details["backend_alive"] = bool(own)
    if own:
        details["backend_state"] = _str(own[0]["state"])
    return observe.make(
        port.EngineState.FAILED,
        registration.Source.ACTIVITY if own else registration.Source.MARKER,
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
