"""The Executor port: what the platform may ask of any execution engine (docs/executors.md,
section 1).

An executor adapts one engine (the embedded local supervisor, Celery, a SQL engine; see
``execution/engines.py``). It submits attempts (:class:`Executor`, or many at once with
:class:`SubmittingMany`), describes what the engine knows about one, asks it to stop one
(``cancel``) and to forget one (``cleanup``); one that holds connections opens them first
(:class:`Connecting`). It returns observations with their evidence and never writes the
ledger: deciding what an observation means is the reconciler's job.

The engine states and error categories are the core's vocabulary (``veritask.core.states`` and
``veritask.core.events``); this module re-exports them so that adapters need one import.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Protocol, TypeAlias, runtime_checkable

from veritask.core import events, jsontypes, states
from veritask.execution.errors import ExecutorError

EngineState = states.EngineState
ErrorCategory = events.ErrorCategory
JSONValue = jsontypes.JSONValue

#: The values an observation's details may hold: flat, so that they fit any evidence column.
DetailValue: TypeAlias = str | int | float | bool | None

#: The widest an instance id may be: it becomes a directory and a file-name part.
MAX_INSTANCE_ID_LENGTH = 200


#: Where an observation's answer came from: a member of the ``StrEnum`` its adapter declares
#: (``local.Source``, ``waits.Source``, ``sql/registration.py``'s, ``celery/registration.py``'s)
#: and lists in its registration (:class:`Engine`); no two engines share a value.
ObservationSource: TypeAlias = StrEnum


@dataclass(frozen=True)
class ShellCommand:
    """A task that runs as ``/bin/sh -c <command>``."""

    command: str

    def __post_init__(self) -> None:
        if not self.command.strip():
            raise ValueError("ShellCommand.command must not be empty")


@dataclass(frozen=True)
class PythonCallable:
    """A task that calls ``module:function(**params)`` in a child process.

    The return value, when not None, is written as JSON to the file named by VERITASK_OUTPUT.
    """

    target: str
    params: Mapping[str, JSONValue] = field(default_factory=dict)

    def __post_init__(self) -> None:
        module, sep, function = self.target.partition(":")
        if not sep or not module or not function:
            raise ValueError(
                f"PythonCallable.target must be 'module:function', not {self.target!r}"
            )

    @property
    def module(self) -> str:
        return self.target.partition(":")[0]

    @property
    def function(self) -> str:
        return self.target.partition(":")[2]


@dataclass(frozen=True)
class SqlStatement:
    """A task that is one SQL statement, run by a SQL engine on the server named ``connection``.

    No worker runs it: the statement runs in the server, which outlives every Veritask process.
    """

    statement: str
    connection: str
    parameters: tuple[JSONValue, ...] = ()
    """The values of ``$1``, ``$2``… in the statement, bound when it runs (never pasted in)."""

    def __post_init__(self) -> None:
        if not self.statement.strip():
            raise ValueError("SqlStatement.statement must not be empty")
        if not self.connection:
            raise ValueError("SqlStatement.connection must name a connection")


class Pull(StrEnum):
    """When a container engine pulls a task's image (a ``container`` task's ``pull:``)."""

    NEVER = "never"
    """The image must be on the engine's host already."""
    MISSING = "missing"
    """Pulled when the engine's host lacks it."""


@dataclass(frozen=True)
class Mount:
    """A host directory a container task mounts (``volumes:``): the operator's allow-list
    (``VERITASK_CONTAINER_VOLUMES``) says which host paths may be."""

    host: str
    container: str
    read_only: bool = False

    def __post_init__(self) -> None:
        if not (self.host.startswith("/") and self.container.startswith("/")):
            raise ValueError("Mount.host and Mount.container must be absolute paths")


@dataclass(frozen=True)
class ContainerRun:
    """A task that is one container: ``command`` run in ``image`` by a container engine that
    speaks the Docker Engine API (Docker or Podman; ``execution/container/``)."""

    image: str
    command: tuple[str, ...]
    """The argv (a shell line is ``("/bin/sh", "-c", line)``)."""
    cpus: float | None = None
    memory: int | None = None
    """The memory limit in bytes."""
    workdir: str | None = None
    pull: Pull = Pull.MISSING
    volumes: tuple[Mount, ...] = ()
    secret_files: Mapping[str, str] = field(default_factory=dict)
    """Files of ``/run/secrets`` in the container, by file name, and the name of the secret
    each holds (never its value): looked up when the attempt is submitted."""

    def __post_init__(self) -> None:
        if not self.image.strip():
            raise ValueError("ContainerRun.image must not be empty")
        if not self.command:
            raise ValueError("ContainerRun.command must not be empty")
        if self.cpus is not None and self.cpus <= 0:
            raise ValueError("ContainerRun.cpus must be positive")
        if self.memory is not None and self.memory < 6 * 1024 * 1024:
            raise ValueError("ContainerRun.memory must be at least 6 MiB")


@dataclass(frozen=True)
class SparkApplication:
    """A task that is one Spark application, run as a driver by a Spark standalone master
    (``execution/spark/``): a Python file (``app``), or a jar (``jar``) and its ``main_class``,
    with its arguments and its Spark properties."""

    app: str | None = None
    """The Python file the driver runs, as a path the Spark workers can read."""
    jar: str | None = None
    """The jar whose ``main_class`` the driver runs, as a path or URL the workers can read."""
    main_class: str | None = None
    args: tuple[str, ...] = ()
    conf: Mapping[str, str] = field(default_factory=dict)
    """Spark properties (``spark.executor.memory`` …); the executor sets the application's
    name and master itself."""

    def __post_init__(self) -> None:
        if (self.app is None) == (self.jar is None):
            raise ValueError("SparkApplication needs either app or jar")
        if self.app is not None and not self.app.strip():
            raise ValueError("SparkApplication.app must not be empty")
        if (self.jar is None) != (self.main_class is None):
            raise ValueError("SparkApplication.main_class goes with jar, and jar needs it")
        if self.main_class is not None and not self.main_class.strip():
            raise ValueError("SparkApplication.main_class must not be empty")


class Condition(StrEnum):
    """What a wait checks (a ``wait:`` task; docs/definitions.md)."""

    PATH = "path"
    """A file or a directory exists."""
    SQL = "sql"
    """A statement run on a named connection returns a row."""
    HTTP = "http"
    """A GET of the URL answers 2xx."""
    CALL = "call"
    """``module:function(**params)`` returns something truthy."""


@dataclass(frozen=True)
class WaitCondition:
    """A task that is a condition checked on an interval by the scheduler process itself: no
    worker, no process, no slot (``execution/waits.py``)."""

    condition: Condition
    target: str
    """The path, the statement, the URL or the callable, its placeholders already expanded
    (a statement's as ``$1``, ``$2``… with ``parameters``)."""
    every: timedelta
    timeout: timedelta
    skip_on_timeout: bool = False
    """At the timeout the attempt is skipped (completed with the skip exit code), not failed."""
    connection: str | None = None
    parameters: tuple[JSONValue, ...] = ()
    """The bound values of a statement's ``$1``, ``$2``…"""
    params: Mapping[str, JSONValue] = field(default_factory=dict)
    """The keyword arguments of a callable."""
    expected: timedelta | None = None
    """Past this since ``since`` the executor tells its ``overdue`` listener, once."""
    since: datetime | None = None
    """When the wait began (its ``started`` report), when it began before: a resumed wait
    counts its timeout from there, not from the resumption."""

    def __post_init__(self) -> None:
        if not self.target.strip():
            raise ValueError("WaitCondition.target must not be empty")
        if self.every <= timedelta(0) or self.timeout <= timedelta(0):
            raise ValueError("WaitCondition.every and timeout must be positive")
        if (self.condition is Condition.SQL) != (self.connection is not None):
            raise ValueError("WaitCondition.connection names the server of a sql condition")
        if self.since is not None and self.since.utcoffset() is None:
            raise ValueError("WaitCondition.since must be timezone-aware")


TaskSpec: TypeAlias = (
    ShellCommand | PythonCallable | SqlStatement | WaitCondition | ContainerRun | SparkApplication
)


@dataclass(frozen=True)
class HttpCallback:
    """Events are POSTed to ``<base_url>/api/v2/callbacks/events`` with the attempt token."""

    base_url: str
    timeout: timedelta = timedelta(seconds=5)

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"HttpCallback.base_url must be an http(s) URL, not {self.base_url!r}")
        if self.timeout <= timedelta(0):
            raise ValueError("HttpCallback.timeout must be positive")


@dataclass(frozen=True)
class OutboxCallback:
    """Events are files in ``directory``, drained by the platform (the local fast path).

    Commits still need the platform's synchronous fencing check: ``commit_base_url`` is the
    platform API that serves ``/api/v2/callbacks/commit``. Without it, ``commit_output`` fails.
    """

    directory: Path
    commit_base_url: str | None = None


CallbackTarget: TypeAlias = HttpCallback | OutboxCallback


@dataclass(frozen=True)
class AttemptSpec:
    """Everything a worker needs to run one attempt, and nothing it would have to look up."""

    instance_id: str
    attempt_no: int
    attempt_token: str
    task: TaskSpec
    callback: CallbackTarget
    env: Mapping[str, str] = field(default_factory=dict)
    timeout: timedelta | None = None
    grace_period: timedelta = timedelta(seconds=10)
    heartbeat_interval: timedelta = timedelta(seconds=10)
    log_cap_bytes: int = 10 * 1024 * 1024
    skip_exit_code: int = 99
    workdir: Path | None = None
    #: The longest pause between two delivery tries while the platform is unreachable.
    delivery_retry_max: timedelta = timedelta(seconds=30)
    #: How long a worker keeps trying to deliver after the task ended; the spool stays on disk.
    delivery_deadline: timedelta = timedelta(hours=1)
    #: The engine's queue for this attempt (a Celery queue); None for the engine's default.
    queue: str | None = None
    #: Variables whose value is a secret, by the secret's name (never its value): the worker
    #: looks each up when the attempt starts (``execution/secrets.py``).
    secret_env: Mapping[str, str] = field(default_factory=dict)
    #: The outputs of the upstream tasks, by task key, for a task that reads them: the worker
    #: writes them to a file named by VERITASK_UPSTREAM_OUTPUTS.
    upstream_outputs: Mapping[str, JSONValue] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_instance_id(self.instance_id)
        if self.attempt_no < 1:
            raise ValueError(f"attempt_no must be 1 or more, not {self.attempt_no}")
        if not self.attempt_token:
            raise ValueError("attempt_token must not be empty")
        if self.timeout is not None and self.timeout <= timedelta(0):
            raise ValueError("timeout must be positive when given")
        if self.grace_period < timedelta(0):
            raise ValueError("grace_period must not be negative")
        if self.heartbeat_interval <= timedelta(0):
            raise ValueError("heartbeat_interval must be positive")
        if self.log_cap_bytes < 1024:
            raise ValueError("log_cap_bytes must be at least 1024")
        if not 1 <= self.skip_exit_code <= 255:
            raise ValueError("skip_exit_code must be an exit status between 1 and 255")
        if self.delivery_retry_max <= timedelta(0):
            raise ValueError("delivery_retry_max must be positive")


def check_instance_id(instance_id: str) -> None:
    """Refuse ids that cannot be a directory name: engines use them in paths and file names."""
    if not instance_id or len(instance_id) > MAX_INSTANCE_ID_LENGTH:
        raise ValueError(f"instance_id must have 1 to {MAX_INSTANCE_ID_LENGTH} characters")
    if instance_id.startswith(".") or any(c in instance_id for c in "/\0\n"):
        raise ValueError(f"instance_id {instance_id!r} must not start with '.' nor hold '/'")


@dataclass(frozen=True)
class Submission:
    """The engine's acknowledgement of a submission."""

    external_id: str
    #: False when the attempt had been submitted before and nothing new was started.
    created: bool


@dataclass(frozen=True)
class Observation:
    """What the engine says about one attempt, with the evidence behind it."""

    external_id: str
    engine_state: states.EngineState
    source: ObservationSource
    #: The engine's own identity of the process (pid and start time, pod UID, …), if any.
    engine_id: str | None = None
    exit_code: int | None = None
    error_category: events.ErrorCategory | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    details: Mapping[str, DetailValue] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, moment in (("started_at", self.started_at), ("ended_at", self.ended_at)):
            if moment is not None and moment.utcoffset() is None:
                raise ValueError(f"Observation.{name} must be timezone-aware")

    @property
    def ended(self) -> bool:
        """The engine confirms that no process of this attempt runs any more."""
        return self.engine_state in (states.EngineState.SUCCEEDED, states.EngineState.FAILED)


class ObservationDraft:
    """What an adapter learns about an attempt, source by source, before it answers: the
    details and times gathered so far, made into one :class:`Observation` at the end."""

    def __init__(self, external_id: str, details: dict[str, DetailValue]) -> None:
        self.external_id = external_id
        self.details = details
        self.engine_id: str | None = None
        self.started_at: datetime | None = None
        self.ended_at: datetime | None = None

    def make(
        self,
        state: states.EngineState,
        source: ObservationSource,
        *,
        category: events.ErrorCategory | None = None,
    ) -> Observation:
        return Observation(
            external_id=self.external_id,
            engine_state=state,
            source=source,
            engine_id=self.engine_id,
            error_category=category,
            started_at=self.started_at,
            ended_at=self.ended_at,
            details=self.details,
        )


class Executor(Protocol):
    """One execution engine. Methods are synchronous and safe to call from several threads."""

    def submit(self, *, spec: AttemptSpec) -> Submission:
        """Hand the attempt to the engine. Idempotent per (instance_id, attempt_no): a second
        call starts nothing and returns the same external id.

        Raises ``ExecutorError`` when the engine refuses or cannot be reached (see ``retryable``).
        """
        ...

    def describe(self, *, external_id: str) -> Observation:
        """What the engine knows about the attempt now, and where that answer came from."""
        ...

    def cancel(self, *, external_id: str) -> None:
        """Ask the engine to stop the attempt. Returns at once; the stop is confirmed only when
        ``describe`` shows that the attempt ended. Calling it again repeats the request."""
        ...

    def cleanup(self, *, external_id: str) -> None:
        """Forget an ended attempt and free its resources (files, pods). Idempotent."""
        ...


@runtime_checkable
class Connecting(Protocol):
    """An executor whose engine is reached over connections it can open before they are needed.

    A scheduler calls ``connect`` once as it starts, in the background, so that the first
    attempts it submits do not wait for handshakes (a broker's, a result store's). Nothing
    depends on it: a submission opens whatever is not open yet.
    """

    def connect(self, *, parallel: int) -> None:
        """Open what ``parallel`` submissions made at the same time will use. Raises
        ``ExecutorError`` when the engine cannot be reached now."""
        ...


@runtime_checkable
class SubmittingMany(Protocol):
    """An executor that submits several attempts for less than it costs to submit them one by
    one (a broker that confirms many messages at once). A scheduler hands it what it opened
    together, from one thread."""

    def submit_many(self, *, specs: Sequence[AttemptSpec]) -> list[Submission | ExecutorError]:
        """``submit`` of each spec: for each, in order, what ``submit`` would have returned,
        or the ``ExecutorError`` it would have raised. One attempt's error is its own: the
        others are submitted all the same."""
        ...


@runtime_checkable
class Resuming(Protocol):
    """An executor whose engine runs the work with no worker of ours beside it (a SQL server),
    so a Veritask process watches the engine and reports for the attempt. When the process
    that watched it died, the reconciler of another hands the attempt's spec (and its token)
    to ``resume``, and the reports go on."""

    def resume(self, *, spec: AttemptSpec) -> bool:
        """Watch and report on the attempt if its engine still runs it; True if this process
        watches it now (it may have already). Raises ``ExecutorError`` when the engine cannot
        be asked, or holds the attempt under another token."""
        ...


@dataclass(frozen=True)
class Held:
    """An attempt an engine holds, as the engine's own record of it says (its labels): what
    the reconciler compares with the ledger to find work nobody follows any more."""

    instance_id: str
    attempt_no: int
    external_id: str
    token_hash: str
    """The SHA-256 of the attempt's token, as the engine keeps it (never the token)."""
    running: bool
    """Whether the engine runs it now (pending, running or paused): what a stop would end."""
    source: ObservationSource
    """Where the listing came from (one of the engine's observation sources)."""
    run_id: str | None = None
    definition: str | None = None
    details: Mapping[str, DetailValue] = field(default_factory=dict)
    """The engine's own words on it (its id, status, start time): the stop's evidence."""


@runtime_checkable
class Listing(Protocol):
    """An executor whose engine can list every attempt it holds, those of attempts the ledger
    no longer follows too (fenced, superseded, ended, or left by a platform that lost its
    database). The reconciler stops those that are this platform's and not live."""

    def held_attempts(self) -> list[Held]:
        """Every attempt the engine holds, running or ended. Raises ``ExecutorError`` when
        the engine cannot be asked."""
        ...


@runtime_checkable
class LogReading(Protocol):
    """Where an engine keeps its attempts' logs when they are not in the attempt directory on
    the platform's host (a Celery worker on another host ships its log to the result backend).
    The API server reads a log through it without running the engine's executor."""

    def read_log(self, *, instance_id: str, attempt_no: int) -> bytes | None:
        """The attempt's whole log as the engine holds it (capped by the worker), or None when
        the engine holds none: the platform then reads the attempt directory's ``task.log``."""
        ...


class _ClosingLogReading(LogReading, Protocol):
    def close(self) -> None: ...


class LogReaderPerRead:
    """Reads each log with an executor built for the read and closed after it: the API
    server reads a log now and then, and keeps no connection to the engine open."""

    def __init__(self, build: Callable[[], _ClosingLogReading]) -> None:
        self.build = build

    def read_log(self, *, instance_id: str, attempt_no: int) -> bytes | None:
        executor = self.build()
        try:
            return executor.read_log(instance_id=instance_id, attempt_no=attempt_no)
        finally:
            executor.close()


def _always(environ: Mapping[str, str]) -> bool:
    return True


@dataclass(frozen=True)
class Engine:
    """An engine as the platform registers it (``execution/engines.py``): its executor name,
    what configures it, how to build its executor, what it observes and where its logs are.

    A registration imports nothing heavy: ``build`` and ``logs`` import the engine's client
    packages when they are called, so a deployment that uses no such engine never loads them.
    """

    name: str
    """The executor name a definition's ``executor:`` gives."""
    description: str
    setting: str | None = None
    """What the environment sets to configure it (None: nothing; it is always served)."""
    configured: Callable[[Mapping[str, str]], bool] = _always
    """Whether the environment of a scheduler configures it."""
    build: Callable[[Mapping[str, str]], Executor] | None = None
    """The executor, from a configured environment. None for the engines every scheduler
    builds itself (``local``, ``wait``)."""
    sources: frozenset[ObservationSource] = frozenset()
    """Where its observations come from (its own ``StrEnum``): no two engines share a value."""
    logs: Callable[[Mapping[str, str]], LogReading | None] | None = None
    """What reads its attempts' logs (None when the environment does not configure it), for
    an engine that keeps them elsewhere than the attempt directory."""
    packages: tuple[str, ...] = ()
    """The importable packages it needs beside Veritask's own dependencies."""
    install: str | None = None
    """How to install those packages, e.g. ``pip install 'veritask[celery]'``."""
