"""Where the ``{{ name }}`` placeholders of a ``run:`` command or a ``sql:`` statement stand:
in code, inside quotes, or in a comment.

A value substituted in code stays data (one shell word read from an environment variable, a
bound SQL parameter); inside quotes it could not, so a definition that writes a placeholder
there is refused at apply, and rendering refuses it again. A placeholder in a comment is left
as written. Only the names a run defines are placeholders; any other ``{{ }}`` is text.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum

from veritask.core.jsontypes import JSONValue

#: A name is dotted; the parts after the first may hold ``-`` (``outputs.list-files``: task
#: keys may).
PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_][A-Za-z0-9_-]*)*)\s*\}\}")
BUILT_INS = ("run_id", "logical_time", "logical_date", "ds")
PARAMS = "params."
#: ``outputs.TASK``: the output of an upstream task (docs/definitions.md, "Outputs").
OUTPUTS = "outputs."
#: A mapped task's item and its index (docs/definitions.md, "Mapping").
MAP_NAMES = ("map.item", "map.index")
_TASK_KEY = re.compile(r"[a-z][a-z0-9_-]{0,63}")
#: The statements PostgreSQL can prepare, so bind parameters in (a leading ``(`` or ``WITH``
#: starts one of them).
PREPARABLE = frozenset({"select", "insert", "update", "delete", "merge", "values", "with", "table"})


class Where(StrEnum):
    CODE = "code"
    QUOTED = "quoted"
    COMMENT = "comment"


@dataclass(frozen=True)
class Place:
    """One placeholder: the name it stands for, its span in the text, and its context."""

    name: str
    start: int
    end: int
    where: Where


def is_template_name(name: str) -> bool:
    return (
        name in BUILT_INS
        or (name.startswith(PARAMS) and len(name) > len(PARAMS))
        or output_task(name) is not None
        or name in MAP_NAMES
    )


def output_task(name: str) -> str | None:
    """The task whose output ``outputs.TASK`` names (None for any other name)."""
    if not name.startswith(OUTPUTS):
        return None
    key = name[len(OUTPUTS) :]
    return key if _TASK_KEY.fullmatch(key) else None


def output_tasks(text: str) -> list[str]:
    """The tasks whose outputs a text names, in order, each once (comments included: a
    command that reads the outputs file may name a task there)."""
    found = (output_task(m.group(1)) for m in PLACEHOLDER.finditer(text))
    return list(dict.fromkeys(key for key in found if key is not None))


def line_of(text: str, place: Place) -> int:
    """The 1-based line of the text on which the placeholder stands."""
    return text.count("\n", 0, place.start) + 1


def shell_places(text: str) -> list[Place]:
    """The placeholders of a ``/bin/sh`` command, read the way the shell reads quotes."""
    return list(_places(text, _shell_spans(text)))


def sql_places(text: str) -> list[Place]:
    """The placeholders of a PostgreSQL statement, read the way the server reads quotes."""
    return list(_places(text, _sql_spans(text)))


def written_names(text: str, *, sql: bool) -> list[Place]:
    """Every ``{{ name }}`` written outside a comment, a template variable or not (apply
    refuses the names no run defines: they would stay as written)."""
    spans = _sql_spans(text) if sql else _shell_spans(text)
    found = []
    for match in PLACEHOLDER.finditer(text):
        where = next((kind for start, end, kind in spans if start <= match.start() < end), None)
        if where is not Where.COMMENT:
            found.append(Place(match.group(1), match.start(), match.end(), where or Where.CODE))
    return found


def first_keyword(statement: str) -> str:
    """The statement's first word, lowercase, past comments, blanks and ``(``."""
    position = 0
    for start, end, where in _sql_spans(statement):
        if where is Where.COMMENT:
            if statement[position:start].strip(" \t\r\n("):
                break
            position = end
            continue
        break
    match = re.match(r"[\s(]*([A-Za-z_]+)", statement[position:])
    return match.group(1).lower() if match else ""


def second_statement(statement: str) -> int | None:
    """Where a second statement starts (past a ``;`` outside quotes and comments), or None:
    the server takes one statement per message, with its values bound apart."""
    spans = _sql_spans(statement)
    for match in re.finditer(";", statement):
        if any(start <= match.start() < end for start, end, _ in spans):
            continue
        rest = match.end()
        for start, end, where in spans:
            if end <= rest:
                continue
            if statement[rest:start].strip(" \t\r\n;") or where is not Where.COMMENT:
                break
            rest = end
        tail = statement[rest:]
        if tail.strip(" \t\r\n;"):
            return rest + len(tail) - len(tail.lstrip(" \t\r\n;"))
    return None


class UrlPart(StrEnum):
    """Where in an ``http`` wait's URL a placeholder stands."""

    ORIGIN = "origin"
    """The scheme, user, host or port: the definition's alone."""
    PATH = "path"
    """Inside a path segment: the value is one percent-encoded segment's text."""
    QUERY_NAME = "query name"
    QUERY_VALUE = "query value"
    """After a query parameter's ``=``: the value is percent-encoded."""
    FRAGMENT = "fragment"


def url_part(url: str, offset: int) -> UrlPart:
    """The part of the URL at ``offset`` (a placeholder holds none of ``/?#&=``, so the
    template's own characters tell)."""
    scheme_end = url.find("://")
    if scheme_end < 0 or offset < scheme_end + 3:
        return UrlPart.ORIGIN
    rest = scheme_end + 3
    path_at = min((i for i in (url.find(c, rest) for c in "/?#") if i >= 0), default=len(url))
    if offset < path_at:
        return UrlPart.ORIGIN
    hash_at = url.find("#", rest)
    if 0 <= hash_at < offset:
        return UrlPart.FRAGMENT
    query_at = url.find("?", rest)
    if query_at < 0 or offset < query_at or (0 <= hash_at < query_at):
        return UrlPart.PATH
    pair = max(url.rfind("&", query_at, offset), query_at) + 1
    return UrlPart.QUERY_VALUE if "=" in url[pair:offset] else UrlPart.QUERY_NAME


def url_path(url: str) -> tuple[int, int]:
    """Where the URL's path starts and ends (both ``len(url)`` when it has none)."""
    scheme_end = url.find("://")
    rest = 0 if scheme_end < 0 else scheme_end + 3
    ends = [i for i in (url.find("?", rest), url.find("#", rest)) if i >= 0]
    end = min(ends, default=len(url))
    start = url.find("/", rest, end)
    return (end, end) if start < 0 else (start, end)


def path_root(path: str) -> str | None:
    """The directory a wait's path writes before its first placeholder (``/data/`` of
    ``/data/{{ ds }}/_SUCCESS``); None when the path has no placeholder."""
    first = next((m for m in PLACEHOLDER.finditer(path) if is_template_name(m.group(1))), None)
    if first is None:
        return None
    before = path[: first.start()]
    return before[: before.rfind("/") + 1]


def _places(text: str, spans: list[tuple[int, int, Where]]) -> Iterator[Place]:
    for match in PLACEHOLDER.finditer(text):
        name = match.group(1)
        if not is_template_name(name):
            continue
        where = Where.CODE
        for start, end, kind in spans:
            if start <= match.start() < end:
                where = kind
                break
        yield Place(name, match.start(), match.end(), where)


def _shell_spans(text: str) -> list[tuple[int, int, Where]]:
    """Quoted and commented spans of a shell command (a ``$(…)`` inside double quotes counts
    as quoted: refusing it there is the safe side)."""
    spans: list[tuple[int, int, Where]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
        elif c == "'":
            end = text.find("'", i + 1)
            end = n if end < 0 else end + 1
            spans.append((i, end, Where.QUOTED))
            i = end
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            spans.append((i, min(j + 1, n), Where.QUOTED))
            i = j + 1
        elif c == "#" and (i == 0 or text[i - 1] in " \t\n;&|()<>"):
            end = text.find("\n", i)
            end = n if end < 0 else end
            spans.append((i, end, Where.COMMENT))
            i = end
        else:
            i += 1
    return spans


_DOLLAR_TAG = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)?\$")


def _sql_spans(text: str) -> list[tuple[int, int, Where]]:
    """Strings, quoted names, dollar-quoted bodies and comments of a PostgreSQL statement."""
    spans: list[tuple[int, int, Where]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "'":
            escapes = i > 0 and text[i - 1] in "eE" and (i < 2 or not _word(text[i - 2]))
            j = i + 1
            while j < n:
                if escapes and text[j] == "\\":
                    j += 2
                elif text[j] == "'":
                    if j + 1 < n and text[j + 1] == "'":
                        j += 2
                    else:
                        break
                else:
                    j += 1
            spans.append((i, min(j + 1, n), Where.QUOTED))
            i = j + 1
        elif c == '"':
            j = i + 1
            while j < n and not (text[j] == '"' and text[j + 1 : j + 2] != '"'):
                j += 2 if text[j] == '"' else 1
            spans.append((i, min(j + 1, n), Where.QUOTED))
            i = j + 1
        elif c == "$" and (i == 0 or not _word(text[i - 1])) and _DOLLAR_TAG.match(text, i):
            tag = _DOLLAR_TAG.match(text, i)
            assert tag is not None
            close = text.find(tag.group(0), tag.end())
            end = n if close < 0 else close + len(tag.group(0))
            spans.append((i, end, Where.QUOTED))
            i = end
        elif text.startswith("--", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            spans.append((i, end, Where.COMMENT))
            i = end
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            spans.append((i, j, Where.COMMENT))
            i = j
        else:
            i += 1
    return spans


def _word(c: str) -> bool:
    return c.isalnum() or c == "_"


def strings_in(value: JSONValue) -> list[str]:
    """Every string inside a JSON value (a ``with:`` value's texts), depth first."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [text for item in value for text in strings_in(item)]
    if isinstance(value, dict):
        return [text for item in value.values() for text in strings_in(item)]
    return []
