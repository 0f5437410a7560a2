"""Reading a definition's ``parameters`` (short and long forms), and checking that the
placeholders of its commands and statements stand where a value stays data.

These run inside :mod:`veritask.definitions.parse`'s one pass: each problem is recorded with
its field and line on the parse's :class:`~veritask.definitions.reader.Reader`.
"""

from __future__ import annotations

from collections.abc import Mapping

from veritask.core import problems
from veritask.core.jsontypes import JSONValue
from veritask.definitions import placeholders, source
from veritask.definitions.model import PublishSpec, TaskSpec
from veritask.definitions.parameters import (
    FIELDS,
    MARKERS,
    Parameter,
    ParameterType,
    name_problem,
    value_problem,
)
from veritask.definitions.placeholders import OUTPUTS, PARAMS, Where
from veritask.definitions.reader import Reader, entry_line, is_null, kind
from veritask.definitions.source import Entry, Map, Scalar, Seq, Value


def read_parameters(reader: Reader, entry: Entry | None) -> dict[str, Parameter]:
    """``parameters``: name -> a default (the short form) or a mapping that declares the
    parameter (``type``, ``default``, ``enum``/``choices``, ``raw``, ``description``)."""
    if entry is None or is_null(entry):
        return {}
    if not isinstance(entry.value, Map):
        reader.add(
            "parameters",
            entry.value.line,
            problems.EXPECTED_MAPPING.format(kind=kind(entry.value)),
        )
        return {}
    found: dict[str, Parameter] = {}
    for item in entry.value.entries:
        value = item.value
        bad_name = name_problem(str(item.key))
        if bad_name is not None:
            reader.add(f"parameters.{str(item.key)[:128]}", item.key_line, bad_name)
            continue
        if isinstance(value, Map) and any(value.get(marker) for marker in MARKERS):
            declared = _declaration(reader, f"parameters.{item.key}", value, item.key_line)
            if declared is not None:
                found[item.key] = declared
        else:
            found[item.key] = Parameter(default=_json(source.plain(value)))
    return found


def _declaration(reader: Reader, path: str, value: Map, line: int | None) -> Parameter | None:
    since = len(reader.problems)
    f = reader.fields(value, path, FIELDS, line=line)
    if f is None:
        return None
    kind_entry = f.get("type")
    type_ = None
    if kind_entry is not None and not is_null(kind_entry):
        type_ = reader.choice(kind_entry, f"{path}.type", ParameterType, ParameterType.STRING)
    if "enum" in f and "choices" in f:
        reader.add(f"{path}.choices", entry_line(f["choices"]), problems.ENUM_AND_CHOICES.format())
    choices_name = "choices" if "choices" in f else "enum"
    choices = _choices(reader, f.get(choices_name), f"{path}.{choices_name}")
    raw = reader.boolean(f.get("raw"), f"{path}.raw", False)
    description = reader.text(f.get("description"), f"{path}.description") or ""
    default_entry = f.get("default")
    has_default = default_entry is not None and not is_null(default_entry)
    default: JSONValue = None
    if has_default and default_entry is not None:
        default = _json(source.plain(default_entry.value))
    if len(reader.problems) > since:
        return None
    parameter = Parameter(default, has_default, type_, choices, raw, description)
    if has_default:
        checked = value_problem(parameter, default)
        if isinstance(checked, str):
            reader.add(f"{path}.default", entry_line(default_entry), checked)
            return None
        parameter = Parameter(checked[0], True, type_, choices, raw, description)
    return parameter


def _choices(reader: Reader, entry: Entry | None, path: str) -> tuple[JSONValue, ...]:
    if entry is None or is_null(entry):
        return ()
    items = reader.items(entry, path)
    if isinstance(entry.value, Seq) and not items:
        reader.add(path, entry.value.line, problems.NO_CHOICES.format())
    choices: list[JSONValue] = []
    for i, item in enumerate(items):
        if isinstance(item, Scalar) and item.value is not None:
            choices.append(item.value)
        else:
            reader.add(f"{path}[{i}]", item.line, problems.CHOICE_NOT_PLAIN.format(kind=kind(item)))
    return tuple(choices)


def check_scheduled_defaults(
    reader: Reader, entry: Entry | None, parameters: Mapping[str, Parameter]
) -> None:
    """A scheduled definition gives every parameter a default: nobody triggers its runs."""
    if entry is None or not isinstance(entry.value, Map):
        return
    for item in entry.value.entries:
        parameter = parameters.get(item.key)
        if parameter is not None and not parameter.has_default:
            reader.add(
                f"parameters.{item.key}", item.key_line, problems.SCHEDULED_NEEDS_DEFAULT.format()
            )


def check_placeholders(
    reader: Reader,
    tree: Value,
    tasks: Mapping[str, TaskSpec],
    publish: PublishSpec | None,
    parameters: Mapping[str, Parameter],
) -> None:
    """Refuse a placeholder of a value that is not raw where it would not stay data: inside
    quotes of a command or a statement, or in a statement PostgreSQL cannot prepare."""
    raw = {f"{PARAMS}{name}" for name, p in parameters.items() if p.raw}
    known = _Known(parameters)
    written = _tasks_written(tree)
    for key, task in tasks.items():
        line = _Lines(written.get(key))
        if task.run is not None:
            known.check(reader, f"tasks.{key}.run", task.run, line("run"), sql=False)
            _check_shell(reader, f"tasks.{key}.run", task.run, raw, line("run"))
        if task.sql is not None:
            known.check(reader, f"tasks.{key}.sql", task.sql, line("sql"), sql=True)
            _check_sql(reader, f"tasks.{key}.sql", task.sql, raw, line("sql"))
            _check_no_outputs(reader, f"tasks.{key}.sql", task.sql, line("sql"))
        if task.wait is not None:
            where = f"tasks.{key}.wait.{task.wait.kind}"
            is_sql = task.wait.kind == "sql"
            known.check(reader, where, task.wait.target, line("wait"), sql=is_sql or None)
            if is_sql:
                _check_sql(reader, where, task.wait.target, raw, line("wait"))
            target_line = _wait_target_line(written.get(key), task.wait.kind) or line("wait")
            if task.wait.kind == "http":
                _check_wait_url(reader, where, task.wait.target, target_line)
            elif task.wait.kind == "path":
                _check_wait_path(reader, where, task.wait.target, target_line)
            _check_upstream(reader, where, task.wait.target, line("wait"), task)
        for name, value in task.with_.items():
            for text in placeholders.strings_in(value):
                known.check(reader, f"tasks.{key}.with.{name}", text, line("with"), sql=None)
                _check_upstream(reader, f"tasks.{key}.with.{name}", text, line("with"), task)
        if task.run is not None:
            _check_upstream(reader, f"tasks.{key}.run", task.run, line("run"), task)
        if task.map_over is not None:
            over = "{{ " + OUTPUTS + task.map_over + " }}"
            _check_upstream(reader, f"tasks.{key}.map.over", over, line("map"), task)
        else:
            _check_unmapped(reader, key, task, line)
    if publish is not None:
        publish_entry = tree.get("publish") if isinstance(tree, Map) else None
        at = entry_line(publish_entry)
        for i, check in enumerate(publish.checks):
            if check.run is not None:
                known.check(reader, f"publish.checks[{i}].run", check.run, at, sql=False)
                _check_shell(reader, f"publish.checks[{i}].run", check.run, raw, at)
                _check_no_outputs(reader, f"publish.checks[{i}].run", check.run, at)
        if publish.commit.run is not None:
            known.check(reader, "publish.commit.run", publish.commit.run, at, sql=False)
            _check_shell(reader, "publish.commit.run", publish.commit.run, raw, at)
            _check_no_outputs(reader, "publish.commit.run", publish.commit.run, at)


def _check_upstream(reader: Reader, path: str, text: str, line: int | None, task: TaskSpec) -> None:
    """A task reads only the outputs of the tasks it runs after (``after``)."""
    for up in placeholders.output_tasks(text):
        if up not in task.after:
            reader.add(
                path,
                line,
                problems.OUTPUT_NOT_UPSTREAM.format(name=_shown(OUTPUTS + up), task=up),
            )


def _check_unmapped(reader: Reader, key: str, task: TaskSpec, line: _Lines) -> None:
    """``{{ map.item }}`` and ``{{ map.index }}`` belong to mapped tasks."""
    fields = [("run", task.run or "")]
    if task.wait is not None:
        fields.append((f"wait.{task.wait.kind}", task.wait.target))
    fields += [
        (f"with.{name}", text)
        for name, v in task.with_.items()
        for text in placeholders.strings_in(v)
    ]
    for field, text in fields:
        for match in placeholders.PLACEHOLDER.finditer(text):
            if match.group(1) in placeholders.MAP_NAMES:
                reader.add(
                    f"tasks.{key}.{field}",
                    line(field.partition(".")[0]),
                    problems.MAP_PLACEHOLDER_UNMAPPED.format(name=_shown(match.group(1))),
                )


def _check_no_outputs(reader: Reader, path: str, text: str, line: int | None) -> None:
    """Outputs go to the tasks of the graph that run a command or a callable."""
    for up in placeholders.output_tasks(text):
        reader.add(path, line, problems.OUTPUT_NOT_HERE.format(name=_shown(OUTPUTS + up)))


class _Known:
    """The template variables a run of the definition defines: the built-ins and its
    parameters (any ``params.NAME`` when it declares none: a trigger may give any)."""

    def __init__(self, parameters: Mapping[str, Parameter]) -> None:
        self.open = not parameters
        ordered = [*placeholders.BUILT_INS, *(f"{PARAMS}{name}" for name in parameters)]
        self.names = frozenset(ordered)
        self.shown = ", ".join(_shown(name) for name in ordered)

    def defines(self, name: str) -> bool:
        return (
            name in self.names
            or placeholders.output_task(name) is not None
            or name in placeholders.MAP_NAMES
            or (self.open and placeholders.is_template_name(name))
        )

    def check(
        self, reader: Reader, path: str, text: str, line: int | None, *, sql: bool | None
    ) -> None:
        """Refuse each ``{{ name }}`` no run defines (``sql`` None: text with no quoting)."""
        if sql is None:
            written = [
                placeholders.Place(m.group(1), m.start(), m.end(), Where.CODE)
                for m in placeholders.PLACEHOLDER.finditer(text)
            ]
        else:
            written = placeholders.written_names(text, sql=sql)
        for place in written:
            if not self.defines(place.name):
                at = line if sql is None else _at(line, text, place)
                reader.add(
                    path,
                    at,
                    problems.UNKNOWN_TEMPLATE_NAME.format(
                        name=_shown(place.name), known=self.shown
                    ),
                )


def _check_shell(reader: Reader, path: str, text: str, raw: set[str], line: int | None) -> None:
    for place in placeholders.shell_places(text):
        if place.where is Where.QUOTED and place.name not in raw:
            reader.add(
                path,
                _at(line, text, place),
                problems.PLACEHOLDER_IN_SHELL_QUOTES.format(name=_shown(place.name)),
            )


def _check_sql(reader: Reader, path: str, text: str, raw: set[str], line: int | None) -> None:
    second = placeholders.second_statement(text)
    if second is not None:
        at = _line_at(line, text, second)
        shown = text.count("\n", 0, second) + 1
        reader.add(path, at, problems.SQL_ONE_STATEMENT.format(line=at or shown))
    bound = []
    for place in placeholders.sql_places(text):
        if place.name in raw or place.where is Where.COMMENT:
            continue
        if place.where is Where.QUOTED:
            reader.add(
                path,
                _at(line, text, place),
                problems.PLACEHOLDER_IN_SQL_QUOTES.format(name=_shown(place.name)),
            )
        else:
            bound.append(place)
    if bound and placeholders.first_keyword(text) not in placeholders.PREPARABLE:
        reader.add(
            path,
            _at(line, text, bound[0]),
            problems.SQL_CANNOT_BIND.format(name=_shown(bound[0].name)),
        )


def _check_wait_url(reader: Reader, path: str, url: str, line: int | None) -> None:
    """A value fills a path segment or a query value; the scheme, host and port are the
    definition's alone (raw parameters too: a wait's URL is never pasted)."""
    for match in placeholders.PLACEHOLDER.finditer(url):
        if not placeholders.is_template_name(match.group(1)):
            continue
        part = placeholders.url_part(url, match.start())
        if part in (placeholders.UrlPart.PATH, placeholders.UrlPart.QUERY_VALUE):
            continue
        phrase = (
            problems.WAIT_URL_PLACEHOLDER_IN_QUERY_NAME
            if part is placeholders.UrlPart.QUERY_NAME
            else problems.WAIT_URL_PLACEHOLDER_IN_ORIGIN
        )
        reader.add(path, line, phrase.format(name=_shown(match.group(1))))


def _check_wait_path(reader: Reader, path: str, text: str, line: int | None) -> None:
    """A value is a name under the absolute directory written before the first placeholder."""
    root = placeholders.path_root(text)
    if root is not None and not root.startswith("/"):
        first = next(
            m
            for m in placeholders.PLACEHOLDER.finditer(text)
            if placeholders.is_template_name(m.group(1))
        )
        reader.add(path, line, problems.WAIT_PATH_NO_ROOT.format(name=_shown(first.group(1))))


def _wait_target_line(task: Value | None, kind: str) -> int | None:
    """The line of a wait's ``path:`` or ``http:`` (its block may span several)."""
    wait = task.get("wait") if isinstance(task, Map) else None
    if wait is None or not isinstance(wait.value, Map):
        return None
    return entry_line(wait.value.get(kind))


def _shown(name: str) -> str:
    return "{{ " + name + " }}"


def _at(line: int | None, text: str, place: placeholders.Place) -> int | None:
    """The line of the placeholder when the text is on the field's own line (a multi-line
    block starts on the next one)."""
    return _line_at(line, text, place.start)


def _line_at(line: int | None, text: str, offset: int) -> int | None:
    if line is None:
        return None
    return line + text.count("\n", 0, offset) + (1 if "\n" in text.rstrip() else 0)


def _tasks_written(tree: Value) -> dict[str, Value]:
    """Each task's node in the source by key, read once: a lookup per task in a definition of
    thousands of tasks (a list, when stored) would make checking it quadratic."""
    tasks = tree.get("tasks") if isinstance(tree, Map) else None
    if tasks is not None and isinstance(tasks.value, Map):
        return {entry.key: entry.value for entry in reversed(tasks.value.entries)}
    found: dict[str, Value] = {}
    if tasks is not None and isinstance(tasks.value, Seq):
        for item in tasks.value.items:
            named = item.get("key") if isinstance(item, Map) else None
            key = named.value.value if named and isinstance(named.value, Scalar) else None
            if isinstance(key, str):
                found[key] = item
    return found


class _Lines:
    def __init__(self, task: Value | None) -> None:
        self.task = task

    def __call__(self, name: str) -> int | None:
        if isinstance(self.task, Map):
            return entry_line(self.task.get(name))
        return None


def _json(value: object) -> JSONValue:
    if isinstance(value, dict):
        return {str(k): _json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)
