"""The words a pipeline module is written in: ``@task``, ``@pipeline``, ``Param``, ``shell``,
``sql`` and the policy values (docs/python.md).

Nothing here runs a task. Calling a task inside a pipeline's body records a node of the graph
and returns a :class:`Result` standing for the value it will return; the body runs once, when
the pipeline is compiled (``veritask.pipelines.compile``), into the same definition a YAML file
gives. This module imports only the standard library, so ``import veritask`` stays light.
"""

from __future__ import annotations

import inspect
import math
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from types import FrameType
from typing import Any, Generic, Literal, ParamSpec, TypeVar, cast, overload

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")

Duration = str | int | float
TriggerRuleName = Literal[
    "all_success",
    "all_failed",
    "all_done",
    "all_done_min_one_success",
    "all_done_setup_success",
    "all_skipped",
    "one_success",
    "one_failed",
    "one_done",
    "none_failed",
    "none_failed_min_one_success",
    "none_skipped",
    "always",
]
Role = Literal["work", "setup", "teardown"]
OnUnknown = Literal["retry", "fail", "wait"]
Concurrency = Literal["allow", "forbid", "queue", "replace"]
PublishedWhen = Literal["all", "any"]
ParamType = Literal["string", "integer", "number", "boolean", "date", "datetime"]


class PipelineError(ValueError):
    """A pipeline module was refused; every problem names the Python file and line."""

    def __init__(self, problems: Sequence[Refusal]) -> None:
        self.problems = list(problems)
        count = len(self.problems)
        head = "1 problem" if count == 1 else f"{count} problems"
        lines = "\n".join(f"  {p}" for p in self.problems)
        super().__init__(f"the pipeline was refused, {head}:\n{lines}")


@dataclass(frozen=True)
class Refusal:
    """One problem: where in the Python source, which field of the definition, and why."""

    file: str
    line: int | None
    message: str
    field: str = ""

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        name = f"{self.field}: " if self.field else ""
        return f"{where}: {name}{self.message}"


def refuse(message: str, frame: FrameType | None, field: str = "") -> PipelineError:
    """A refusal placed at ``frame``'s file and line."""
    if frame is None:
        return PipelineError([Refusal("<unknown>", None, message, field)])
    return PipelineError([Refusal(frame.f_code.co_filename, frame.f_lineno, message, field)])


# -- policy values -------------------------------------------------------------------------


@dataclass(frozen=True)
class Retry:
    """``retry:``: fields left None keep the defaults (docs/definitions.md, policy fields)."""

    max_retries: int | None = None
    delay: Duration | None = None
    backoff: Literal["fixed", "exponential"] | None = None
    max_delay: Duration | None = None
    jitter: float | None = None


@dataclass(frozen=True)
class Catchup:
    """``schedule.catchup``: whether missed runs are created, and how many of the latest."""

    enabled: bool = False
    max_runs: int | None = None


@dataclass(frozen=True)
class Cron:
    """``schedule:``: five cron fields read in ``timezone``'s wall clock."""

    expression: str
    timezone: str | None = None
    catchup: Catchup | None = None


@dataclass(frozen=True)
class Secret:
    """``{secret: NAME}`` in ``env``: the worker looks the value up; the definition holds the
    name only."""

    name: str


EnvValue = str | Secret
#: A size as definitions write it: ``"200MiB"``, ``"2GiB"``, ``"100MB"`` or a number of bytes.
Size = str | int


@dataclass(frozen=True)
class Defaults:
    """``defaults:``: the policy every task inherits and the publish steps run with."""

    retry: Retry | None = None
    timeout: Duration | None = None
    lease: Duration | None = None
    evidence_window: Duration | None = None
    cancel_window: Duration | None = None
    on_unknown: OnUnknown | None = None
    log_limit: Size | None = None
    """How much output each task's log keeps: ``"200MiB"`` or bytes (``log_limit``)."""


@dataclass(frozen=True)
class Step:
    """A publish step: a shell command (``run``) or a callable (``call``, a @task or
    ``module:function``)."""

    run: str | None = None
    call: Task[..., Any] | str | None = None


@dataclass(frozen=True)
class Check(Step):
    """A named quality check of ``publish.checks``."""

    name: str = ""


@dataclass(frozen=True)
class Publish:
    """``publish:``: the checks, then the commit that makes the output visible."""

    commit: Step
    checks: Sequence[Check] = ()


@dataclass(frozen=True)
class WaitFor:
    """One ``wait_for`` entry: another definition's run must be PUBLISHED first."""

    definition: str
    timeout: Duration | None = None
    lag: Duration | None = None


@dataclass(frozen=True)
class OnPublished:
    """``trigger: {on_published: …, when: …}``; :func:`on_published` makes one."""

    definitions: tuple[str, ...]
    when: PublishedWhen = "all"


def on_published(*definitions: str, when: PublishedWhen = "all") -> OnPublished:
    """Start a run when these definitions publish: ``all`` of them for one logical time, or
    each run of ``any`` of them (docs/definitions.md, "trigger")."""
    return OnPublished(tuple(definitions), when)


@dataclass(frozen=True)
class ParamSpecification:
    """A declared parameter (``parameters.NAME``); :func:`Param` makes one."""

    default: object
    type: ParamType | None
    enum: tuple[str | int | float | bool, ...] | None
    raw: bool
    description: str
    required: bool


_NO_DEFAULT: Any = object()


def Param(
    default: T = _NO_DEFAULT,
    *,
    type: ParamType | None = None,
    enum: Sequence[str | int | float | bool] | None = None,
    raw: bool = False,
    description: str = "",
) -> T:
    """A pipeline parameter's declaration, written as the default of the pipeline function's
    argument: ``def daily(day: str = Param("2024-01-01", type="date"))``. A plain default
    (``rows: int = 10``) is a short-form parameter."""
    spec = ParamSpecification(
        default=None if default is _NO_DEFAULT else default,
        type=type,
        enum=tuple(enum) if enum is not None else None,
        raw=raw,
        description=description,
        required=default is _NO_DEFAULT,
    )
    return cast(T, spec)


# -- the graph being built -----------------------------------------------------------------


@dataclass(frozen=True)
class ParamRef:
    """A pipeline parameter inside the body: it becomes ``{{ params.NAME }}``."""

    name: str

    def __str__(self) -> str:
        return f"{{{{ params.{self.name} }}}}"


@dataclass(frozen=True)
class Result(Generic[R]):
    """What a task call inside a pipeline returns: the node, standing for its future value."""

    key: str

    def __repr__(self) -> str:
        return f"<result of task {self.key!r}>"

    def __str__(self) -> str:
        """In a command (an f-string), the task's output: ``{{ outputs.KEY }}``."""
        return f"{{{{ outputs.{self.key} }}}}"


@dataclass(frozen=True)
class MapItem:
    """The item of a mapped task (``task.map(result)``): it becomes ``{{ map.item }}``."""

    def __str__(self) -> str:
        return "{{ map.item }}"


@dataclass(frozen=True)
class Options:
    """The per-task fields of a definition, set on ``@task(...)``, ``shell(...)``, ``sql(...)``
    or ``.options(...)`` (later ones win)."""

    name: str | None = None
    after: tuple[object, ...] = ()
    trigger_rule: TriggerRuleName | None = None
    role: Role | None = None
    decides_run: bool | None = None
    skip_exit_code: int | None = None
    queue: str | None = None
    executor: str | None = None
    requires_commit: bool | None = None
    retry: Retry | None = None
    timeout: Duration | None = None
    lease: Duration | None = None
    evidence_window: Duration | None = None
    cancel_window: Duration | None = None
    on_unknown: OnUnknown | None = None
    env: Mapping[str, EnvValue] | None = None
    max_map: int | None = None
    pool: str | None = None
    pool_slots: int | None = None
    priority: int | None = None
    log_limit: Size | None = None

    def over(self, other: Options) -> Options:
        """These options with the ones ``other`` sets on top (``after`` adds up)."""
        changes = {
            name: getattr(other, name)
            for name in self.__dataclass_fields__
            if name != "after" and getattr(other, name) is not None
        }
        return replace(self, after=(*self.after, *other.after), **changes)


@dataclass
class Node:
    """One task of the graph: what it runs, its arguments, and where it was called."""

    key: str
    options: Options
    file: str
    line: int
    run: str | None = None
    call: str | None = None
    sql: str | None = None
    connection: str | None = None
    arguments: dict[str, object] = field(default_factory=dict)
    map_over: str | None = None
    """A mapped task: the task over whose output it runs once per item."""
    wait: dict[str, str | int | float] | None = None
    """A wait task's ``wait:`` block, as the definition spells it."""
    wait_with: dict[str, object] = field(default_factory=dict)
    """The keyword arguments of a wait's ``call`` condition (its ``with:``)."""


@dataclass
class Graph:
    """The nodes recorded while a pipeline's body runs."""

    pipeline: str
    nodes: dict[str, Node] = field(default_factory=dict)
    problems: list[Refusal] = field(default_factory=list)

    def add(self, node: Node) -> Result[Any]:
        key = node.key
        if key in self.nodes:
            # Calling one task twice makes two nodes: the second is ``key_2`` and so on.
            n = 2
            while f"{key}_{n}" in self.nodes:
                n += 1
            if node.options.name is not None:
                self.problems.append(
                    Refusal(
                        node.file,
                        node.line,
                        f"two tasks are named {key!r} in pipeline {self.pipeline!r}",
                        f"tasks.{key}",
                    )
                )
            key = f"{key}_{n}"
            node.key = key
        self.nodes[key] = node
        return Result(key)


_building: list[Graph] = []
#: Set while ``veritask apply`` imports a pipeline module: a task called then is refused.
_importing: list[str] = []


@contextmanager
def importing(module: str) -> Iterator[None]:
    """Refuse task calls outside a pipeline while ``module`` is imported to be compiled."""
    _importing.append(module)
    try:
        yield
    finally:
        _importing.pop()


def _caller() -> FrameType | None:
    """The first frame outside this module: the user's line a refusal names."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__") == __name__:
        frame = frame.f_back
    return frame


def current_graph(what: str) -> tuple[Graph, FrameType | None]:
    """The graph being built, or a refusal: ``what`` was called outside a pipeline."""
    frame = _caller()
    if not _building:
        raise refuse(
            f"{what} was called outside a pipeline: a task runs on a worker, never when a "
            "module is imported; call it inside a function decorated with @pipeline",
            frame,
        )
    return _building[-1], frame


# -- tasks ---------------------------------------------------------------------------------


class Task(Generic[P, R]):
    """A Python function the worker runs as a ``call: module:function`` task. Calling it
    inside a pipeline adds it to the graph; its type stays the function's, so a pipeline
    module is checked by mypy like the function it wraps. Called anywhere else (the worker, a
    test), it is the function; but a module that calls one at import is refused at apply."""

    def __init__(
        self, function: Callable[P, R], options: Options, extra: Options | None = None
    ) -> None:
        self.function = function
        self.defaults = options
        self.extra = extra or Options()
        self.__name__ = getattr(function, "__name__", "task")
        self.__doc__ = function.__doc__
        self.__wrapped__ = function

    @property
    def target(self) -> str:
        """``module:function``, what the worker imports."""
        return f"{self.function.__module__}:{self.function.__qualname__}"

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        if not _building and not _importing:
            # On a worker, in a test or in plain Python: the function itself.
            return self.function(*args, **kwargs)
        return self._call(self.extra, args, kwargs)

    def _call(
        self,
        options: Options,
        args: tuple[object, ...],
        kwargs: dict[str, Any],
        called_at: FrameType | None = None,
    ) -> R:
        graph, frame = current_graph(f"task {self.__name__!r}")
        frame = called_at or frame
        file = frame.f_code.co_filename if frame else "<unknown>"
        line = frame.f_lineno if frame else 0
        try:
            bound = inspect.signature(self.function).bind(*args, **kwargs)
        except TypeError as exc:
            raise refuse(f"task {self.__name__!r}: {exc}", frame) from None
        chosen = self.defaults.over(options)
        node = Node(
            key=chosen.name or self.__name__,
            options=chosen,
            file=file,
            line=line,
            call=self.target,
            arguments=dict(bound.arguments),
        )
        return cast(R, graph.add(node))

    def options(
        self,
        *,
        name: str | None = None,
        after: Sequence[object] = (),
        trigger_rule: TriggerRuleName | None = None,
        role: Role | None = None,
        decides_run: bool | None = None,
        skip_exit_code: int | None = None,
        queue: str | None = None,
        executor: str | None = None,
        requires_commit: bool | None = None,
        retry: Retry | None = None,
        timeout: Duration | None = None,
        lease: Duration | None = None,
        evidence_window: Duration | None = None,
        cancel_window: Duration | None = None,
        on_unknown: OnUnknown | None = None,
        env: Mapping[str, EnvValue] | None = None,
        max_map: int | None = None,
        pool: str | None = None,
        pool_slots: int | None = None,
        priority: int | None = None,
        log_limit: Size | None = None,
    ) -> Task[P, R]:
        """This task with fields set for one call: ``load.options(after=[files])(path)``;
        ``max_map`` bounds a ``.map`` (default 1,024 items)."""
        extra = Options(
            name,
            tuple(after),
            trigger_rule,
            role,
            decides_run,
            skip_exit_code,
            queue,
            executor,
            requires_commit,
            retry,
            timeout,
            lease,
            evidence_window,
            cancel_window,
            on_unknown,
            env,
            max_map,
            pool,
            pool_slots,
            priority,
            log_limit,
        )
        return Task(self.function, self.defaults, self.extra.over(extra))

    def after(self, *upstream: object) -> Task[P, R]:
        """This task, run after ``upstream`` (results of earlier calls, or task keys)."""
        return self.options(after=upstream)

    def map(self, items: Iterable[Any], /, **kwargs: Any) -> list[R]:
        """One instance of this task per item of an upstream task's output, decided when the
        run gets there: ``counts = load.map(files)``. Each instance gets its item as the
        function's first argument not given in ``kwargs``; the result, passed on
        (``report(counts)``), is the instances' outputs as a list in item order.

        Outside a pipeline, the function called once per item."""
        if not _building and not _importing:
            first = self._mapped_parameter(kwargs, None)
            plain = cast(Callable[..., R], self.function)
            return [plain(**{first: item, **kwargs}) for item in items]
        graph, frame = current_graph(f"task {self.__name__!r}")
        if not isinstance(items, Result):
            raise refuse(
                f"task {self.__name__!r}: .map over {items!r}, which is not an upstream task's "
                "output; map over the result of a task called earlier in the pipeline "
                "(files = list_files(); load.map(files)), or call the task once per item known "
                "now",
                frame,
            )
        first = self._mapped_parameter(kwargs, frame)
        result = cast(Result[R], self._call(self.extra, (), {first: MapItem(), **kwargs}, frame))
        graph.nodes[result.key].map_over = items.key
        return cast(list[R], result)

    def _mapped_parameter(self, kwargs: Mapping[str, object], frame: FrameType | None) -> str:
        for name in inspect.signature(self.function).parameters:
            if name not in kwargs:
                return name
        raise refuse(
            f"task {self.__name__!r}: .map gives each instance its item as the first argument "
            "not passed by name, and every argument is passed by name",
            frame,
        )


def _check_importable(function: Callable[..., object], frame: FrameType | None) -> None:
    name = getattr(function, "__qualname__", repr(function))
    where = frame
    code = getattr(function, "__code__", None)
    problem = None
    if getattr(function, "__name__", "") == "<lambda>":
        problem = "a lambda cannot be a task: the worker imports a task by module and name"
    elif "<locals>" in name:
        problem = (
            f"{name} is defined inside a function: the worker imports a task by module and "
            "name, so define it at the top level of a module"
        )
    elif getattr(function, "__module__", None) in (None, "__main__"):
        problem = (
            f"{name} is defined in __main__: the worker imports a task by module name; "
            "apply the module with `veritask apply -f FILE.py` or `-m package.module`"
        )
    if problem is None:
        return
    if code is not None:
        raise PipelineError([Refusal(code.co_filename, code.co_firstlineno, problem)])
    raise refuse(problem, where)


@overload
def task(function: Callable[P, R], /) -> Task[P, R]: ...


@overload
def task(
    *,
    name: str | None = None,
    trigger_rule: TriggerRuleName | None = None,
    role: Role | None = None,
    decides_run: bool | None = None,
    skip_exit_code: int | None = None,
    queue: str | None = None,
    executor: str | None = None,
    requires_commit: bool | None = None,
    retry: Retry | None = None,
    timeout: Duration | None = None,
    lease: Duration | None = None,
    evidence_window: Duration | None = None,
    cancel_window: Duration | None = None,
    on_unknown: OnUnknown | None = None,
    env: Mapping[str, EnvValue] | None = None,
    pool: str | None = None,
    pool_slots: int | None = None,
    priority: int | None = None,
    log_limit: Size | None = None,
) -> Callable[[Callable[P, R]], Task[P, R]]: ...


def task(
    function: Callable[P, R] | None = None,
    /,
    *,
    name: str | None = None,
    trigger_rule: TriggerRuleName | None = None,
    role: Role | None = None,
    decides_run: bool | None = None,
    skip_exit_code: int | None = None,
    queue: str | None = None,
    executor: str | None = None,
    requires_commit: bool | None = None,
    retry: Retry | None = None,
    timeout: Duration | None = None,
    lease: Duration | None = None,
    evidence_window: Duration | None = None,
    cancel_window: Duration | None = None,
    on_unknown: OnUnknown | None = None,
    env: Mapping[str, EnvValue] | None = None,
    pool: str | None = None,
    pool_slots: int | None = None,
    priority: int | None = None,
    log_limit: Size | None = None,
) -> Task[P, R] | Callable[[Callable[P, R]], Task[P, R]]:
    """Make a top-level function a task: ``@task`` or ``@task(retry=Retry(max_retries=3))``."""
    options = Options(
        name,
        (),
        trigger_rule,
        role,
        decides_run,
        skip_exit_code,
        queue,
        executor,
        requires_commit,
        retry,
        timeout,
        lease,
        evidence_window,
        cancel_window,
        on_unknown,
        env,
        pool=pool,
        pool_slots=pool_slots,
        priority=priority,
        log_limit=log_limit,
    )
    frame = _caller()

    def decorate(fn: Callable[P, R]) -> Task[P, R]:
        _check_importable(fn, frame)
        return Task(fn, options)

    if function is not None:
        return decorate(function)
    return decorate


def shell(
    command: str,
    *,
    name: str,
    after: Sequence[object] = (),
    trigger_rule: TriggerRuleName | None = None,
    role: Role | None = None,
    decides_run: bool | None = None,
    skip_exit_code: int | None = None,
    queue: str | None = None,
    executor: str | None = None,
    requires_commit: bool | None = None,
    retry: Retry | None = None,
    timeout: Duration | None = None,
    lease: Duration | None = None,
    evidence_window: Duration | None = None,
    cancel_window: Duration | None = None,
    on_unknown: OnUnknown | None = None,
    env: Mapping[str, EnvValue] | None = None,
    pool: str | None = None,
    pool_slots: int | None = None,
    priority: int | None = None,
    log_limit: Size | None = None,
) -> Result[None]:
    """A ``run:`` task (``/bin/sh -c``), inside a pipeline."""
    graph, frame = current_graph(f"shell task {name!r}")
    options = Options(
        name,
        tuple(after),
        trigger_rule,
        role,
        decides_run,
        skip_exit_code,
        queue,
        executor,
        requires_commit,
        retry,
        timeout,
        lease,
        evidence_window,
        cancel_window,
        on_unknown,
        env,
        pool=pool,
        pool_slots=pool_slots,
        priority=priority,
        log_limit=log_limit,
    )
    node = Node(name, options, *_place(frame), run=command)
    return cast(Result[None], graph.add(node))


def sql(
    statement: str,
    *,
    name: str,
    connection: str,
    after: Sequence[object] = (),
    trigger_rule: TriggerRuleName | None = None,
    role: Role | None = None,
    queue: str | None = None,
    executor: str | None = None,
    retry: Retry | None = None,
    timeout: Duration | None = None,
    lease: Duration | None = None,
    evidence_window: Duration | None = None,
    cancel_window: Duration | None = None,
    on_unknown: OnUnknown | None = None,
    pool: str | None = None,
    pool_slots: int | None = None,
    priority: int | None = None,
) -> Result[None]:
    """A ``sql:`` task: one statement run inside the server ``connection`` names."""
    graph, frame = current_graph(f"sql task {name!r}")
    options = Options(
        name=name,
        after=tuple(after),
        trigger_rule=trigger_rule,
        role=role,
        queue=queue,
        executor=executor,
        retry=retry,
        timeout=timeout,
        lease=lease,
        evidence_window=evidence_window,
        cancel_window=cancel_window,
        on_unknown=on_unknown,
        pool=pool,
        pool_slots=pool_slots,
        priority=priority,
    )
    node = Node(name, options, *_place(frame), sql=statement, connection=connection)
    return cast(Result[None], graph.add(node))


def wait(
    *,
    name: str,
    path: str | None = None,
    sql: str | None = None,
    connection: str | None = None,
    http: str | None = None,
    call: str | Task[..., Any] | None = None,
    with_: Mapping[str, object] | None = None,
    every: Duration | None = None,
    timeout: Duration | None = None,
    on_timeout: Literal["fail", "skip"] | None = None,
    expected: Duration | None = None,
    after: Sequence[object] = (),
    trigger_rule: TriggerRuleName | None = None,
    retry: Retry | None = None,
    lease: Duration | None = None,
    priority: int | None = None,
) -> Result[None]:
    """A ``wait:`` task: the scheduler checks one condition (``path``, ``sql`` with
    ``connection``, ``http`` or ``call``) every ``every`` until it holds; it holds no slot."""
    graph, frame = current_graph(f"wait task {name!r}")
    block: dict[str, str | int | float] = {}
    conditions = {"path": path, "sql": sql, "http": http}
    block.update({key: value for key, value in conditions.items() if value is not None})
    if call is not None:
        block["call"] = call.target if isinstance(call, Task) else call
    for key, value in (
        ("connection", connection),
        ("every", every),
        ("timeout", timeout),
        ("on_timeout", on_timeout),
        ("expected", expected),
    ):
        if value is not None:
            block[key] = value
    options = Options(
        name=name,
        after=tuple(after),
        trigger_rule=trigger_rule,
        retry=retry,
        lease=lease,
        priority=priority,
    )
    node = Node(name, options, *_place(frame), wait=block, wait_with=dict(with_ or {}))
    return cast(Result[None], graph.add(node))


def _place(frame: FrameType | None) -> tuple[str, int]:
    return (frame.f_code.co_filename, frame.f_lineno) if frame else ("<unknown>", 0)


# -- pipelines -----------------------------------------------------------------------------


class Pipeline:
    """A function whose body wires tasks; it compiles to one definition."""

    def __init__(
        self,
        function: Callable[..., object],
        *,
        name: str | None,
        fields: dict[str, object],
    ) -> None:
        self.function = function
        self.name = name or function.__name__
        self.fields = fields
        code = function.__code__
        self.file = code.co_filename
        self.line = code.co_firstlineno
        self.module = function.__module__

    def build(self) -> Graph:
        """Run the body once with parameters standing for their values; the graph it wires."""
        graph = Graph(self.name)
        arguments = {name: ParamRef(name) for name in inspect.signature(self.function).parameters}
        _building.append(graph)
        try:
            with _only_tasks(self):
                self.function(**arguments)
        finally:
            _building.pop()
        return graph

    def __call__(self, *args: object, **kwargs: object) -> None:
        raise refuse(
            f"pipeline {self.name!r} was called: a pipeline is applied "
            "(`veritask apply -f FILE.py`), not called",
            _caller(),
        )


def pipeline(
    *,
    name: str | None = None,
    description: str | None = None,
    owner: str | None = None,
    schedule: Cron | None = None,
    concurrency: Concurrency | None = None,
    defaults: Defaults | None = None,
    publish: Publish | None = None,
    wait_for: Sequence[WaitFor] = (),
    trigger: OnPublished | None = None,
    expected_finish: Duration | None = None,
    queue: str | None = None,
    env: Mapping[str, EnvValue] | None = None,
    priority: int | None = None,
    alert_on_failure: bool | None = None,
) -> Callable[[Callable[..., object]], Pipeline]:
    """Make a function a pipeline: its arguments are the parameters, its body the graph."""
    fields: dict[str, object] = {
        "description": description,
        "owner": owner,
        "schedule": schedule,
        "concurrency": concurrency,
        "defaults": defaults,
        "publish": publish,
        "wait_for": tuple(wait_for),
        "trigger": trigger,
        "expected_finish": expected_finish,
        "queue": queue,
        "env": env,
        "priority": priority,
        "alert_on_failure": alert_on_failure,
    }

    def decorate(function: Callable[..., object]) -> Pipeline:
        return Pipeline(function, name=name, fields=fields)

    return decorate


def is_json(value: object) -> bool:
    """Whether ``value`` is a JSON value (parameters inside it are allowed)."""
    if value is None or isinstance(value, str | bool | int | ParamRef):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list | tuple):
        return all(is_json(item) for item in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and is_json(v) for k, v in value.items())
    return False


_COMPREHENSIONS = frozenset({"<listcomp>", "<setcomp>", "<dictcomp>", "<genexpr>"})


@contextmanager
def _only_tasks(owner: Pipeline) -> Iterator[None]:
    """Refuse a call from the pipeline's body to a Python function that is not a task: the
    body only wires tasks, and a helper run at compile time would do its work on the machine
    that applies, not on a worker."""
    body = owner.function.__code__
    # A comprehension in the body is the body too (it runs as a frame of its own).
    inner: set[int] = set()
    found: list[Refusal] = []

    def profile(frame: FrameType, event: str, _arg: object) -> None:
        caller = frame.f_back
        if event != "call" or caller is None or found:
            return
        if caller.f_code is not body and id(caller) not in inner:
            return
        if frame.f_code.co_name in _COMPREHENSIONS:
            inner.add(id(frame))
            return
        module = str(frame.f_globals.get("__name__", ""))
        top = module.partition(".")[0]
        if top == "veritask" or top in sys.stdlib_module_names:
            return
        found.append(
            Refusal(
                caller.f_code.co_filename,
                caller.f_lineno,
                f"pipeline {owner.name!r} calls {frame.f_code.co_name!r}, which is not a task: "
                "a pipeline's body only wires tasks; decorate it with @task, or call it "
                "inside a task",
            )
        )

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield
    finally:
        sys.setprofile(previous)
    if found:
        raise PipelineError(found)
