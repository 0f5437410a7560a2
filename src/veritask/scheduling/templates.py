"""``{{ ... }}`` in task commands, statements and parameters: values that stay data.

Only names the run defines are substituted (``logical_date``, ``logical_time``, ``run_id``,
``ds``, ``params.NAME``); anything else is left as written, so a shell ``{{`` never breaks.
No expressions are evaluated, and no value becomes code:

- in ``run:``, a placeholder becomes ``"${VERITASK_…}"``, an environment variable of the task
  that holds the value: the shell expands it as one word and never reads it as code;
- in ``sql:``, a placeholder becomes ``$1``, ``$2``…: the statement is prepared and the values
  are its bound parameters;
- in a wait's ``http`` URL, a value is percent-encoded into a path segment or a query value;
  in its ``path``, a value is one name under the directory written before it;
- in ``with:``, the values are text inside the callable's JSON arguments, except that a
  value that is one placeholder and nothing else, of an upstream output, of the map item or
  of a parameter declared with a ``type``, is that value itself (a list stays a list, an
  ``integer`` parameter an int).

``{{ outputs.TASK }}`` stands for an upstream task's output (its JSON; a string output as its
text); in ``run:`` its variable is ``VERITASK_OUTPUT_TASK``.

A parameter the definition declares ``raw`` is pasted as its text instead, the one way a value
can change a command or a statement (docs/definitions.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import quote, unquote

from veritask.core.jsontypes import JSONValue
from veritask.definitions import placeholders
from veritask.definitions.placeholders import PARAMS, Where

_ENV_OF_BUILT_IN = {
    "map.item": "VERITASK_MAP_ITEM",
    "map.index": "VERITASK_MAP_INDEX",
    "run_id": "VERITASK_RUN_ID",
    "logical_time": "VERITASK_LOGICAL_TIME",
    "logical_date": "VERITASK_LOGICAL_DATE",
    "ds": "VERITASK_LOGICAL_DATE",
}
PARAM_ENV_PREFIX = "VERITASK_PARAM_"
OUTPUT_ENV_PREFIX = "VERITASK_OUTPUT_"


@dataclass(frozen=True)
class Values:
    """What a run's placeholders stand for: template name -> value, and the names pasted as
    text (``params.NAME`` of the parameters declared ``raw``)."""

    values: Mapping[str, JSONValue]
    raw: frozenset[str] = frozenset()
    typed: frozenset[str] = frozenset()
    """``params.NAME`` of the parameters declared with a type: checked, so kept as values."""

    def text(self, name: str) -> str:
        return text_of(self.values[name])


def context(
    *,
    run_id: str,
    logical_time: datetime | None,
    params: Mapping[str, JSONValue],
    raw: Collection[str] = (),
    typed: Collection[str] = (),
    outputs: Mapping[str, JSONValue] | None = None,
    map_item: tuple[int, JSONValue] | None = None,
) -> Values:
    """The values of a run; ``raw`` names the parameters declared raw, ``typed`` those
    declared with a type; ``outputs`` are the upstream outputs an attempt reads, by task key."""
    values: dict[str, JSONValue] = {"run_id": run_id}
    if logical_time is not None:
        values["logical_time"] = logical_time.isoformat()
        values["logical_date"] = logical_time.date().isoformat()
        values["ds"] = values["logical_date"]
    for name, value in params.items():
        values[f"{PARAMS}{name}"] = value
    for key, value in (outputs or {}).items():
        values[f"{placeholders.OUTPUTS}{key}"] = value
    if map_item is not None:
        values["map.index"], values["map.item"] = map_item
    return Values(
        values,
        frozenset(f"{PARAMS}{name}" for name in raw if name in params),
        frozenset(f"{PARAMS}{name}" for name in typed if name in params),
    )


def text_of(value: JSONValue) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def env_name(name: str) -> str:
    """The environment variable that holds a template value in a ``run:`` task."""
    built_in = _ENV_OF_BUILT_IN.get(name)
    if built_in is not None:
        return built_in
    task = placeholders.output_task(name)
    if task is not None:
        return OUTPUT_ENV_PREFIX + task.replace("-", "_")
    return PARAM_ENV_PREFIX + name.removeprefix(PARAMS).replace(".", "__")


def render(text: str, values: Values) -> str:
    """Plain substitution, for text that is data already (a callable's ``with`` values)."""
    return placeholders.PLACEHOLDER.sub(
        lambda m: values.text(m.group(1)) if m.group(1) in values.values else m.group(0), text
    )


def render_json(value: JSONValue, values: Values) -> JSONValue:
    if isinstance(value, str):
        whole = placeholders.PLACEHOLDER.fullmatch(value.strip())
        name = whole.group(1) if whole is not None else None
        if name is not None and name in values.values and _whole_value(name, values):
            return values.values[name]
        return render(value, values)
    if isinstance(value, list):
        return [render_json(item, values) for item in value]
    if isinstance(value, dict):
        return {key: render_json(item, values) for key, item in value.items()}
    return value


def _whole_value(name: str, values: Values) -> bool:
    """Names whose value a lone placeholder in ``with`` gives as itself, not as text."""
    return placeholders.output_task(name) is not None or name == "map.item" or name in values.typed


def render_shell(command: str, values: Values) -> tuple[str, dict[str, str]]:
    """The command with each placeholder as its environment variable, and those variables
    (every value of the run, so a here-document can read ``$VERITASK_PARAM_NAME`` too).

    Raises ValueError for a placeholder written inside quotes (apply refuses those).
    """
    env: dict[str, str] = {}
    owners: dict[str, str] = {}
    for name in values.values:
        variable = env_name(name)
        if owners.setdefault(variable, name) != name and variable not in _ENV_OF_BUILT_IN.values():
            raise ValueError(f"{name} and {owners[variable]} would share {variable}")
        env[variable] = values.text(name)
    pieces: list[str] = []
    position = 0
    for place in placeholders.shell_places(command):
        if place.name not in values.values or place.where is Where.COMMENT:
            continue
        pieces.append(command[position : place.start])
        if place.name in values.raw:
            pieces.append(values.text(place.name))
        elif place.where is Where.QUOTED:
            raise ValueError(f"{{{{ {place.name} }}}} is written inside quotes in the command")
        else:
            pieces.append('"${' + env_name(place.name) + '}"')
        position = place.end
    pieces.append(command[position:])
    return "".join(pieces), env


def render_sql(statement: str, values: Values) -> tuple[str, tuple[JSONValue, ...]]:
    """The statement with ``$1``, ``$2``… where values go, and those values in order (one per
    name, however often it is written); raw parameters are pasted as text.

    Raises ValueError for a placeholder inside a quoted string or name, or in a statement
    PostgreSQL cannot prepare (apply refuses both).
    """
    numbers: dict[str, int] = {}
    pieces: list[str] = []
    position = 0
    for place in placeholders.sql_places(statement):
        if place.name not in values.values or place.where is Where.COMMENT:
            continue
        pieces.append(statement[position : place.start])
        if place.name in values.raw:
            pieces.append(values.text(place.name))
        elif place.where is Where.QUOTED:
            raise ValueError(f"{{{{ {place.name} }}}} is written inside quotes in the statement")
        else:
            number = numbers.setdefault(place.name, len(numbers) + 1)
            pieces.append(f"${number}")
        position = place.end
    pieces.append(statement[position:])
    if numbers and placeholders.first_keyword(statement) not in placeholders.PREPARABLE:
        raise ValueError("values are bound only in SELECT, INSERT, UPDATE, DELETE, MERGE, VALUES")
    return "".join(pieces), tuple(values.values[name] for name in numbers)


def render_url(url: str, values: Values) -> str:
    """An ``http`` wait's URL with each placeholder's value percent-encoded in a path segment
    or a query value: the value cannot add a segment, a parameter, a host or a fragment, and
    no segment it fills may be ``.`` or ``..``. Raw parameters are encoded too.

    Raises ValueError for a placeholder anywhere else (apply refuses those) or a value that
    would make a segment ``.`` or ``..``.
    """
    rendered = _render_encoded(url, values, placeholders.url_part, _url_piece)
    start, end = placeholders.url_path(url)
    written_start, written_end = placeholders.url_path(rendered)
    _check_segments(url[start:end], rendered[written_start:written_end], unquote)
    return rendered


def render_path(path: str, values: Values) -> str:
    """A ``path`` wait's path with each value as a name inside one segment, under the
    directory written before the first placeholder: a value holds no ``/`` and no segment it
    fills is empty, ``.`` or ``..``. Raw parameters are held to it too.

    Raises ValueError for a path whose placeholders stand under no absolute directory (apply
    refuses it) and for a value that would leave that directory.
    """
    root = placeholders.path_root(path)
    if root is None:
        return path
    if not root.startswith("/"):
        raise ValueError("a wait's path starts with the absolute directory it looks under")
    rendered = _render_encoded(path, values, lambda _text, _at: None, _path_piece)
    _check_segments(path, rendered, lambda segment: segment)
    return rendered


def _render_encoded(
    text: str,
    values: Values,
    part_at: Callable[[str, int], placeholders.UrlPart | None],
    piece: Callable[[str, str, placeholders.UrlPart | None], str],
) -> str:
    pieces: list[str] = []
    position = 0
    for match in placeholders.PLACEHOLDER.finditer(text):
        name = match.group(1)
        if name not in values.values:
            continue
        pieces.append(text[position : match.start()])
        pieces.append(piece(name, values.text(name), part_at(text, match.start())))
        position = match.end()
    pieces.append(text[position:])
    return "".join(pieces)


_URL_PARTS: dict[placeholders.UrlPart | None, str] = {
    placeholders.UrlPart.ORIGIN: "scheme, host or port",
    placeholders.UrlPart.QUERY_NAME: "query parameter name",
}


def _url_piece(name: str, value: str, part: placeholders.UrlPart | None) -> str:
    if part not in (placeholders.UrlPart.PATH, placeholders.UrlPart.QUERY_VALUE):
        raise ValueError(
            f"{{{{ {name} }}}} stands in the URL's {_URL_PARTS.get(part, str(part))}: a value may "
            "fill only a path segment or a query value"
        )
    return quote(value, safe="")


def _path_piece(name: str, value: str, _part: placeholders.UrlPart | None) -> str:
    if "/" in value or "\0" in value:
        raise ValueError(
            f"the value of {{{{ {name} }}}} holds '/' or NUL: a wait's path takes a value as "
            "a name under the directory it looks in"
        )
    return value


def _check_segments(written: str, rendered: str, decode: Callable[[str], str]) -> None:
    """Each segment a value filled is a name: not empty, not ``.`` nor ``..``."""
    for template, segment in zip(written.split("/"), rendered.split("/"), strict=True):
        filled = placeholders.PLACEHOLDER.search(template) is not None
        if filled and decode(segment) in ("", ".", ".."):
            raise ValueError(
                f"a value makes the segment {template!r} {segment!r}: a value fills a name, "
                "never a step up or an empty one"
            )
