"""What a definition says (docs/definitions.md): frozen, typed values built by ``parse``.

Everything here is already resolved: each task carries its full :class:`TaskPolicy`
(the definition's ``defaults`` merged with the task's own values), durations are
``timedelta``, rules and roles are enums. docs/definitions.md is the reference for the
YAML that produces these values.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum

from veritask.core import problems
from veritask.core.jsontypes import JSONValue
from veritask.core.policy import TaskPolicy
from veritask.core.run_state import RunGraph, TaskNode, TaskRole
from veritask.core.trigger_rules import TriggerRule
from veritask.definitions import cron, placeholders
from veritask.definitions.errors import DefinitionError
from veritask.definitions.parameters import Parameter

#: Definition names, task keys, executor names: lowercase, digits, ``_`` and ``-``.
SLUG = re.compile(r"[a-z][a-z0-9_-]{0,63}")
#: ``module:function``; both sides dotted Python identifiers (``pkg.mod:Class.method``).
CALLABLE = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")

DEFAULT_SKIP_EXIT_CODE = 99
#: The most instances a mapped task expands into, unless it sets ``map.max_map``.
DEFAULT_MAX_MAP = 1024
DEFAULT_EXECUTOR = "local"
#: The executor of every ``wait:`` task: the scheduler process checks the condition itself.
WAIT_EXECUTOR = "wait"
#: A variable of a task's environment (``env:``), and the name of a secret.
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: The variables the platform sets, and its own settings: never a definition's.
RESERVED_ENV_PREFIX = "VERITASK_"


class ConcurrencyPolicy(StrEnum):
    """What happens when a run of a definition is due while another run of it is active."""

    ALLOW = "allow"
    """Runs overlap: the new run starts at once."""
    FORBID = "forbid"
    """(default) The new run is not started; it is recorded as skipped, with the active run
    named in its reason. A backfill or a manual trigger can create it later."""
    QUEUE = "queue"
    """The new run waits, QUEUED, until the active one ends; runs start in logical-time
    order."""
    REPLACE = "replace"
    """The active run is cancelled and, once the engine confirms the stop, the new one
    starts."""


@dataclass(frozen=True)
class SecretRef:
    """``{secret: NAME}`` in ``env:``: the worker looks the value up when the attempt starts;
    the definition, the ledger and the spec hold this name only."""

    name: str

    def __post_init__(self) -> None:
        if not ENV_NAME.fullmatch(self.name):
            raise DefinitionError.one("env", problems.NOT_A_SECRET_NAME.format(name=self.name))


EnvValue = str | SecretRef


@dataclass(frozen=True)
class Catchup:
    """Whether a schedule creates the runs it missed (while the scheduler was down or the
    definition was disabled)."""

    enabled: bool = False
    max_runs: int | None = None
    """With catch-up on, at most this many of the most recent missed runs (None: all)."""

    def __post_init__(self) -> None:
        if self.max_runs is not None and self.max_runs < 1:
            raise DefinitionError.one(
                "schedule.catchup.max_runs",
                problems.ONE_OR_MORE.format(),
            )


@dataclass(frozen=True)
class Schedule:
    """When runs are created: a cron expression read in a time zone."""

    cron: str
    timezone: str = "UTC"
    catchup: Catchup = field(default_factory=Catchup)

    def __post_init__(self) -> None:
        problem = cron.cron_problem(self.cron)
        if problem:
            raise DefinitionError.one("schedule.cron", problem)
        problem = cron.zone_problem(self.timezone)
        if problem:
            raise DefinitionError.one("schedule.timezone", problem)


@dataclass(frozen=True)
class Step:
    """Something to execute: a shell command (``run``) or a Python callable (``call``)."""

    run: str | None = None
    call: str | None = None

    def __post_init__(self) -> None:
        _check_step(self.run, self.call, "")


@dataclass(frozen=True)
class PublishCheck:
    """A quality check run after execution succeeded; publication waits for all of them."""

    name: str
    run: str | None = None
    call: str | None = None

    def __post_init__(self) -> None:
        _check_step(self.run, self.call, f"publish.checks.{self.name}")


@dataclass(frozen=True)
class PublishSpec:
    """How a run's output becomes usable: checks, then the commit step (docs/definitions.md)."""

    commit: Step
    checks: tuple[PublishCheck, ...] = ()


@dataclass(frozen=True)
class WaitFor:
    """Wait for another definition's run of the same logical time to be PUBLISHED."""

    definition: str
    published: bool = True
    timeout: timedelta | None = None
    """How long to wait before the run fails and an alert is raised (None: no limit)."""
    lag: timedelta = timedelta(0)
    """Map this run's logical time to the upstream's: wait for the run at ``logical_time - lag``
    (``lag: 1d`` waits for yesterday's upstream run)."""
    line: int | None = field(default=None, compare=False)
    """Where the source names the upstream, for refusals at apply (not stored)."""

    def __post_init__(self) -> None:
        if not self.published:
            raise DefinitionError.one(
                "wait_for.published", problems.ONLY_PUBLISHED_RELEASES.format()
            )


class PublishedWhen(StrEnum):
    """Which publications of the upstreams start a run (``trigger.when``)."""

    ALL = "all"
    """(default) One run per logical time, once every upstream has a PUBLISHED run of it."""
    ANY = "any"
    """One run per PUBLISHED upstream run, with that run's logical time."""


@dataclass(frozen=True)
class OnPublished:
    """``trigger: {on_published: [...], when: all|any}``: runs started by other definitions'
    publications (docs/scheduling.md, "Runs started by published data")."""

    upstreams: tuple[str, ...]
    when: PublishedWhen = PublishedWhen.ALL
    lines: tuple[int | None, ...] = field(default=(), compare=False)
    """Where the source names each upstream, for refusals at apply (not stored)."""

    def line_of(self, index: int) -> int | None:
        return self.lines[index] if index < len(self.lines) else None

    def __post_init__(self) -> None:
        if not self.upstreams:
            raise DefinitionError.one("trigger.on_published", problems.NO_UPSTREAMS.format())
        for i, name in enumerate(self.upstreams):
            path = f"trigger.on_published[{i}]"
            if not SLUG.fullmatch(name):
                raise DefinitionError.one(path, problems.NOT_A_VALID_NAME.format(name=name))
            if name in self.upstreams[:i]:
                raise DefinitionError.one(path, problems.LISTED_TWICE.format(key=name))


class WaitKind(StrEnum):
    """What a ``wait:`` task checks (docs/definitions.md, "Waits")."""

    PATH = "path"
    """A file or a directory exists."""
    SQL = "sql"
    """A statement run on a named connection returns a row."""
    HTTP = "http"
    """A GET of the URL answers 2xx."""
    CALL = "call"
    """``module:function`` called with the task's ``with:`` returns something truthy."""


class OnTimeout(StrEnum):
    """What a wait whose condition never held becomes at its ``timeout``."""

    FAIL = "fail"
    """(default) The attempt fails, saying what the last check saw."""
    SKIP = "skip"
    """The task is SKIPPED, as a task that exits with its ``skip_exit_code``."""


#: How often a wait checks unless it says (``every:``), and the least it may say.
DEFAULT_WAIT_EVERY = timedelta(seconds=60)
MIN_WAIT_EVERY = timedelta(seconds=1)
#: How long a wait checks unless it says (``timeout:``): a condition that never holds must
#: not hold its run open for ever.
DEFAULT_WAIT_TIMEOUT = timedelta(hours=24)


class ContainerPull(StrEnum):
    """When a container task's image is pulled (``pull:``)."""

    NEVER = "never"
    MISSING = "missing"


#: The executor a task with ``image`` uses unless it names another.
CONTAINER_EXECUTOR = "container"
#: What only a container task may say.
CONTAINER_FIELDS = ("image", "cpus", "memory", "workdir", "pull", "volumes", "secret_files")
#: Where a container task's ``secret_files`` are, in the container.
SECRET_FILES_DIR = "/run/secrets"


@dataclass(frozen=True)
class VolumeSpec:
    """A host directory a container task mounts: ``HOST:CONTAINER[:ro]`` in ``volumes:``."""

    host: str
    container: str
    read_only: bool = False

    def __str__(self) -> str:
        return f"{self.host}:{self.container}" + (":ro" if self.read_only else "")


@dataclass(frozen=True)
class ContainerSpec:
    """Where a container task's ``run`` runs: its image and the container's limits."""

    image: str
    cpus: float | None = None
    memory: int | None = None
    """The memory limit in bytes."""
    workdir: str | None = None
    pull: ContainerPull = ContainerPull.MISSING
    argv: tuple[str, ...] = ()
    """The command when ``run`` is a list, passed as written (no shell); empty when ``run``
    is a shell line (run as ``/bin/sh -c``)."""
    volumes: tuple[VolumeSpec, ...] = ()
    secret_files: Mapping[str, str] = field(default_factory=dict)
    """File names in ``/run/secrets`` and the secret (by name) each holds."""


#: The executor a task with ``app`` or ``jar`` uses unless it names another.
SPARK_EXECUTOR = "spark"
#: What only a spark task may say.
SPARK_FIELDS = ("app", "jar", "main_class", "args", "conf")
#: The Spark properties the executor sets for every driver: a task's ``conf`` may not.
SPARK_RESERVED_CONF = frozenset(
    {"spark.app.name", "spark.master", "spark.submit.deployMode", "spark.driver.supervise"}
)


@dataclass(frozen=True)
class SparkSpec:
    """What a spark task's driver runs: a Python file, or a jar and its main class, with its
    arguments and Spark properties (passed as written: no placeholders)."""

    app: str | None = None
    jar: str | None = None
    main_class: str | None = None
    args: tuple[str, ...] = ()
    conf: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class WaitSpec:
    """A condition the scheduler checks on an interval until it holds (a ``wait:`` block)."""

    kind: WaitKind
    target: str
    """The path, the statement, the URL or the callable; templates are not expanded here."""
    connection: str | None = None
    """The SQL server a ``sql`` condition is checked on."""
    every: timedelta = DEFAULT_WAIT_EVERY
    timeout: timedelta = DEFAULT_WAIT_TIMEOUT
    on_timeout: OnTimeout = OnTimeout.FAIL
    expected: timedelta | None = None
    """Past this, counted from the first check, a ``dependency`` alert names the wait."""

    def __post_init__(self) -> None:
        if not self.target.strip():
            raise DefinitionError.one(f"wait.{self.kind}", problems.WAIT_EMPTY.format())
        if self.kind is WaitKind.CALL and not CALLABLE.fullmatch(self.target):
            raise DefinitionError.one(
                "wait.call", problems.NOT_CALLABLE_SHORT.format(call=self.target)
            )
        if (self.kind is WaitKind.SQL) != (self.connection is not None):
            raise DefinitionError.one("wait.connection", problems.WAIT_SQL_CONNECTION.format())
        if self.every < MIN_WAIT_EVERY:
            raise DefinitionError.one("wait.every", problems.WAIT_EVERY_TOO_SHORT.format())
        if self.timeout <= timedelta(0):
            raise DefinitionError.one("wait.timeout", problems.LONGER_THAN_ZERO.format())
        if self.expected is not None and self.expected <= timedelta(0):
            raise DefinitionError.one("wait.expected", problems.LONGER_THAN_ZERO.format())


@dataclass(frozen=True)
class TaskSpec:
    """One task of a definition, with its policy resolved."""

    key: str
    run: str | None = None
    """A shell command."""
    call: str | None = None
    """A Python callable, ``module:function``."""
    with_: Mapping[str, JSONValue] = field(default_factory=dict)
    """Parameters for the callable (the ``with`` key); templates are not expanded here."""
    after: tuple[str, ...] = ()
    trigger_rule: TriggerRule = TriggerRule.ALL_SUCCESS
    role: TaskRole = TaskRole.WORK
    decides_run: bool = False
    """A teardown whose failure fails the run (teardowns only)."""
    policy: TaskPolicy = field(default_factory=TaskPolicy)
    skip_exit_code: int = DEFAULT_SKIP_EXIT_CODE
    queue: str | None = None
    executor: str = DEFAULT_EXECUTOR
    sql: str | None = None
    """One SQL statement, run on the server named by ``connection`` (executor ``sql``)."""
    connection: str | None = None
    """The SQL server a ``sql`` task runs on, a name the platform's settings map to a URL."""
    env: Mapping[str, EnvValue] = field(default_factory=dict)
    """The task's own environment variables (``env:``); they win over the definition's."""
    map_over: str | None = None
    """A mapped task: the upstream task over whose output (a list) it runs once per item
    (``map: {over: "{{ outputs.TASK }}"}``)."""
    max_map: int = DEFAULT_MAX_MAP
    """The most items a mapped task maps over; more fails the expansion."""
    pool: str | None = None
    """The pool whose slots the task's attempts hold; None: the default pool."""
    pool_slots: int = 1
    """How many of the pool's slots one attempt holds."""
    priority: int = 0
    """Higher opens first when slots are scarce (the definition's unless the task sets one)."""
    wait: WaitSpec | None = None
    """A condition the scheduler checks instead of running anything (executor ``wait``)."""
    log_limit: int | None = None
    """The most bytes of output an attempt's log keeps (``log_limit``); None: the executor's
    setting (``VERITASK_LOG_LIMIT``, docs/executors.md)."""
    container: ContainerSpec | None = None
    """The image and limits of a task ``run`` in a container (executor ``container``)."""
    spark: SparkSpec | None = None
    """The application a spark task's driver runs (executor ``spark``); no run nor call."""

    def __post_init__(self) -> None:
        check_env(self.env, f"tasks.{self.key}.env")
        if self.wait is not None:
            self._check_wait()
        elif self.spark is not None:
            if self.run is not None or self.call is not None or self.sql is not None:
                raise DefinitionError.one(
                    f"tasks.{self.key}", problems.SPARK_HAS_NO.format(other="run, call or sql")
                )
        elif self.sql is None:
            _check_step(self.run, self.call, f"tasks.{self.key}")
            if self.connection is not None:
                raise DefinitionError.one(
                    f"tasks.{self.key}.connection", problems.CONNECTION_WITHOUT_SQL.format()
                )
        else:
            if self.run is not None or self.call is not None:
                raise DefinitionError.one(f"tasks.{self.key}", problems.SQL_HAS_NO_STEP.format())
            if not self.sql.strip():
                raise DefinitionError.one(
                    f"tasks.{self.key}.sql", problems.EMPTY_STATEMENT.format()
                )
            if self.connection is None or not SLUG.fullmatch(self.connection):
                raise DefinitionError.one(
                    f"tasks.{self.key}.connection", problems.SQL_NEEDS_CONNECTION_NAME.format()
                )
        if self.decides_run and self.role is not TaskRole.TEARDOWN:
            raise DefinitionError.one(
                f"tasks.{self.key}.decides_run", problems.ONLY_TEARDOWN_DECIDES.format()
            )
        if self.pool_slots < 1:
            raise DefinitionError.one(
                f"tasks.{self.key}.pool_slots",
                problems.AT_LEAST.format(minimum=1, number=self.pool_slots),
            )

    def _check_wait(self) -> None:
        path = f"tasks.{self.key}"
        if self.run is not None or self.call is not None or self.sql is not None:
            raise DefinitionError.one(path, problems.WAIT_HAS_NO_STEP.format())
        if self.executor != WAIT_EXECUTOR:
            raise DefinitionError.one(
                f"{path}.executor", problems.WAIT_HAS_NO.format(other="executor")
            )
        if self.pool is not None or self.pool_slots != 1:
            raise DefinitionError.one(f"{path}.pool", problems.WAIT_HAS_NO.format(other="pool"))

    @property
    def slots_held(self) -> int:
        """The pool slots one attempt holds: none for a wait, which only the scheduler's
        checker holds (docs/scheduling.md, "Waits that hold no slot")."""
        return 0 if self.wait is not None else self.pool_slots

    @property
    def requires_commit(self) -> bool:
        """SUCCESS needs the output commit marker as well as exit 0."""
        return self.policy.requires_commit

    @property
    def step(self) -> Step:
        """What the worker executes."""
        return Step(run=self.run, call=self.call)

    @functools.cached_property
    def reads_outputs(self) -> tuple[str, ...]:
        """The upstream tasks whose outputs the task names (``{{ outputs.TASK }}`` in its
        command or its ``with``): the scheduler reads them when it submits an attempt, and
        only for such tasks (docs/definitions.md, "Outputs")."""
        texts = [
            self.run or "",
            self.sql or "",
            self.wait.target if self.wait is not None else "",
            *placeholders.strings_in(dict(self.with_)),
        ]
        return tuple(
            dict.fromkeys(key for text in texts for key in placeholders.output_tasks(text))
        )


@dataclass(frozen=True)
class Definition:
    """A pipeline: its tasks and edges, schedule, policies, parameters and publication."""

    name: str
    tasks: Mapping[str, TaskSpec]
    """Task key -> task, in definition order."""
    description: str = ""
    owner: str | None = None
    schedule: Schedule | None = None
    concurrency: ConcurrencyPolicy = ConcurrencyPolicy.FORBID
    defaults: TaskPolicy = field(default_factory=TaskPolicy)
    """The policy every task inherits (publish steps run with it too)."""
    parameters: Mapping[str, Parameter] = field(default_factory=dict)
    """Name -> the run parameter it declares (definitions.parameters)."""
    publish: PublishSpec | None = None
    wait_for: tuple[WaitFor, ...] = ()
    trigger: OnPublished | None = None
    """Runs started by other definitions' publications, besides any schedule."""
    expected_finish: timedelta | None = None
    """When a run should have finished, counted from its logical time (for alerts)."""
    queue: str | None = None
    """The queue of tasks that do not name their own."""
    env: Mapping[str, EnvValue] = field(default_factory=dict)
    """Environment variables of every task (and publication step) of the definition."""
    priority: int = 0
    """The priority of the tasks that do not set their own."""
    alert_on_failure: bool = True
    """Whether a failed run opens a ``run_failed`` alert, routed to ``owner``."""

    def __post_init__(self) -> None:
        check_env(self.env, "env")
        if not SLUG.fullmatch(self.name):
            raise DefinitionError.one("name", problems.NOT_A_VALID_NAME.format(name=self.name))
        for key, task in self.tasks.items():
            if key != task.key:
                raise DefinitionError.one(
                    f"tasks.{key}", problems.HOLDS_ANOTHER_TASK.format(key=task.key)
                )
        if self.trigger is not None and self.name in self.trigger.upstreams:
            index = self.trigger.upstreams.index(self.name)
            raise DefinitionError.one(
                f"trigger.on_published[{index}]", problems.TRIGGERED_BY_ITSELF.format()
            )

    def run_graph(self) -> RunGraph:
        """The tasks as the core's graph (edges, rules, roles), for trigger rules and the
        run's state."""
        return RunGraph(
            tuple(
                TaskNode(
                    key=task.key,
                    after=task.after,
                    trigger_rule=task.trigger_rule,
                    role=task.role,
                    decides_run=task.decides_run,
                )
                for task in self.tasks.values()
            )
        )

    @property
    def publication_required(self) -> bool:
        """Whether runs have a publication phase (NOT_REQUIRED otherwise)."""
        return self.publish is not None


def _check_step(run: str | None, call: str | None, path: str) -> None:
    prefix = f"{path}." if path else ""
    if (run is None) == (call is None):
        raise DefinitionError.one(path or "step", problems.ONE_OF_RUN_OR_CALL.format())
    if call is not None and not CALLABLE.fullmatch(call):
        raise DefinitionError.one(f"{prefix}call", problems.NOT_CALLABLE_SHORT.format(call=call))


def check_env(env: Mapping[str, EnvValue], path: str) -> None:
    """Refuse a variable name that is not one, or that the platform keeps for itself."""
    for name in env:
        if not ENV_NAME.fullmatch(name):
            raise DefinitionError.one(f"{path}.{name}", problems.NOT_AN_ENV_NAME.format(name=name))
        if name.upper().startswith(RESERVED_ENV_PREFIX):
            raise DefinitionError.one(
                f"{path}.{name}", problems.RESERVED_ENV_NAME.format(name=name)
            )


def task_env(definition: Definition, task: TaskSpec) -> dict[str, EnvValue]:
    """The environment a task declares: the definition's ``env``, then the task's own."""
    return {**definition.env, **task.env}
