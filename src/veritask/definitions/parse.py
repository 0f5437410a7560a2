"""Read a definition from YAML or JSON, refusing it with every problem, its field and line.

:func:`parse_definition` reads text (JSON is YAML); :func:`definition_from_json` reads the
object that :func:`definition_to_json` wrote (what the ledger stores). Both go through the same
checks, so a stored definition is always one that would be accepted again. Problems are
collected in one pass: a refusal lists all of them, in line order.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from functools import partial

from veritask.core import problems, sizes
from veritask.core.errors import InvalidPolicy
from veritask.core.jsontypes import JSONValue
from veritask.core.policy import Backoff, OnUnknown, RetryPolicy, TaskPolicy
from veritask.core.run_state import TaskRole, find_cycles
from veritask.core.trigger_rules import TriggerRule
from veritask.definitions import containers, cron, declarations, placeholders, source, trigger
from veritask.definitions.codec import content_hash, definition_to_json
from veritask.definitions.environment import read_env
from veritask.definitions.errors import DefinitionError, Problem
from veritask.definitions.model import (
    CALLABLE,
    CONTAINER_EXECUTOR,
    CONTAINER_FIELDS,
    DEFAULT_EXECUTOR,
    DEFAULT_MAX_MAP,
    DEFAULT_SKIP_EXIT_CODE,
    DEFAULT_WAIT_EVERY,
    DEFAULT_WAIT_TIMEOUT,
    MIN_WAIT_EVERY,
    SLUG,
    SPARK_EXECUTOR,
    SPARK_FIELDS,
    SPARK_RESERVED_CONF,
    WAIT_EXECUTOR,
    Catchup,
    ConcurrencyPolicy,
    ContainerPull,
    ContainerSpec,
    Definition,
    OnTimeout,
    PublishCheck,
    PublishSpec,
    Schedule,
    SparkSpec,
    Step,
    TaskSpec,
    WaitFor,
    WaitKind,
    WaitSpec,
)
from veritask.definitions.reader import Reader, closest, entry_line, is_null, kind, slug_message
from veritask.definitions.source import Entry, Map, Scalar, Seq, Value

__all__ = [
    "DefinitionError",
    "Problem",
    "content_hash",
    "definition_from_json",
    "definition_to_json",
    "parse_definition",
]

TOP_FIELDS = (
    "name",
    "description",
    "owner",
    "schedule",
    "concurrency",
    "defaults",
    "parameters",
    "tasks",
    "publish",
    "wait_for",
    "trigger",
    "expected_finish",
    "queue",
    "env",
    "priority",
    "alert_on_failure",
)
POLICY_FIELDS = ("retry", "timeout", "lease", "evidence_window", "cancel_window", "on_unknown")
RETRY_FIELDS = ("max_retries", "backoff", "delay", "max_delay", "jitter")
TASK_FIELDS = (
    "run",
    "call",
    "with",
    "after",
    "trigger_rule",
    "role",
    "decides_run",
    "skip_exit_code",
    "queue",
    "executor",
    "requires_commit",
    "sql",
    "connection",
    *POLICY_FIELDS,
    "env",
    "map",
    "pool",
    "pool_slots",
    "priority",
    "wait",
    "log_limit",
    *CONTAINER_FIELDS,
    *SPARK_FIELDS,
)
#: What ``defaults:`` may hold: the policy, and what every task inherits beside it.
DEFAULTS_FIELDS = (*POLICY_FIELDS, "log_limit")
MAP_FIELDS = ("over", "max_map")
#: The least memory limit a container engine accepts.
MIN_CONTAINER_MEMORY = 6 * 1024 * 1024
#: The executor a task with ``sql`` uses unless it names another.
SQL_EXECUTOR = "sql"
SCHEDULE_FIELDS = ("cron", "timezone", "catchup")
CATCHUP_FIELDS = ("enabled", "max_runs")
CHECK_FIELDS = ("name", "run", "call")
STEP_FIELDS = ("run", "call")
WAIT_FIELDS = ("definition", "published", "timeout", "lag")
#: A ``wait:`` task's block: one condition, and how it is checked.
CONDITIONS = tuple(kind.value for kind in WaitKind)
WAIT_TASK_FIELDS = (*CONDITIONS, "connection", "every", "timeout", "on_timeout", "expected")
#: What a wait task may not say: the scheduler checks it, and it holds no slot.
NOT_FOR_WAITS = (
    "run",
    "call",
    "sql",
    "connection",
    "pool",
    "pool_slots",
    *CONTAINER_FIELDS,
    *SPARK_FIELDS,
)
#: The least lease of a wait's attempt unless the task sets its own. The scheduler that checks
#: it reports for it, and a restart or a takeover resumes it at once without waiting for the
#: lease, which only ever catches a checker that stalled in a live scheduler: an hour keeps
#: thousands of steady waits' beats few (one per 20 minutes each).
WAIT_LEASE = timedelta(hours=1)


#: The conditions a mapped wait may check: one cheap look per item.
_MAPPABLE = (WaitKind.PATH, WaitKind.HTTP)


#: Why a task may not name an executor here (a problem's message), or None when it may.
ExecutorCheck = Callable[[str], str | None]


def parse_definition(
    text: str,
    *,
    executors: ExecutorCheck | None = None,
    volumes: containers.VolumeCheck | None = None,
) -> Definition:
    """Read a definition written in YAML or JSON; raise :class:`DefinitionError` listing every
    problem with its field and line.

    ``executors`` checks each task's executor (not a wait's), and ``volumes`` each host path
    a container task mounts: the platform that applies the definition knows which engines it
    has and what they may mount, this module does not."""
    tree, problems = source.from_text(text)
    if tree is None:
        raise DefinitionError(problems)
    return _Reader(problems, executor_check=executors, volume_check=volumes).build(tree)


def definition_from_json(
    data: Mapping[str, JSONValue], *, executors: ExecutorCheck | None = None
) -> Definition:
    """Read the object written by :func:`definition_to_json` (problems carry no lines)."""
    tree, problems = source.from_json(dict(data))
    return _Reader(problems, executor_check=executors).build(tree)


@dataclass
class _Edge:
    up: str
    line: int | None


@dataclass
class _Reader(Reader):
    edges: dict[str, list[_Edge]] = field(default_factory=dict)
    executor_check: ExecutorCheck | None = None
    volume_check: containers.VolumeCheck | None = None

    def build(self, tree: Value) -> Definition:
        definition = self.definition(tree)
        if self.problems or definition is None:
            raise DefinitionError(self.problems)
        return definition

    # -- the document ----------------------------------------------------------------------

    def definition(self, tree: Value) -> Definition | None:
        f = self.fields(tree, "", TOP_FIELDS, required=("name", "tasks"))
        if f is None:
            return None
        name = self.slug(f.get("name"), "name", "")
        description = self.text(f.get("description"), "description") or ""
        owner = self.text(f.get("owner"), "owner")
        schedule = self.schedule(f.get("schedule"))
        concurrency = self.choice(
            f.get("concurrency"), "concurrency", ConcurrencyPolicy, ConcurrencyPolicy.FORBID
        )
        defaults_fields = self.fields_of(f.get("defaults"), "defaults", DEFAULTS_FIELDS)
        defaults = self.policy(defaults_fields, "defaults", TaskPolicy(), f.get("defaults"))
        parameters = declarations.read_parameters(self, f.get("parameters"))
        # Nobody gives a run a publication started a value either.
        if schedule is not None or f.get("trigger") is not None:
            declarations.check_scheduled_defaults(self, f.get("parameters"), parameters)
        queue = self.text(f.get("queue"), "queue")
        env = read_env(self, f.get("env"), "env")
        priority = self.integer(f.get("priority"), "priority", 0) or 0
        alert_on_failure = self.boolean(f.get("alert_on_failure"), "alert_on_failure", True)
        tasks = self.tasks(f.get("tasks"), defaults, queue, priority)
        log_limit = self.log_limit(
            (defaults_fields or {}).get("log_limit"), "defaults.log_limit", None
        )
        if log_limit is not None:  # a task's own wins
            tasks = {
                key: task if task.log_limit is not None else replace(task, log_limit=log_limit)
                for key, task in tasks.items()
            }
        publish = self.publish(f.get("publish"))
        wait_for = self.wait_for(f.get("wait_for"), name)
        on_published = trigger.read_trigger(self, f.get("trigger"), name)
        expected_finish = self.duration(
            f.get("expected_finish"), "expected_finish", None, positive=True
        )
        self.check_graph(tasks)
        declarations.check_placeholders(self, tree, tasks, publish, parameters)
        if self.problems:
            return None
        return self.attempt(
            lambda: Definition(
                name=name,
                description=description,
                owner=owner,
                schedule=schedule,
                concurrency=concurrency,
                defaults=defaults,
                parameters=parameters,
                tasks=tasks,
                publish=publish,
                wait_for=wait_for,
                trigger=on_published,
                expected_finish=expected_finish,
                queue=queue,
                env=env,
                priority=priority,
                alert_on_failure=alert_on_failure,
            ),
            line=tree.line,
        )

    def schedule(self, entry: Entry | None) -> Schedule | None:
        since = len(self.problems)
        f = self.fields_of(entry, "schedule", SCHEDULE_FIELDS, required=("cron",))
        if f is None:
            return None
        expression = self.text(f.get("cron"), "schedule.cron")
        if expression is not None:
            self.check(f.get("cron"), "schedule.cron", cron.cron_problem(expression))
        zone = self.text(f.get("timezone"), "schedule.timezone") or "UTC"
        self.check(f.get("timezone"), "schedule.timezone", cron.zone_problem(zone))
        c = self.fields_of(f.get("catchup"), "schedule.catchup", CATCHUP_FIELDS) or {}
        enabled = self.boolean(c.get("enabled"), "schedule.catchup.enabled", False)
        max_runs = self.integer(c.get("max_runs"), "schedule.catchup.max_runs", None, minimum=1)
        if expression is None:
            return None
        return self.attempt(
            lambda: Schedule(expression, zone, Catchup(enabled, max_runs)), entry_line(entry), since
        )

    # -- tasks -----------------------------------------------------------------------------

    def tasks(
        self, entry: Entry | None, defaults: TaskPolicy, queue: str | None, priority: int
    ) -> dict[str, TaskSpec]:
        if entry is None or is_null(entry):
            return {}  # already reported as missing
        items: list[tuple[str, int | None, Value, bool]] = []
        value = entry.value
        if isinstance(value, Map):
            items = [(e.key, e.key_line, e.value, False) for e in value.entries]
        elif isinstance(value, Seq):
            for i, item in enumerate(value.items):
                key_entry = item.get("key") if isinstance(item, Map) else None
                key = self.text(key_entry, f"tasks[{i}].key") if key_entry else None
                if key is None:
                    self.add(f"tasks[{i}]", item.line, problems.LISTED_TASK_NEEDS_KEY.format())
                    continue
                items.append((key, entry_line(key_entry), item, True))
        else:
            self.add("tasks", value.line, problems.EXPECTED_TASKS.format(kind=kind(value)))
            return {}
        if not items:
            self.add("tasks", value.line or entry.key_line, problems.NO_TASKS.format())
        tasks: dict[str, TaskSpec] = {}
        for key, line, task_value, listed in items:
            path = f"tasks.{key}"
            if key in tasks or key in self.edges:
                self.add(path, line, problems.TASK_DEFINED_TWICE.format())
                continue
            if not SLUG.fullmatch(key):
                self.add(path, line, slug_message(key, problems.NOT_A_TASK_KEY))
            spec = self.task(key, line, task_value, listed, defaults, queue, priority)
            if spec is not None:
                tasks[key] = spec
        return tasks

    def task(
        self,
        key: str,
        line: int | None,
        value: Value,
        listed: bool,
        defaults: TaskPolicy,
        queue: str | None,
        priority: int,
    ) -> TaskSpec | None:
        path = f"tasks.{key}"
        since = len(self.problems)
        known = ("key", *TASK_FIELDS) if listed else TASK_FIELDS
        f = self.fields(value, path, known, line=line)
        self.edges[key] = []
        if f is None:
            return None
        wait = self.wait(f, path) if "wait" in f else None
        spark_task = "wait" not in f and _names_spark(f)
        if wait is not None or "wait" in f:
            sql, connection, run, call = None, None, None, None
        else:
            sql, connection = self.sql(f, path, line)
            skip_step = sql is not None or spark_task
            run, call = (None, None) if skip_step else self.step(f, path, line)
        argv = self.run_list(f, path) if sql is None and "wait" not in f and not spark_task else ()
        if argv:
            run = shlex.join(argv)
        with_ = self.json_object(f.get("with"), f"{path}.with")
        after = self.after(f.get("after"), key)
        role = self.choice(f.get("role"), f"{path}.role", TaskRole, TaskRole.WORK)
        default_rule = (
            TriggerRule.ALL_DONE_SETUP_SUCCESS
            if role is TaskRole.TEARDOWN
            else TriggerRule.ALL_SUCCESS
        )
        rule = self.choice(f.get("trigger_rule"), f"{path}.trigger_rule", TriggerRule, default_rule)
        if role is TaskRole.TEARDOWN and rule is not TriggerRule.ALL_DONE_SETUP_SUCCESS:
            self.add(
                f"{path}.trigger_rule",
                entry_line(f.get("trigger_rule")),
                problems.TEARDOWN_RULE.format(),
            )
        decides_run = self.boolean(f.get("decides_run"), f"{path}.decides_run", False)
        if decides_run and role is not TaskRole.TEARDOWN:
            self.add(
                f"{path}.decides_run",
                entry_line(f.get("decides_run")),
                problems.DECIDES_RUN.format(),
            )
        skip_exit_code = self.integer(
            f.get("skip_exit_code"),
            f"{path}.skip_exit_code",
            DEFAULT_SKIP_EXIT_CODE,
            minimum=1,
            maximum=255,
        )
        task_queue = self.text(f.get("queue"), f"{path}.queue") or queue
        default_executor = (
            WAIT_EXECUTOR
            if "wait" in f
            else SQL_EXECUTOR
            if sql is not None
            else SPARK_EXECUTOR
            if "app" in f or "jar" in f
            else CONTAINER_EXECUTOR
            if "image" in f
            else DEFAULT_EXECUTOR
        )
        executor = self.slug(f.get("executor"), f"{path}.executor", default_executor)
        container = self.container(
            f, path, line, executor or default_executor, run, call, sql, argv
        )
        spark = self.spark(f, path, line, executor or default_executor)
        if "wait" in f and executor not in (None, WAIT_EXECUTOR):
            self.add(
                f"{path}.executor",
                entry_line(f.get("executor")),
                problems.WAIT_HAS_NO.format(other="executor"),
            )
        if self.executor_check is not None and SLUG.fullmatch(executor) and "wait" not in f:
            # sql: picks the sql executor, image: the container executor, app: or jar: spark
            named = (
                f.get("executor") or f.get("sql") or f.get("image") or f.get("app") or f.get("jar")
            )
            problem = self.executor_check(executor)
            if problem is not None:
                self.add(f"{path}.executor", entry_line(named) or line, problem)
        requires_commit = self.boolean(f.get("requires_commit"), f"{path}.requires_commit", False)
        base = replace(defaults, requires_commit=requires_commit)
        policy = self.policy(f, path, base, None)
        if "wait" in f and "lease" not in f:
            policy = replace(policy, lease=max(policy.lease, WAIT_LEASE))
        env = read_env(self, f.get("env"), f"{path}.env")
        map_over, max_map = self.mapping(f.get("map"), path)
        if wait is not None and map_over is not None and wait.kind not in _MAPPABLE:
            self.add(
                f"{path}.map", entry_line(f.get("map")), problems.WAIT_MAPPED.format(kind=wait.kind)
            )
        log_limit = self.log_limit(f.get("log_limit"), f"{path}.log_limit", None)
        pool = self.slug(f.get("pool"), f"{path}.pool", "") or None
        pool_slots = self.integer(f.get("pool_slots"), f"{path}.pool_slots", 1, minimum=1) or 1
        task_priority = self.integer(f.get("priority"), f"{path}.priority", priority)
        if run is None and call is None and sql is None and wait is None and spark is None:
            return None
        return self.attempt(
            lambda: TaskSpec(
                key=key,
                run=run,
                call=call,
                with_=with_,
                after=after,
                trigger_rule=rule,
                role=role,
                decides_run=decides_run and role is TaskRole.TEARDOWN,
                policy=policy,
                skip_exit_code=skip_exit_code or DEFAULT_SKIP_EXIT_CODE,
                queue=task_queue,
                executor=executor or default_executor,
                sql=sql,
                connection=connection,
                env=env,
                map_over=map_over,
                max_map=max_map,
                pool=pool,
                pool_slots=pool_slots,
                priority=priority if task_priority is None else task_priority,
                wait=wait,
                log_limit=log_limit,
                container=container,
                spark=spark,
            ),
            line,
            since,
        )

    def wait(self, f: Mapping[str, Entry], path: str) -> WaitSpec | None:
        """``wait:``: exactly one condition (path, sql with connection, http, call) and how it
        is checked; the task names nothing a running task would (docs/definitions.md)."""
        for other in NOT_FOR_WAITS:
            if other in f:
                self.add(
                    f"{path}.{other}",
                    entry_line(f.get(other)),
                    problems.WAIT_HAS_NO.format(other=other),
                )
        entry = f.get("wait")
        here = f"{path}.wait"
        since = len(self.problems)
        w = self.fields_of(entry, here, WAIT_TASK_FIELDS)
        if w is None:
            if entry is not None and is_null(entry):
                self.add(here, entry_line(entry), problems.WAIT_ONE_CONDITION.format())
            return None
        named = [name for name in CONDITIONS if name in w]
        if len(named) != 1:
            self.add(here, entry_line(entry), problems.WAIT_ONE_CONDITION.format())
            return None
        kind = WaitKind(named[0])
        target = self.text(w.get(kind.value), f"{here}.{kind.value}")
        target_line = entry_line(w.get(kind.value))
        if target is not None and not target.strip():
            self.add(f"{here}.{kind.value}", target_line, problems.WAIT_EMPTY.format())
        if kind is WaitKind.CALL and target and not CALLABLE.fullmatch(target):
            self.add(f"{here}.call", target_line, problems.NOT_CALLABLE.format(call=target))
        if kind is WaitKind.HTTP and target and not target.startswith(("http://", "https://")):
            self.add(f"{here}.http", target_line, problems.WAIT_NOT_HTTP.format(url=target))
        connection = self.text(w.get("connection"), f"{here}.connection")
        if connection is not None and not SLUG.fullmatch(connection):
            self.add(
                f"{here}.connection",
                entry_line(w.get("connection")),
                slug_message(connection, problems.NOT_A_CONNECTION_NAME),
            )
        if (kind is WaitKind.SQL) != ("connection" in w):
            where = w.get("connection") or entry
            self.add(f"{here}.connection", entry_line(where), problems.WAIT_SQL_CONNECTION.format())
        every = self.duration(w.get("every"), f"{here}.every", DEFAULT_WAIT_EVERY, positive=True)
        if every is not None and every < MIN_WAIT_EVERY:
            self.add(
                f"{here}.every", entry_line(w.get("every")), problems.WAIT_EVERY_TOO_SHORT.format()
            )
        timeout = self.duration(
            w.get("timeout"), f"{here}.timeout", DEFAULT_WAIT_TIMEOUT, positive=True
        )
        on_timeout = self.choice(
            w.get("on_timeout"), f"{here}.on_timeout", OnTimeout, OnTimeout.FAIL
        )
        expected = self.duration(w.get("expected"), f"{here}.expected", None, positive=True)
        if target is None or len(self.problems) > since:
            return None
        return self.attempt(
            lambda: WaitSpec(
                kind=kind,
                target=target,
                connection=connection,
                every=every or DEFAULT_WAIT_EVERY,
                timeout=timeout or DEFAULT_WAIT_TIMEOUT,
                on_timeout=on_timeout,
                expected=expected,
            ),
            entry_line(entry),
            since,
        )

    def mapping(self, entry: Entry | None, path: str) -> tuple[str | None, int]:
        """``map: {over: "{{ outputs.TASK }}", max_map: N}``: one instance per item of an
        upstream's output (the upstream is checked with the placeholders)."""
        f = self.fields_of(entry, f"{path}.map", MAP_FIELDS, required=("over",))
        if f is None:
            return None, DEFAULT_MAX_MAP
        over_text = self.text(f.get("over"), f"{path}.map.over")
        max_map = self.integer(f.get("max_map"), f"{path}.map.max_map", DEFAULT_MAX_MAP, minimum=1)
        if over_text is None:
            return None, DEFAULT_MAX_MAP
        whole = placeholders.PLACEHOLDER.fullmatch(over_text.strip())
        over = placeholders.output_task(whole.group(1)) if whole else None
        if over is None:
            self.add(
                f"{path}.map.over",
                entry_line(f.get("over")),
                problems.MAP_OVER_NOT_OUTPUT.format(value=over_text, example="{{ outputs.TASK }}"),
            )
        return over, max_map or DEFAULT_MAX_MAP

    def sql(
        self, f: Mapping[str, Entry], path: str, line: int | None
    ) -> tuple[str | None, str | None]:
        """``sql`` with its ``connection``: a statement for a SQL engine instead of run/call."""
        sql = self.text(f.get("sql"), f"{path}.sql")
        connection = self.text(f.get("connection"), f"{path}.connection")
        if connection is not None and not SLUG.fullmatch(connection):
            self.add(
                f"{path}.connection",
                entry_line(f.get("connection")),
                slug_message(connection, problems.NOT_A_CONNECTION_NAME),
            )
        if sql is None:
            if connection is not None:
                self.add(
                    f"{path}.connection",
                    entry_line(f.get("connection")),
                    problems.CONNECTION_WITHOUT_SQL.format(),
                )
            return None, None
        for other in ("run", "call", "with", "env", "map"):
            if other in f:
                self.add(
                    f"{path}.{other}",
                    entry_line(f.get(other)),
                    problems.SQL_HAS_NO.format(other=other),
                )
        if not sql.strip():
            self.add(f"{path}.sql", entry_line(f.get("sql")), problems.EMPTY_STATEMENT.format())
        if connection is None:
            self.add(
                f"{path}.connection",
                line,
                problems.SQL_NEEDS_CONNECTION.format(),
            )
        return sql, connection

    def container(
        self,
        f: Mapping[str, Entry],
        path: str,
        line: int | None,
        executor: str,
        run: str | None,
        call: str | None,
        sql: str | None,
        argv: tuple[str, ...],
    ) -> ContainerSpec | None:
        """``image`` and the container's limits: for a ``run`` of the container executor."""
        if executor != CONTAINER_EXECUTOR:
            if argv:
                run_line = entry_line(f.get("run"))
                self.add(f"{path}.run", run_line, problems.CONTAINER_ONLY.format(name="a run list"))
            for name in CONTAINER_FIELDS:
                if name in f and "wait" not in f:
                    where = f"{path}.{name}"
                    self.add(
                        where, entry_line(f.get(name)), problems.CONTAINER_ONLY.format(name=name)
                    )
            return None
        if call is not None or sql is not None:
            self.add(path, line, problems.CONTAINER_NEEDS_RUN.format())
        image = self.text(f.get("image"), f"{path}.image")
        if image is None or not image.strip():
            self.add(
                f"{path}.image",
                entry_line(f.get("image")) or line,
                problems.CONTAINER_NEEDS_IMAGE.format(),
            )
        cpus = None
        if "cpus" in f and not is_null(f["cpus"]):
            cpus = self.number(f.get("cpus"), f"{path}.cpus", 1.0, 0.01, 1024.0)
        memory = None
        memory_entry = f.get("memory")
        if memory_entry is not None and not is_null(memory_entry):
            value = memory_entry.value
            try:
                memory = sizes.parse_size(value.value if isinstance(value, Scalar) else kind(value))
            except sizes.InvalidSize as exc:
                self.add(f"{path}.memory", value.line, str(exc))
            else:
                if memory < MIN_CONTAINER_MEMORY:
                    self.add(
                        f"{path}.memory",
                        value.line,
                        problems.SIZE_OUT_OF_RANGE.format(value=memory, low="6MiB", high="1PiB"),
                    )
                    memory = None
        workdir = self.text(f.get("workdir"), f"{path}.workdir")
        pull = self.choice(f.get("pull"), f"{path}.pull", ContainerPull, ContainerPull.MISSING)
        volumes = containers.read_volumes(
            self, f.get("volumes"), f"{path}.volumes", self.volume_check
        )
        secret_files = containers.read_secret_files(
            self, f.get("secret_files"), f"{path}.secret_files"
        )
        if image is None or not image.strip() or run is None:
            return None
        return ContainerSpec(
            image=image,
            cpus=cpus,
            memory=memory,
            workdir=workdir,
            pull=pull,
            argv=argv,
            volumes=volumes,
            secret_files=secret_files,
        )

    def spark(
        self, f: Mapping[str, Entry], path: str, line: int | None, executor: str
    ) -> SparkSpec | None:
        """``app`` (a Python file) or ``jar`` with ``main_class``, ``args`` and ``conf``: what
        a spark task's driver runs (executor ``spark``)."""
        if executor != SPARK_EXECUTOR:
            for name in SPARK_FIELDS:
                if name in f and "wait" not in f:
                    where = f"{path}.{name}"
                    self.add(where, entry_line(f.get(name)), problems.SPARK_ONLY.format(name=name))
            return None
        if "wait" in f:
            return None
        since = len(self.problems)
        for other in ("run", "call", "sql", "with"):
            if other in f:
                self.add(
                    f"{path}.{other}",
                    entry_line(f.get(other)),
                    problems.SPARK_HAS_NO.format(other=other),
                )
        app = self.text(f.get("app"), f"{path}.app")
        jar = self.text(f.get("jar"), f"{path}.jar")
        main_class = self.text(f.get("main_class"), f"{path}.main_class")
        if ("app" in f) == ("jar" in f):
            both = f.get("jar") if "app" in f else None
            self.add(path, entry_line(both) or line, problems.SPARK_NEEDS_APP.format())
        if app is not None and not app.strip().endswith(".py"):
            self.add(
                f"{path}.app",
                entry_line(f.get("app")),
                problems.SPARK_APP_NOT_PYTHON.format(app=app),
            )
        if jar is not None and not (main_class or "").strip():
            self.add(
                f"{path}.main_class",
                entry_line(f.get("main_class")) or entry_line(f.get("jar")),
                problems.SPARK_NEEDS_MAIN_CLASS.format(),
            )
        if "main_class" in f and "jar" not in f:
            self.add(
                f"{path}.main_class",
                entry_line(f.get("main_class")),
                problems.SPARK_MAIN_CLASS_NEEDS_JAR.format(),
            )
        args: list[str] = []
        for i, item in enumerate(self.items(f.get("args"), f"{path}.args")):
            text = self.spark_text(item, f"{path}.args[{i}]")
            if text is not None:
                args.append(text)
        conf: dict[str, str] = {}
        conf_entry = f.get("conf")
        if conf_entry is not None and not is_null(conf_entry):
            if not isinstance(conf_entry.value, Map):
                self.add(
                    f"{path}.conf",
                    conf_entry.value.line,
                    problems.EXPECTED_MAPPING.format(kind=kind(conf_entry.value)),
                )
            else:
                for prop in conf_entry.value.entries:
                    where = f"{path}.conf.{prop.key}"
                    if prop.key in SPARK_RESERVED_CONF:
                        self.add(
                            where, prop.key_line, problems.SPARK_RESERVED_CONF.format(name=prop.key)
                        )
                        continue
                    value = self.spark_text(prop.value, where)
                    if value is not None:
                        conf[prop.key] = value
        if len(self.problems) > since:
            return None
        return SparkSpec(app=app, jar=jar, main_class=main_class, args=tuple(args), conf=conf)

    def spark_text(self, value: Value, path: str) -> str | None:
        """An argument or a property: a string, or a number or boolean written as Spark
        reads it; no placeholders (the driver reads the run's values from its environment)."""
        if not isinstance(value, Scalar) or value.value is None:
            self.add(path, value.line, problems.EXPECTED_STRING.format(kind=kind(value)))
            return None
        raw = value.value
        text = ("true" if raw else "false") if isinstance(raw, bool) else str(raw)
        if "{{" in text:
            self.add(path, value.line, problems.SPARK_PLACEHOLDER.format())
            return None
        return text

    def run_list(self, f: Mapping[str, Entry], path: str) -> tuple[str, ...]:
        """``run`` written as a list (a container task's argv): strings, no placeholders."""
        entry = f.get("run")
        if entry is None or not isinstance(entry.value, Seq):
            return ()
        argv: list[str] = []
        for i, item in enumerate(entry.value.items):
            if not (isinstance(item, Scalar) and isinstance(item.value, str)):
                self.add(
                    f"{path}.run[{i}]", item.line, problems.EXPECTED_STRING.format(kind=kind(item))
                )
                return ()
            if "{{" in item.value:
                self.add(f"{path}.run[{i}]", item.line, problems.RUN_LIST_PLACEHOLDER.format())
                return ()
            argv.append(item.value)
        if not argv:
            self.add(f"{path}.run", entry_line(entry), problems.EMPTY_COMMAND.format())
        return tuple(argv)

    def step(
        self, f: Mapping[str, Entry], path: str, line: int | None
    ) -> tuple[str | None, str | None]:
        """``run`` or ``call``: exactly one, non-empty, and a call that looks importable."""
        run_entry = f.get("run")
        listed = run_entry is not None and isinstance(run_entry.value, Seq)
        run = "(a run list)" if listed else self.text(run_entry, f"{path}.run")
        call = self.text(f.get("call"), f"{path}.call")
        if run is not None and call is not None:
            self.add(path, line, problems.RUN_AND_CALL.format())
            return None, None
        if run is None and call is None:
            self.add(path, line, problems.RUN_OR_CALL.format())
            return None, None
        if run is not None and not run.strip():
            self.add(f"{path}.run", entry_line(f.get("run")), problems.EMPTY_COMMAND.format())
        if call is not None and not CALLABLE.fullmatch(call):
            self.add(
                f"{path}.call",
                entry_line(f.get("call")),
                problems.NOT_CALLABLE.format(call=call),
            )
        return run, call

    def after(self, entry: Entry | None, key: str) -> tuple[str, ...]:
        if entry is None or is_null(entry):
            return ()
        path = f"tasks.{key}.after"
        value = entry.value
        items: tuple[Value, ...]
        if isinstance(value, Scalar) and isinstance(value.value, str):
            items = (value,)  # ``after: extract`` is one upstream
        elif isinstance(value, Seq):
            items = value.items
        else:
            self.add(path, value.line, problems.EXPECTED_TASK_KEYS.format(kind=kind(value)))
            return ()
        result = []
        for i, item in enumerate(items):
            if not (isinstance(item, Scalar) and isinstance(item.value, str)):
                self.add(
                    f"{path}[{i}]", item.line, problems.EXPECTED_TASK_KEY.format(kind=kind(item))
                )
                continue
            result.append(item.value)
            self.edges[key].append(_Edge(item.value, item.line))
        return tuple(result)

    def check_graph(self, tasks: Mapping[str, TaskSpec]) -> None:
        known = list(self.edges)
        for key, edges in self.edges.items():
            seen: set[str] = set()
            for i, edge in enumerate(edges):
                path = f"tasks.{key}.after[{i}]"
                if edge.up == key:
                    self.add(path, edge.line, problems.AFTER_ITSELF.format(key=key))
                elif edge.up not in self.edges:
                    close = closest(edge.up, known)
                    self.add(
                        path,
                        edge.line,
                        problems.NO_SUCH_TASK.format(key=edge.up)
                        if close is None
                        else problems.NO_SUCH_TASK_HINT.format(key=edge.up, close=close),
                    )
                elif edge.up in seen:
                    self.add(path, edge.line, problems.LISTED_TWICE.format(key=edge.up))
                seen.add(edge.up)
        graph = {
            key: [e.up for e in edges if e.up in self.edges and e.up != key]
            for key, edges in self.edges.items()
        }
        for cycle in find_cycles(graph):
            start, last = cycle[0], cycle[-1]
            index = next(i for i, e in enumerate(self.edges[start]) if e.up == last)
            shown = " -> ".join((*cycle, start))
            self.add(
                f"tasks.{start}.after[{index}]",
                self.edges[start][index].line,
                problems.CYCLE.format(cycle=shown),
            )

    # -- publication and dependencies ------------------------------------------------------

    def publish(self, entry: Entry | None) -> PublishSpec | None:
        f = self.fields_of(entry, "publish", ("checks", "commit"), required=("commit",))
        if f is None:
            return None
        checks: list[PublishCheck] = []
        names: set[str] = set()
        for i, item in enumerate(self.items(f.get("checks"), "publish.checks")):
            path = f"publish.checks[{i}]"
            since = len(self.problems)
            c = self.fields(item, path, CHECK_FIELDS, required=("name",))
            if c is None:
                continue
            name = self.text(c.get("name"), f"{path}.name")
            if name is not None and name in names:
                self.add(
                    f"{path}.name", entry_line(c.get("name")), problems.USED_TWICE.format(name=name)
                )
            run, call = self.step(c, path, item.line)
            if name is not None and (run or call):
                names.add(name)
                check = self.attempt(partial(PublishCheck, name, run, call), item.line, since)
                if check is not None:
                    checks.append(check)
        commit_entry = f.get("commit")
        since = len(self.problems)
        commit = self.fields_of(commit_entry, "publish.commit", STEP_FIELDS)
        if commit is None:
            return None
        run, call = self.step(commit, "publish.commit", entry_line(commit_entry))
        step = self.attempt(lambda: Step(run, call), entry_line(commit_entry), since)
        if step is None:
            return None
        return PublishSpec(commit=step, checks=tuple(checks))

    def wait_for(self, entry: Entry | None, own_name: str) -> tuple[WaitFor, ...]:
        result = []
        for i, item in enumerate(self.items(entry, "wait_for")):
            path = f"wait_for[{i}]"
            w = self.fields(item, path, WAIT_FIELDS, required=("definition",))
            if w is None:
                continue
            definition = self.slug(w.get("definition"), f"{path}.definition", "")
            if definition and definition == own_name:
                self.add(
                    f"{path}.definition",
                    entry_line(w.get("definition")),
                    problems.WAITS_FOR_ITSELF.format(),
                )
            published = self.boolean(w.get("published"), f"{path}.published", True)
            if not published:
                self.add(
                    f"{path}.published",
                    entry_line(w.get("published")),
                    problems.MUST_BE_PUBLISHED.format(),
                )
            timeout = self.duration(w.get("timeout"), f"{path}.timeout", None, positive=True)
            lag = self.duration(w.get("lag"), f"{path}.lag", timedelta(0)) or timedelta(0)
            if definition and published:
                line = entry_line(w.get("definition"))
                result.append(WaitFor(definition, True, timeout, lag, line))
        return tuple(result)

    # -- policies --------------------------------------------------------------------------

    def policy(
        self,
        f: Mapping[str, Entry] | None,
        path: str,
        base: TaskPolicy,
        entry: Entry | None,
    ) -> TaskPolicy:
        """``base`` with the policy fields of ``f`` applied (a task over the defaults)."""
        if not f:
            return base
        retry = self.retry(f.get("retry"), f"{path}.retry", base.retry)
        timeout = base.timeout
        timeout_entry = f.get("timeout")
        if timeout_entry is not None:
            timeout = self.duration(timeout_entry, f"{path}.timeout", None, positive=True)
        lease = self.duration(f.get("lease"), f"{path}.lease", base.lease, positive=True)
        window = self.duration(
            f.get("evidence_window"), f"{path}.evidence_window", base.evidence_window, positive=True
        )
        cancel_window = self.duration(
            f.get("cancel_window"), f"{path}.cancel_window", base.cancel_window, positive=True
        )
        on_unknown = self.choice(
            f.get("on_unknown"), f"{path}.on_unknown", OnUnknown, base.on_unknown
        )
        try:
            return replace(
                base,
                retry=retry,
                timeout=timeout,
                lease=lease or base.lease,
                evidence_window=window or base.evidence_window,
                cancel_window=cancel_window or base.cancel_window,
                on_unknown=on_unknown,
            )
        except InvalidPolicy as exc:
            self.policy_problem(exc, path, f, entry_line(entry))
            return base

    def retry(self, entry: Entry | None, path: str, base: RetryPolicy) -> RetryPolicy:
        f = self.fields_of(entry, path, RETRY_FIELDS)
        if not f:
            return base
        max_retries = self.integer(
            f.get("max_retries"), f"{path}.max_retries", base.max_retries, minimum=0
        )
        backoff = self.choice(f.get("backoff"), f"{path}.backoff", Backoff, base.backoff)
        # ``0s`` is a delay (retry at once), not a missing one: compared with None, never falsy.
        delay = self.duration(f.get("delay"), f"{path}.delay", base.delay)
        if delay is None:
            delay = base.delay
        max_delay = self.duration(f.get("max_delay"), f"{path}.max_delay", base.max_delay)
        if max_delay is None:
            max_delay = base.max_delay
        if f.get("max_delay") is None:
            max_delay = max(base.max_delay, delay)  # a long delay lifts the default cap
        jitter = self.number(f.get("jitter"), f"{path}.jitter", base.jitter, 0.0, 1.0)
        try:
            return RetryPolicy(
                max_retries=max_retries if max_retries is not None else base.max_retries,
                backoff=backoff,
                delay=delay,
                max_delay=max_delay,
                jitter=jitter,
                retry_on=base.retry_on,
            )
        except InvalidPolicy as exc:
            self.policy_problem(exc, path.removesuffix(".retry"), {}, entry_line(entry), f)
            return base

    def policy_problem(
        self,
        exc: InvalidPolicy,
        path: str,
        f: Mapping[str, Entry | None],
        fallback: int | None,
        retry_fields: Mapping[str, Entry] | None = None,
    ) -> None:
        """Place a policy's own refusal (its message starts with the field) on its line."""
        message = str(exc)
        name, _, detail = message.partition(": ")
        line = fallback
        head, _, tail = name.partition(".")
        if head == "retry" and retry_fields is not None and tail in retry_fields:
            line = entry_line(retry_fields[tail])
        elif head in f:
            line = entry_line(f[head]) or fallback
        self.add(f"{path}.{name}" if detail else path, line, detail or message)


def _names_spark(f: Mapping[str, Entry]) -> bool:
    """Whether the task is a spark task: it names an app or a jar, or the spark executor."""
    if "app" in f or "jar" in f:
        return True
    named = f.get("executor")
    return (
        named is not None
        and isinstance(named.value, Scalar)
        and named.value.value == SPARK_EXECUTOR
    )
