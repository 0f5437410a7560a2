"""A definition's text as a tree of values that remember their line.

PyYAML's composer gives nodes with marks; this module turns them into :class:`Map`,
:class:`Seq` and :class:`Scalar` with 1-based lines, refusing what JSON cannot hold
(custom tags, binary, NaN) and duplicate keys. A JSON object from the ledger becomes the same
tree with no lines, so one reader checks both.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Final

import yaml
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from veritask.core import problems as wording
from veritask.definitions.errors import Problem

ScalarValue = str | int | float | bool | None


@dataclass(frozen=True)
class Scalar:
    """A string, number, boolean or null."""

    value: ScalarValue
    line: int | None


@dataclass(frozen=True)
class Seq:
    """A list."""

    items: tuple[Value, ...]
    line: int | None


@dataclass(frozen=True)
class Entry:
    """One key of a mapping, the line of the key, and its value."""

    key: str
    key_line: int | None
    value: Value


@dataclass(frozen=True)
class Map:
    """A mapping, keys in the order written."""

    entries: tuple[Entry, ...]
    line: int | None

    def get(self, key: str) -> Entry | None:
        """The entry for ``key``, if present (the first, if the key is written twice)."""
        return self._by_key.get(key)

    @functools.cached_property
    def _by_key(self) -> dict[str, Entry]:
        # A definition of thousands of tasks looks each one up: a scan per lookup would
        # make reading it quadratic.
        found: dict[str, Entry] = {}
        for entry in self.entries:
            found.setdefault(entry.key, entry)
        return found


Value = Scalar | Seq | Map

_TIMESTAMP = "tag:yaml.org,2002:timestamp"
#: The tags YAML gives plain JSON values; any other (``!!python/…``, ``!!set``, ``!foo``) is
#: refused, on a scalar, a list or a mapping alike.
_STANDARD_TAGS = frozenset(
    f"tag:yaml.org,2002:{name}"
    for name in ("map", "seq", "str", "int", "float", "bool", "null", "timestamp", "merge")
)
#: Aliases may repeat a subtree many times over (the "billion laughs"); stop early.
_MAX_NODES = 100_000
#: Lists and mappings nested deeper than this are refused before anything walks the tree
#: (every walk of it recurses); no definition needs more than a few levels.
MAX_DEPTH = 64


class _TooDeep(Exception):
    def __init__(self, line: int) -> None:
        self.line = line


class _DepthLimitedLoader(yaml.SafeLoader):
    """PyYAML's safe loader, counting how deep the composer is (it recurses per level)."""

    depth = 0

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                event = self.peek_event()  # type: ignore[no-untyped-call]
                raise _TooDeep(event.start_mark.line + 1)
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


@dataclass(frozen=True)
class _Context:
    constructor: SafeConstructor
    problems: list[Problem]
    budget: list[int]


def from_text(text: str) -> tuple[Value | None, list[Problem]]:
    """Read YAML (JSON is YAML) into a located tree, with every problem found on the way."""
    if text.lstrip().startswith(("{", "[")):
        # JSON cannot hold a raw tab inside a string, so tabs are only indentation; YAML
        # refuses tab indentation, so make it spaces (columns move, lines do not).
        text = text.replace("\t", " ")
    try:
        node = yaml.compose(text, Loader=_DepthLimitedLoader)
    except _TooDeep as exc:
        return None, [Problem("", exc.line, wording.TOO_DEEP.format(limit=MAX_DEPTH))]
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        detail = " ".join(part for part in (exc.context, exc.problem) if part)
        return None, [Problem("", line, wording.INVALID_YAML.format(detail=detail or exc))]
    except yaml.YAMLError as exc:
        return None, [Problem("", None, wording.INVALID_YAML.format(detail=exc))]
    if node is None:
        return None, [Problem("", 1, wording.EMPTY.format())]
    problems: list[Problem] = []
    budget = [_MAX_NODES]
    tree = _convert(node, "", _Context(SafeConstructor(), problems, budget), frozenset())
    if budget[0] < 0:
        return None, [Problem("", None, wording.TOO_LARGE.format(count=_MAX_NODES))]
    return tree, problems


def from_json(value: object, path: str = "") -> tuple[Value, list[Problem]]:
    """Wrap a JSON value (dicts, lists, scalars) in the same tree, without lines."""
    try:
        return _wrap_clean(value), []
    except _Unclean:
        # Only a value with a problem pays for the path of every node, to name where it is.
        problems: list[Problem] = []
        return _wrap(value, path, problems), problems


class _Unclean(Exception):
    """A value :func:`_wrap_clean` cannot wrap without a problem to report."""


_SCALARS: Final = (str, int, float, bool)


def _wrap_clean(value: object) -> Value:
    """:func:`_wrap` for a value without problems (a stored definition: thousands of tasks
    are read back at every start); raises :class:`_Unclean` at the first problem."""
    if isinstance(value, dict):
        entries = []
        for key, item in value.items():
            if not isinstance(key, str):
                raise _Unclean
            entries.append(Entry(key, None, _wrap_clean(item)))
        return Map(tuple(entries), None)
    if isinstance(value, list | tuple):
        return Seq(tuple(_wrap_clean(v) for v in value), None)
    if isinstance(value, float) and not math.isfinite(value):
        raise _Unclean
    if value is None or isinstance(value, _SCALARS):
        return Scalar(value, None)
    raise _Unclean


def _convert(node: Node, path: str, ctx: _Context, seen: frozenset[int]) -> Value:
    line = node.start_mark.line + 1
    problems, constructor = ctx.problems, ctx.constructor
    ctx.budget[0] -= 1
    if ctx.budget[0] < 0:
        return Scalar(None, line)
    if id(node) in seen:
        problems.append(Problem(path, line, wording.ALIAS_LOOP.format()))
        return Scalar(None, line)
    if node.tag not in _STANDARD_TAGS:
        problems.append(Problem(path, line, wording.CUSTOM_TAG.format(tag=_shown_tag(node.tag))))
        return Scalar(None, line)
    if isinstance(node, MappingNode):
        try:
            constructor.flatten_mapping(node)  # applies ``<<`` merge keys
        except ConstructorError as exc:
            problems.append(Problem(path, line, wording.INVALID_MERGE.format(detail=exc.problem)))
            return Map((), line)
        entries: list[Entry] = []
        keys: dict[str, int] = {}
        for key_node, value_node in node.value:
            key_line = key_node.start_mark.line + 1
            if not isinstance(key_node, ScalarNode):
                problems.append(Problem(path, key_line, wording.PLAIN_KEY.format()))
                continue
            key = str(key_node.value)
            child = f"{path}.{key}" if path else key
            if key in keys:
                problems.append(
                    Problem(child, key_line, wording.DUPLICATE_KEY.format(line=keys[key]))
                )
                continue
            keys[key] = key_line
            value = _convert(value_node, child, ctx, seen | {id(node)})
            entries.append(Entry(key, key_line, value))
        return Map(tuple(entries), line)
    if isinstance(node, SequenceNode):
        items = tuple(
            _convert(item, f"{path}[{i}]", ctx, seen | {id(node)})
            for i, item in enumerate(node.value)
        )
        return Seq(items, line)
    if not isinstance(node, ScalarNode):
        problems.append(
            Problem(path, line, wording.UNSUPPORTED_NODE.format(node=type(node).__name__))
        )
        return Scalar(None, line)
    if node.tag == _TIMESTAMP:
        return Scalar(str(node.value), line)  # a date stays the text that was written
    try:
        value = constructor.construct_object(node)
    except ConstructorError as exc:
        problems.append(Problem(path, line, wording.UNSUPPORTED_VALUE.format(detail=exc.problem)))
        return Scalar(None, line)
    if isinstance(value, float) and not math.isfinite(value):
        problems.append(Problem(path, line, wording.NOT_FINITE.format()))
        return Scalar(None, line)
    if value is None or isinstance(value, str | int | float | bool):
        return Scalar(value, line)
    problems.append(Problem(path, line, wording.UNSUPPORTED_TYPE.format(type=type(value).__name__)))
    return Scalar(None, line)


def _shown_tag(tag: str) -> str:
    return "!!" + tag.removeprefix("tag:yaml.org,2002:") if tag.startswith("tag:yaml.org") else tag


def _wrap(value: object, path: str, problems: list[Problem]) -> Value:
    if isinstance(value, dict):
        entries = []
        for key, item in value.items():
            if not isinstance(key, str):
                problems.append(Problem(path, None, wording.KEY_NOT_A_STRING.format(key=key)))
                continue
            child = f"{path}.{key}" if path else key
            entries.append(Entry(key, None, _wrap(item, child, problems)))
        return Map(tuple(entries), None)
    if isinstance(value, list | tuple):
        return Seq(tuple(_wrap(v, f"{path}[{i}]", problems) for i, v in enumerate(value)), None)
    if isinstance(value, float) and not math.isfinite(value):
        problems.append(Problem(path, None, wording.NOT_FINITE.format()))
        return Scalar(None, None)
    if value is None or isinstance(value, str | int | float | bool):
        return Scalar(value, None)
    problems.append(Problem(path, None, wording.UNSUPPORTED_TYPE.format(type=type(value).__name__)))
    return Scalar(None, None)


def plain(value: Value) -> object:
    """The tree as plain JSON values (for ``parameters`` and ``with``)."""
    if isinstance(value, Map):
        return {entry.key: plain(entry.value) for entry in value.entries}
    if isinstance(value, Seq):
        return [plain(item) for item in value.items]
    return value.value
