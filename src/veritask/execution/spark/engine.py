"""``SparkExecutor``: each attempt is one driver of a Spark standalone master, submitted over
the master's REST submission server (``client``) in cluster mode.

The master chooses the driver's id (``driver-<time>-<n>``), so the attempt's identity travels
in the application's name (``spark.app.name``, ``app_name``): the instance, the attempt number
and a hash of the attempt token (never the token). Every submission is written to a journal
(``<state>/attempts/<name>.json``) before it is sent and completed with the driver's id when the
master answers: submitting the same attempt again, from this process or after a restart, reads
the id there and starts nothing. A submission whose answer was lost (the process died while the
master answered) is found again among the master's drivers by its name, which the worker writes
in the launch command at the head of the driver's ``stderr``; while a driver of the master waits
for a core (it has no directory yet, so no name to read) the submission is refused as retryable
rather than risk a second driver.

The master is the source of truth: no worker of ours runs beside the driver. ``describe`` reads
the driver's state (``/v1/submissions/status``); a thread of the submitting process (``watch``)
reports for the attempt from it (``started``, heartbeats while RUNNING, ``completed``), and
after a restart ``resume`` lets another process take the watching over. The driver's state is
trusted, not the application's: an application may say FINISHED of a driver that then failed.

The external id is ``spark:<driver id>``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Final

from veritask.core import jsontypes
from veritask.execution import engine_watch, errors, port, secrets
from veritask.execution.spark import client, registration, watch

EXTERNAL_ID_PREFIX: Final = "spark:"
NAME_PREFIX: Final = "veritask-"
PYTHON_RUNNER: Final = "org.apache.spark.deploy.PythonRunner"
#: Properties the executor sets itself: a task's ``conf`` may not name them.
RESERVED_CONF: Final = frozenset(
    {"spark.app.name", "spark.master", "spark.submit.deployMode", "spark.driver.supervise"}
)
#: How long a cancel waits for the master to confirm the driver KILLED before it asks again.
KILL_CONFIRM_SECONDS: Final = 30.0
#: A driver id as the master makes them; anything else is no external id of this executor.
_DRIVER_ID = re.compile(r"driver-[0-9]{14}-[0-9]{4,}")
_SAFE = re.compile(r"[^a-zA-Z0-9_.-]+")
#: The driver states (``org.apache.spark.deploy.master.DriverState``).
_WAITING = ("SUBMITTED", "RELAUNCHING")
_ENDED = ("FINISHED", "FAILED", "KILLED", "ERROR")
log = logging.getLogger(__name__)


def _utc_now() -> datetime:
    return datetime.now(UTC)


def attempt_name(instance_id: str, attempt_no: int) -> str:
    """The one name an attempt's driver has: readable, and unique by the instance's hash."""
    digest = hashlib.sha256(instance_id.encode()).hexdigest()[:12]
    readable = _SAFE.sub("-", instance_id).strip("-.")[:80]
    return f"{NAME_PREFIX}{readable}-{digest}-a{attempt_no}"


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def app_name(name: str, token: str) -> str:
    """``spark.app.name`` of the attempt's driver: its name and the start of its token's hash."""
    return f"{name}-t{token_hash(token)[:16]}"


@dataclass(frozen=True)
class Record:
    """What the journal keeps of one attempt's submission."""

    name: str
    token_sha256: str
    submitted_at: str
    driver_id: str | None = None
    timeout_seconds: float | None = None
    cancelled: bool = False
    timed_out: bool = False
    #: When a process of this host first saw the driver RUNNING (the master keeps no start).
    started_at: str | None = None


class SparkExecutor:
    """Runs ``SparkApplication`` attempts as drivers of the master at ``master`` (its REST
    submission server, ``http://host:6066``).

    ``state_dir`` holds the journal of submissions and the logs kept of cleaned-up drivers.
    ``work_dir``, when given, is the worker's work directory as this host sees it: the drivers'
    ``stdout`` and ``stderr`` are read there (the attempt's log; the launch command that names
    a driver whose submission lost its answer). ``python``, when given, is the Python the
    drivers of Python applications run (``spark.pyspark.python``). ``apps``, when given, is
    the folder a relative ``app`` or ``jar`` is found in; without it a relative one is refused.
    """

    def __init__(
        self,
        *,
        master: str,
        state_dir: Path,
        ui: str | None = None,
        work_dir: Path | None = None,
        python: str | None = None,
        apps: Path | None = None,
        secret_providers: Sequence[secrets.SecretProvider] | None = None,
        clock: Callable[[], datetime] = _utc_now,
    ) -> None:
        self.client = client.Client(master, ui=ui)
        self.state_dir = state_dir
        self.work_dir = work_dir
        self.python = python
        self.apps = apps
        self.clock = clock
        self._secret_providers = secret_providers
        self._lock = threading.Lock()
        self._name_locks: dict[str, threading.Lock] = {}
        #: Drivers a thread of this process is killing now: a new request waits for it.
        self._killing: set[str] = set()
        self._closed = threading.Event()
        #: The drivers a thread of this process watches and reports on, by driver id.
        self._watchers = engine_watch.Watchers(self._closed)

    # --- the port -----------------------------------------------------------------------

    def submit(self, *, spec: port.AttemptSpec) -> port.Submission:
        task = spec.task
        if not isinstance(task, port.SparkApplication):
            raise errors.ExecutorError(
                "the spark executor runs Spark applications only (a task with app: or jar:)",
                retryable=False,
            )
        name = attempt_name(spec.instance_id, spec.attempt_no)
        with self._attempt_lock(name):
            record = self._read(name)
            if record is not None and record.token_sha256 != token_hash(spec.attempt_token):
                raise errors.ExecutorError(
                    f"the Spark driver {name} runs attempt {spec.attempt_no} under another token",
                    retryable=False,
                )
            if record is not None and record.driver_id is not None:
                self._watch(spec, record.driver_id)
                return port.Submission(EXTERNAL_ID_PREFIX + record.driver_id, created=False)
            if record is not None:
                # Sent before, and its answer lost: find the driver before sending it again.
                found = self._find(app_name(name, spec.attempt_token))
                if found is not None:
                    self._write(replace(record, driver_id=found))
                    self._watch(spec, found)
                    return port.Submission(EXTERNAL_ID_PREFIX + found, created=False)
            request = self._request(spec, task, name)  # refused before anything is written
            record = Record(
                name=name,
                token_sha256=token_hash(spec.attempt_token),
                submitted_at=self.clock().isoformat(),
                timeout_seconds=None if spec.timeout is None else spec.timeout.total_seconds(),
            )
            self._write(record)
            answer = self.client.create(request)
            body = answer.json()
            driver_id = body.get("submissionId")
            if body.get("success") is not True or not isinstance(driver_id, str):
                self._forget(name)  # refused: nothing runs, a later submission may try again
                raise errors.ExecutorError(
                    f"the Spark master refused the driver {name}: {answer.message}",
                    retryable=answer.status >= 500,
                )
            self._write(replace(record, driver_id=driver_id))
        self._watch(spec, driver_id)
        if spec.timeout is not None:
            timer = threading.Timer(
                spec.timeout.total_seconds(), self._time_out, args=(name, driver_id)
            )
            timer.daemon = True
            timer.start()
        return port.Submission(EXTERNAL_ID_PREFIX + driver_id, created=True)

    def describe(self, *, external_id: str) -> port.Observation:
        driver_id = _driver_id(external_id)
        answer = self.client.status(driver_id)
        if answer.status >= 500:
            raise errors.ExecutorError(
                f"the Spark master could not tell the state of {driver_id}: {answer.message}",
                retryable=True,
            )
        body = answer.json()
        details: dict[str, port.DetailValue] = {"driver_id": driver_id}
        observe = port.ObservationDraft(external_id, details)
        observe.engine_id = driver_id
        state = body.get("driverState")
        if body.get("success") is not True or not isinstance(state, str):
            # The master has no such driver: never submitted, or forgotten (a master restarted
            # without recovery keeps none of its drivers).
            message = body.get("message")
            if isinstance(message, str) and message:
                details["message"] = message[:500]
            return observe.make(port.EngineState.NOT_FOUND, registration.Source.STATUS)
        details["driver_state"] = state
        for key, detail in (("workerId", "worker_id"), ("workerHostPort", "worker")):
            value = body.get(key)
            if isinstance(value, str):
                details[detail] = value
        message = body.get("message")
        if isinstance(message, str) and message:
            details["message"] = message[:500]
        record = self._record_of(driver_id)
        if state in _WAITING:
            return observe.make(port.EngineState.PENDING, registration.Source.STATUS)
        observe.started_at = self._started(record, running=state == "RUNNING")
        if observe.started_at is not None:
            details["started_at"] = observe.started_at.isoformat()
            details["started_at_source"] = watch.FIRST_SEEN_RUNNING
        if state == "RUNNING":
            if self._late(record):
                details["timed_out"] = True
                assert record is not None
                self._time_out(record.name, driver_id)
            return observe.make(port.EngineState.RUNNING, registration.Source.STATUS)
        if state not in _ENDED:
            # UNKNOWN: the master lost its worker and cannot tell what became of the driver.
            return observe.make(port.EngineState.UNKNOWN, registration.Source.STATUS)
        category = _category(state, record)
        made = observe.make(
            port.EngineState.SUCCEEDED
            if category is port.ErrorCategory.NONE
            else port.EngineState.FAILED,
            registration.Source.STATUS,
            category=category,
        )
        return replace(made, exit_code=0 if category is port.ErrorCategory.NONE else None)

    def cancel(self, *, external_id: str) -> None:
        """Ask the master to kill the driver; returns at once. The kill is confirmed when
        ``describe`` sees the driver KILLED (or ended otherwise)."""
        driver_id = _driver_id(external_id)
        record = self._record_of(driver_id)
        if record is not None:
            with self._attempt_lock(record.name):
                current = self._read(record.name) or record
                self._write(replace(current, cancelled=True))
        self._kill_in_background(driver_id)

    def cleanup(self, *, external_id: str) -> None:
        """Keep the driver's log in the state directory and remove its directory from the
        worker's work directory. The master keeps its ended drivers (up to
        ``spark.deploy.retainedDrivers``) and has no way to forget one."""
        driver_id = _driver_id(external_id)
        observation = self.describe(external_id=external_id)
        if observation.engine_state is not port.EngineState.NOT_FOUND and not observation.ended:
            raise errors.ExecutorError(
                f"{external_id} is {observation.engine_state}: cancel it before cleanup",
                retryable=True,
            )
        record = self._record_of(driver_id)
        if record is None or self.work_dir is None:
            return
        driver_dir = self.work_dir / driver_id
        if driver_dir.is_dir():
            kept = self._kept_log(record.name)
            kept.parent.mkdir(parents=True, exist_ok=True)
            kept.write_bytes(_driver_log(driver_dir))
            shutil.rmtree(driver_dir, ignore_errors=True)

    def read_log(self, *, instance_id: str, attempt_no: int) -> bytes | None:
        """The driver's ``stdout`` then its ``stderr``, from the worker's work directory while
        the driver's directory is there, else from the copy ``cleanup`` kept; None when
        neither (no work directory configured, or the attempt never had a driver)."""
        name = attempt_name(instance_id, attempt_no)
        record = self._read(name)
        if record is None or record.driver_id is None:
            return None
        if self.work_dir is not None:
            driver_dir = self.work_dir / record.driver_id
            if driver_dir.is_dir():
                return _driver_log(driver_dir)
        kept = self._kept_log(name)
        return kept.read_bytes() if kept.exists() else None

    def resume(self, *, spec: port.AttemptSpec) -> bool:
        """Watch and report on an attempt whose driver the master still has and no thread of
        this process watches (the process that submitted it died); True if watched now. The
        driver is found by the journal, else by its name among the master's drivers (a
        journal of another host)."""
        if not isinstance(spec.task, port.SparkApplication):
            return False
        name = attempt_name(spec.instance_id, spec.attempt_no)
        with self._attempt_lock(name):
            record = self._read(name)
            if record is not None and record.token_sha256 != token_hash(spec.attempt_token):
                raise errors.ExecutorError(
                    f"the Spark driver {name} runs attempt {spec.attempt_no} under another token",
                    retryable=False,
                )
            driver_id = record.driver_id if record is not None else None
            if driver_id is None:
                driver_id = self._find(app_name(name, spec.attempt_token))
                if driver_id is None:
                    return False
                self._write(
                    replace(record, driver_id=driver_id)
                    if record is not None
                    else Record(
                        name=name,
                        token_sha256=token_hash(spec.attempt_token),
                        submitted_at=self.clock().isoformat(),
                        driver_id=driver_id,
                    )
                )
        if self._watchers.watching(driver_id):
            return True
        seen = self.describe(external_id=EXTERNAL_ID_PREFIX + driver_id)
        if seen.ended or seen.engine_state is port.EngineState.NOT_FOUND:
            return False  # describe tells how it ended, or that the master forgot it
        self._watch(spec, driver_id)
        return True

    def wait_for_watchers(self, timeout: float) -> None:
        """Wait until this process has reported the end of what it watches (tests, shutdown)."""
        self._watchers.wait(timeout)

    def external_id_of(self, *, instance_id: str, attempt_no: int) -> str | None:
        """The external id of the attempt's driver, as this executor's journal has it."""
        record = self._read(attempt_name(instance_id, attempt_no))
        if record is None or record.driver_id is None:
            return None
        return EXTERNAL_ID_PREFIX + record.driver_id

    def close(self) -> None:
        self._closed.set()
        self.client.close()

    # --- the request --------------------------------------------------------------------

    def _located(self, field: str, path: str) -> str:
        """``path`` as the master is given it: a URL or an absolute path as written, a relative
        path below ``apps``."""
        if "://" in path or path.startswith("/"):
            return path
        if self.apps is None:
            raise errors.ExecutorError(
                f"{field} {path!r} is a relative path, and {registration.APPS_ENV} names no"
                " folder to find it in: set it, or write an absolute path",
                retryable=False,
            )
        return str(self.apps / path)

    def _request(
        self, spec: port.AttemptSpec, task: port.SparkApplication, name: str
    ) -> jsontypes.JSONObject:
        env: dict[str, jsontypes.JSONValue] = dict(spec.env)
        env.update(self._secrets(spec))
        properties: dict[str, jsontypes.JSONValue] = dict(task.conf)
        properties.update(
            {
                "spark.app.name": app_name(name, spec.attempt_token),
                # The master replaces the REST port with its own.
                "spark.master": "spark://" + self.client.master.split("://", 1)[1],
                "spark.submit.deployMode": "cluster",
                "spark.driver.supervise": "false",
            }
        )
        if task.app is not None:
            if self.python is not None:
                properties.setdefault("spark.pyspark.python", self.python)
                env.setdefault("PYSPARK_PYTHON", self.python)
            resource, main_class = self._located("app", task.app), PYTHON_RUNNER
            # PythonRunner's arguments: the file, the extra Python files (none), the app's own.
            arguments: list[jsontypes.JSONValue] = [resource, "", *task.args]
        else:
            assert task.jar is not None and task.main_class is not None
            resource, main_class = self._located("jar", task.jar), task.main_class
            arguments = list(task.args)
            properties.setdefault("spark.jars", resource)
        return {
            "action": "CreateSubmissionRequest",
            "appResource": resource,
            "mainClass": main_class,
            "appArgs": arguments,
            "clientSparkVersion": client.CLIENT_SPARK_VERSION,
            "environmentVariables": env,
            "sparkProperties": properties,
        }

    def _secrets(self, spec: port.AttemptSpec) -> dict[str, str]:
        if not spec.secret_env:
            return {}
        providers = self._secret_providers
        if providers is None:
            providers = secrets.providers_from_environment(os.environ)
        try:
            return secrets.resolve(spec.secret_env, providers=providers)
        except secrets.SecretError as exc:
            raise errors.ExecutorError(str(exc), retryable=False) from None

    # --- finding a driver whose submission lost its answer ------------------------------

    def _find(self, wanted: str) -> str | None:
        """The master's driver whose launch command names the application ``wanted``, or None
        when it has none. Raises a retryable ExecutorError when it cannot tell: no work
        directory to read launch commands in, or a driver that waits for a core (its launch
        command is not written yet)."""
        state = self.client.state()
        drivers = [
            item
            for key in ("activedrivers", "completeddrivers")
            for item in _list(state.get(key))
            if isinstance(item, dict) and isinstance(item.get("id"), str)
        ]
        if not drivers:
            return None
        if self.work_dir is None:
            raise errors.ExecutorError(
                f"a submission of {wanted} lost its answer, and without the worker's work "
                f"directory ({registration.WORK_DIR_ENV}) its driver cannot be told from others",
                retryable=True,
            )
        needle = f'"-Dspark.app.name={wanted}"'.encode()
        waiting = False
        for driver in drivers:
            driver_id = str(driver["id"])
            head = _head(self.work_dir / driver_id / "stderr")
            if head is None:
                waiting = waiting or driver.get("state") in _WAITING
                continue
            if needle in head:
                return driver_id
        if waiting:
            raise errors.ExecutorError(
                f"a submission of {wanted} lost its answer and a driver of the master waits "
                "for a core: it is asked again once that driver starts",
                retryable=True,
            )
        return None

    # --- the watcher --------------------------------------------------------------------

    def _watch(self, spec: port.AttemptSpec, driver_id: str) -> None:
        name = app_name(attempt_name(spec.instance_id, spec.attempt_no), spec.attempt_token)
        external_id = EXTERNAL_ID_PREFIX + driver_id
        self._watchers.start(
            driver_id,
            lambda: watch.Watch(spec, self.client, name),
            lambda: self.describe(external_id=external_id),
        )

    def _started(self, record: Record | None, *, running: bool) -> datetime | None:
        """When the driver was first seen RUNNING, as the journal has it; a driver RUNNING
        now and never seen so is written down as started now."""
        if record is None:
            return None
        if record.started_at is None and running:
            with self._attempt_lock(record.name):
                record = self._read(record.name) or record
                if record.started_at is None:
                    record = replace(record, started_at=self.clock().isoformat())
                    self._write(record)
        return None if record.started_at is None else datetime.fromisoformat(record.started_at)

    # --- timeouts and kills -------------------------------------------------------------

    def _late(self, record: Record | None) -> bool:
        if record is None or record.timeout_seconds is None:
            return False
        submitted = datetime.fromisoformat(record.submitted_at)
        return self.clock() - submitted >= timedelta(seconds=record.timeout_seconds)

    def _time_out(self, name: str, driver_id: str) -> None:
        try:
            with self._attempt_lock(name):
                record = self._read(name)
                if record is None or record.cancelled:
                    return
                if not record.timed_out:
                    self._write(replace(record, timed_out=True))
        except OSError as exc:
            log.warning("could not record the timeout of %s: %s", driver_id, exc)
        self._kill_in_background(driver_id)

    def _kill_in_background(self, driver_id: str) -> None:
        with self._lock:
            if driver_id in self._killing:
                return
            self._killing.add(driver_id)
        threading.Thread(
            target=self._kill_once, args=(driver_id,), name=f"spark-kill-{driver_id}", daemon=True
        ).start()

    def _kill_once(self, driver_id: str) -> None:
        try:
            self._kill(driver_id)
        except (errors.ExecutorError, RuntimeError) as exc:  # RuntimeError: closed meanwhile
            if not self._closed.is_set():
                log.warning("could not kill the Spark driver %s: %s", driver_id, exc)
        finally:
            with self._lock:
                self._killing.discard(driver_id)

    def _kill(self, driver_id: str) -> None:
        """Ask the master to kill the driver until it says it ended (a driver the master has
        not handed to a worker yet may miss the first request)."""
        deadline = time.monotonic() + KILL_CONFIRM_SECONDS
        while True:
            answer = self.client.kill(driver_id)
            if answer.status >= 500:
                log.warning("the Spark master refused to kill %s: %s", driver_id, answer.message)
            status = self.client.status(driver_id).json()
            state = status.get("driverState")
            if status.get("success") is not True or state in _ENDED:
                return
            if time.monotonic() > deadline:
                log.warning("the Spark driver %s is still %s after a kill", driver_id, state)
                return
            if self._closed.wait(0.5):
                return

    # --- the journal --------------------------------------------------------------------

    @contextlib.contextmanager
    def _attempt_lock(self, name: str) -> Iterator[None]:
        """One submission of an attempt at a time: among this process's threads, and among
        the processes that share the state directory (a lock file)."""
        with self._lock:
            lock = self._name_locks.setdefault(name, threading.Lock())
        with lock:
            path = self.state_dir / "attempts" / f"{name}.lock"
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a") as handle:
                fcntl.flock(handle, fcntl.LOCK_EX)
                try:
                    yield
                finally:
                    fcntl.flock(handle, fcntl.LOCK_UN)

    def _record_path(self, name: str) -> Path:
        return self.state_dir / "attempts" / f"{name}.json"

    def _driver_path(self, driver_id: str) -> Path:
        return self.state_dir / "drivers" / driver_id

    def _read(self, name: str) -> Record | None:
        try:
            loaded = json.loads(self._record_path(name).read_text())
        except FileNotFoundError:
            return None
        except ValueError:
            return None  # a write cut short: the submission never went out
        return Record(**loaded)

    def _write(self, record: Record) -> None:
        path = self._record_path(record.name)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".part")
        with partial.open("w") as out:
            out.write(json.dumps(asdict(record)))
            out.flush()
            os.fsync(out.fileno())
        partial.replace(path)
        if record.driver_id is not None:
            index = self._driver_path(record.driver_id)
            if not index.exists():
                index.parent.mkdir(parents=True, exist_ok=True)
                index.write_text(record.name)

    def _forget(self, name: str) -> None:
        self._record_path(name).unlink(missing_ok=True)

    def _record_of(self, driver_id: str) -> Record | None:
        try:
            name = self._driver_path(driver_id).read_text().strip()
        except FileNotFoundError:
            return None
        return self._read(name)

    def _kept_log(self, name: str) -> Path:
        return self.state_dir / "logs" / f"{name}.log"


def _category(state: str, record: Record | None) -> port.ErrorCategory:
    if state == "FINISHED":
        return port.ErrorCategory.NONE
    if state == "ERROR":
        return port.ErrorCategory.START_ERROR  # the worker could not launch the driver
    if state == "FAILED":
        return port.ErrorCategory.TASK_ERROR  # the driver exited non-zero
    if record is not None and record.cancelled:
        return port.ErrorCategory.CANCELLED
    if record is not None and record.timed_out:
        return port.ErrorCategory.TIMEOUT
    return port.ErrorCategory.KILLED  # killed, and not by us


def _driver_id(external_id: str) -> str:
    driver_id = external_id.removeprefix(EXTERNAL_ID_PREFIX)
    if not external_id.startswith(EXTERNAL_ID_PREFIX) or not _DRIVER_ID.fullmatch(driver_id):
        raise errors.ExecutorError(f"not a Spark external id: {external_id!r}")
    return driver_id


def _list(value: object) -> list[jsontypes.JSONValue]:
    return value if isinstance(value, list) else []


def _head(path: Path, size: int = 64 * 1024) -> bytes | None:
    try:
        with path.open("rb") as handle:
            return handle.read(size)
    except OSError:
        return None


def _driver_log(driver_dir: Path) -> bytes:
    out = _head(driver_dir / "stdout", 1 << 30) or b""
    err = _head(driver_dir / "stderr", 1 << 30) or b""
    return out + (b"\n--- stderr ---\n" + err if err else b"")
