"""A pipeline module compiled to definitions: the same spec a YAML file gives, through the same
checks (``veritask.definitions.parse``), so one definition has one content hash whichever way
it was written.

:func:`load_file` and :func:`load_module` import a module and compile every pipeline it
declares; a refusal (:class:`PipelineError`) names the Python file and line of each problem,
and nothing is compiled when any pipeline is refused.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from veritask.core.jsontypes import JSONObject, JSONValue
from veritask.definitions import parse, placeholders
from veritask.definitions.model import Definition
from veritask.execution import engines
from veritask.pipelines.api import (
    Check,
    Cron,
    Defaults,
    EnvValue,
    Graph,
    MapItem,
    Node,
    OnPublished,
    Options,
    ParamRef,
    ParamSpecification,
    Pipeline,
    PipelineError,
    Publish,
    Refusal,
    Result,
    Retry,
    Secret,
    Step,
    Task,
    WaitFor,
    importing,
    is_json,
)


@dataclass(frozen=True)
class Compiled:
    """One pipeline as a definition: the spec (what YAML would say), the parsed definition and
    the source text that is applied and stored."""

    pipeline: Pipeline
    spec: JSONObject
    definition: Definition

    @property
    def content_hash(self) -> str:
        return parse.content_hash(self.definition)

    def source(self) -> str:
        """The spec as YAML, headed by where it came from (the server parses this text)."""
        head = f"# compiled from {self.pipeline.module} ({Path(self.pipeline.file).name})\n"
        return head + to_yaml(self.spec)


#: libyaml's emitter when PyYAML was built with it: the same text, five times as fast, which a
#: pipeline of a thousand tasks notices.
_DUMPER: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def to_yaml(spec: JSONValue) -> str:
    return yaml.dump(spec, Dumper=_DUMPER, sort_keys=False, allow_unicode=True, width=100)


def compile_pipeline(pipeline: Pipeline) -> Compiled:
    """The definition ``pipeline`` declares; :class:`PipelineError` if it is refused."""
    graph = pipeline.build()
    spec, places = _Spec(pipeline, graph).build()
    # Every refusal at once: the body's, then the definition checks' on what it could write
    # (leaving out those about a field the body's refusals already name).
    problems = list(graph.problems)
    named = {p.field for p in problems if p.field}
    try:
        # An executor no engine has is refused here, at its Python line; whether the server
        # configures it is the server's to say.
        definition = parse.definition_from_json(spec, executors=engines.unknown_problem)
    except parse.DefinitionError as exc:
        problems.extend(
            Refusal(*_place(places, p.field, pipeline), p.message, p.field)
            for p in exc.problems
            if not any(p.field == f or p.field.startswith(f"{f}.") for f in named)
        )
    if problems:
        raise PipelineError(problems)
    return Compiled(pipeline, spec, definition)


def pipelines_of(module: ModuleType) -> list[Pipeline]:
    """The pipelines a module declares at its top level, in the order they are written."""
    found = [value for value in vars(module).values() if isinstance(value, Pipeline)]
    return sorted(found, key=lambda p: (p.file, p.line))


def compile_module(module: ModuleType) -> list[Compiled]:
    """Every pipeline of ``module``, compiled; all refusals of all of them at once."""
    pipelines = pipelines_of(module)
    if not pipelines:
        file = getattr(module, "__file__", None) or module.__name__
        raise PipelineError([Refusal(file, None, "the module declares no @pipeline")])
    compiled: list[Compiled] = []
    problems: list[Refusal] = []
    names: dict[str, Pipeline] = {}
    for pipeline in pipelines:
        if pipeline.name in names:
            problems.append(
                Refusal(pipeline.file, pipeline.line, f"two pipelines are named {pipeline.name!r}")
            )
        names[pipeline.name] = pipeline
        try:
            compiled.append(compile_pipeline(pipeline))
        except PipelineError as exc:
            problems.extend(exc.problems)
    if problems:
        raise PipelineError(problems)
    return compiled


def load_module(name: str) -> list[Compiled]:
    """Import the module ``name`` (``package.module``, on ``sys.path``) and compile it."""
    return compile_module(_imported(name, name))


def load_file(path: Path) -> list[Compiled]:
    """Import the file at ``path`` under its import path (the folder above the top package
    goes first on ``sys.path``, as the worker's PYTHONPATH must hold it) and compile it."""
    path = path.resolve()
    name, root = import_path(path)
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    return compile_module(_imported(name, str(path)))


def import_path(path: Path) -> tuple[str, Path]:
    """The dotted module name of a ``.py`` file, and the folder it is importable from: every
    parent folder with an ``__init__.py`` is a package."""
    parts = [path.stem] if path.name != "__init__.py" else []
    folder = path.parent
    while (folder / "__init__.py").exists():
        parts.insert(0, folder.name)
        folder = folder.parent
    return ".".join(parts), folder


def _imported(name: str, file: str) -> ModuleType:
    """Import ``name`` with task calls refused; an import that fails is a refusal too."""
    try:
        with importing(name):
            module = importlib.import_module(name)
    except PipelineError:
        raise
    except ImportError as exc:
        raise PipelineError([Refusal(file, None, f"cannot import {name!r}: {exc}")]) from None
    except Exception as exc:
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        raise PipelineError(
            [Refusal(frame.filename, frame.lineno, f"importing {name!r} raised {exc!r}")]
        ) from None
    return module


#: The parameter type a pipeline argument's annotation gives when it has no default.
_TYPES: dict[object, str] = {
    str: "string",
    "str": "string",
    int: "integer",
    "int": "integer",
    float: "number",
    "float": "number",
    bool: "boolean",
    "bool": "boolean",
}
_UNTYPED = (
    "parameter {name!r} has no default and no type: annotate it (str, int, float, bool) or "
    "declare it with Param(type=...)"
)


def _place(places: dict[str, tuple[str, int]], field: str, pipeline: Pipeline) -> tuple[str, int]:
    """The Python line behind a definition field: its longest recorded prefix."""
    best = ""
    for known in places:
        if (field == known or field.startswith((known + ".", known + "["))) and len(known) > len(
            best
        ):
            best = known
    return places.get(best, (pipeline.file, pipeline.line))


class _Spec:
    """Writes the spec of one pipeline, remembering the Python line of each field."""

    def __init__(self, pipeline: Pipeline, graph: Graph) -> None:
        self.pipeline = pipeline
        self.graph = graph
        self.places: dict[str, tuple[str, int]] = {}

    def refuse(self, node: Node, field: str, message: str) -> None:
        self.graph.problems.append(Refusal(node.file, node.line, message, field))

    def build(self) -> tuple[JSONObject, dict[str, tuple[str, int]]]:
        p = self.pipeline
        here = (p.file, p.line)
        self.places[""] = here
        spec: JSONObject = {"name": p.name}
        f = p.fields
        for key in ("description", "owner"):
            if f[key] is not None:
                spec[key] = str(f[key])
        schedule = f["schedule"]
        if isinstance(schedule, Cron):
            spec["schedule"] = _schedule(schedule)
        if f["concurrency"] is not None:
            spec["concurrency"] = str(f["concurrency"])
        defaults = f["defaults"]
        if isinstance(defaults, Defaults):
            found = _policy(defaults)
            if defaults.log_limit is not None:
                found["log_limit"] = defaults.log_limit
            spec["defaults"] = found
        parameters = self.parameters()
        if parameters:
            spec["parameters"] = parameters
        spec["tasks"] = {key: self.task(node) for key, node in self.graph.nodes.items()}
        publish = f["publish"]
        if isinstance(publish, Publish):
            spec["publish"] = _publish(publish)
        wait_for = f["wait_for"]
        if isinstance(wait_for, tuple) and wait_for:
            spec["wait_for"] = [_wait(w) for w in wait_for if isinstance(w, WaitFor)]
        trigger = f["trigger"]
        if isinstance(trigger, OnPublished):
            spec["trigger"] = {"on_published": list(trigger.definitions), "when": trigger.when}
        for key in ("expected_finish", "queue"):
            if f[key] is not None:
                spec[key] = _duration_or_text(f[key])
        env = f["env"]
        if isinstance(env, dict) and env:
            spec["env"] = _env(env)
        if isinstance(f["priority"], int):
            spec["priority"] = f["priority"]
        if isinstance(f["alert_on_failure"], bool):
            spec["alert_on_failure"] = f["alert_on_failure"]
        return spec, self.places

    def parameters(self) -> JSONObject:
        result: JSONObject = {}
        p = self.pipeline
        for name, param in inspect.signature(p.function).parameters.items():
            self.places[f"parameters.{name}"] = (p.file, p.line)
            default = param.default
            if isinstance(default, ParamSpecification):
                declared: JSONObject = {}
                kind = default.type or _TYPES.get(param.annotation)
                if kind is not None:
                    declared["type"] = kind
                if not default.required:
                    declared["default"] = _plain(default.default)
                if default.enum is not None:
                    declared["enum"] = list(default.enum)
                if default.raw:
                    declared["raw"] = True
                if default.description:
                    declared["description"] = default.description
                if not declared.keys() & {"type", "default", "enum", "raw"}:
                    self.graph.problems.append(
                        Refusal(p.file, p.line, _UNTYPED.format(name=name), f"parameters.{name}")
                    )
                result[name] = declared
            elif default is inspect.Parameter.empty:
                kind = _TYPES.get(param.annotation)
                if kind is None:
                    self.graph.problems.append(
                        Refusal(p.file, p.line, _UNTYPED.format(name=name), f"parameters.{name}")
                    )
                    continue
                result[name] = {"type": kind}
            else:
                if not is_json(default):
                    self.graph.problems.append(
                        Refusal(
                            p.file,
                            p.line,
                            f"the default of parameter {name!r} is not a JSON value",
                            f"parameters.{name}",
                        )
                    )
                kind = _TYPES.get(param.annotation)
                # Annotated, it is declared of that type: a trigger's value is checked, and
                # the task's function receives it as that type.
                result[name] = (
                    _plain(default) if kind is None else {"type": kind, "default": _plain(default)}
                )
        return result

    def task(self, node: Node) -> JSONObject:
        path = f"tasks.{node.key}"
        self.places[path] = (node.file, node.line)
        data: JSONObject = {}
        if node.run is not None:
            data["run"] = node.run
        if node.sql is not None:
            data["sql"] = node.sql
            data["connection"] = node.connection
        if node.wait is not None:
            block: JSONObject = dict(node.wait.items())
            data["wait"] = block
            given: JSONObject = {}
            for name, value in node.wait_with.items():
                given[name] = self.argument(node, f"{path}.with.{name}", value)
            if given:
                data["with"] = given
        if node.call is not None:
            data["call"] = node.call
            arguments: JSONObject = {}
            for name, value in node.arguments.items():
                arguments[name] = self.argument(node, f"{path}.with.{name}", value)
            if arguments:
                data["with"] = arguments
        o = node.options
        after = [self.upstream(node, up) for up in o.after]
        if node.map_over is not None:
            after.append(node.map_over)
            mapping: JSONObject = {"over": "{{ outputs." + node.map_over + " }}"}
            if o.max_map is not None:
                mapping["max_map"] = o.max_map
            data["map"] = mapping
            self.places[f"{path}.map"] = (node.file, node.line)
        elif o.max_map is not None:
            self.refuse(node, f"{path}.map", "max_map is for a mapped task: call it with .map")
        for value in node.arguments.values():
            after.extend(up.key for up in _results(value) if up.key not in after)
        # A result written into a command (an f-string) is an edge too.
        named = placeholders.output_tasks(node.run or "")
        after.extend(key for key in named if key in self.graph.nodes and key not in after)
        if after:
            data["after"] = list(dict.fromkeys(after))
        for key in (
            "trigger_rule",
            "role",
            "decides_run",
            "skip_exit_code",
            "queue",
            "executor",
            "requires_commit",
            "pool",
            "pool_slots",
            "priority",
            "log_limit",
        ):
            value = getattr(o, key)
            if value is not None:
                data[key] = value
        data.update(_policy(o))
        if o.env:
            data["env"] = _env(o.env)
        return data

    def upstream(self, node: Node, up: object) -> str:
        if isinstance(up, Result):
            return up.key
        if isinstance(up, str):
            return up
        self.refuse(node, f"tasks.{node.key}.after", f"{up!r} is not a task's result or key")
        return str(up)

    def argument(self, node: Node, field: str, value: object) -> JSONValue:
        """A constant, a parameter, or an upstream task's result (``{{ outputs.KEY }}``, the
        output itself when the worker calls the task), anywhere inside a JSON value."""
        if not is_json(_without_results(value)):
            self.refuse(
                node,
                field,
                f"{value!r} is neither a JSON value nor an upstream task's result: a task's "
                "arguments are sent to the worker as JSON; pass constants, parameters or "
                "the results of tasks called earlier in the pipeline",
            )
            return None
        return _plain(value)


def _results(value: object) -> list[Result[Any]]:
    if isinstance(value, Result):
        return [value]
    if isinstance(value, list | tuple):
        return [r for item in value for r in _results(item)]
    if isinstance(value, dict):
        return [r for item in value.values() for r in _results(item)]
    return []


def _without_results(value: object) -> object:
    if isinstance(value, Result | MapItem):
        return None
    if isinstance(value, list | tuple):
        return [_without_results(item) for item in value]
    if isinstance(value, dict):
        return {k: _without_results(v) for k, v in value.items()}
    return value


def _plain(value: object) -> JSONValue:
    if isinstance(value, ParamRef | Result | MapItem):
        return str(value)
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if value is None or isinstance(value, str | bool | int | float):
        return value
    return str(value)


def _duration_or_text(value: object) -> JSONValue:
    return value if isinstance(value, int | float) and not isinstance(value, bool) else str(value)


def _schedule(schedule: Cron) -> JSONObject:
    data: JSONObject = {"cron": schedule.expression}
    if schedule.timezone is not None:
        data["timezone"] = schedule.timezone
    if schedule.catchup is not None:
        catchup: JSONObject = {"enabled": schedule.catchup.enabled}
        if schedule.catchup.max_runs is not None:
            catchup["max_runs"] = schedule.catchup.max_runs
        data["catchup"] = catchup
    return data


def _retry(retry: Retry) -> JSONObject:
    return {
        f.name: _duration_or_text(v) if f.name in ("delay", "max_delay") else _plain(v)
        for f in fields(retry)
        if (v := getattr(retry, f.name)) is not None
    }


def _policy(source: Defaults | Options) -> JSONObject:
    data: JSONObject = {}
    if source.retry is not None:
        data["retry"] = _retry(source.retry)
    for key in ("timeout", "lease", "evidence_window", "cancel_window"):
        value = getattr(source, key)
        if value is not None:
            data[key] = _duration_or_text(value)
    if source.on_unknown is not None:
        data["on_unknown"] = source.on_unknown
    return data


def _step(step: Step) -> JSONObject:
    data: JSONObject = {}
    if step.run is not None:
        data["run"] = step.run
    if isinstance(step.call, Task):
        data["call"] = step.call.target
    elif step.call is not None:
        data["call"] = step.call
    return data


def _publish(publish: Publish) -> JSONObject:
    data: JSONObject = {}
    if publish.checks:
        data["checks"] = [
            {"name": c.name, **_step(c)} for c in publish.checks if isinstance(c, Check)
        ]
    data["commit"] = _step(publish.commit)
    return data


def _wait(wait: WaitFor) -> JSONObject:
    data: JSONObject = {"definition": wait.definition}
    if wait.timeout is not None:
        data["timeout"] = _duration_or_text(wait.timeout)
    if wait.lag is not None:
        data["lag"] = _duration_or_text(wait.lag)
    return data


def _env(env: Mapping[str, EnvValue]) -> JSONObject:
    return {str(k): {"secret": v.name} if isinstance(v, Secret) else str(v) for k, v in env.items()}
