"""The typed reading of a located tree: each getter returns a value or records a problem
with the field's path and line, so one pass finds every problem."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import timedelta
from enum import StrEnum
from typing import TypeVar

from veritask.core import problems, sizes
from veritask.core.jsontypes import JSONValue
from veritask.core.phrases import Phrase
from veritask.definitions import durations, source
from veritask.definitions.errors import DefinitionError, Problem
from veritask.definitions.model import SLUG
from veritask.definitions.source import Entry, Map, Scalar, Seq, Value

E = TypeVar("E", bound=StrEnum)
T = TypeVar("T")


@dataclass
class Reader:
    """Collects problems while it reads values out of a tree."""

    problems: list[Problem]

    # -- typed values ----------------------------------------------------------------------

    def fields(
        self,
        value: Value,
        path: str,
        known: Iterable[str],
        *,
        required: Iterable[str] = (),
        line: int | None = None,
    ) -> dict[str, Entry] | None:
        """The entries of a mapping, refusing unknown keys (with the closest known one) and
        naming missing required ones."""
        if not isinstance(value, Map):
            self.add(path, value.line, problems.EXPECTED_MAPPING.format(kind=kind(value)))
            return None
        allowed = list(known)
        result: dict[str, Entry] = {}
        for entry in value.entries:
            child = f"{path}.{entry.key}" if path else entry.key
            if entry.key not in allowed:
                close = closest(entry.key, allowed)
                self.add(
                    child,
                    entry.key_line,
                    problems.UNKNOWN_FIELD.format(name=entry.key)
                    if close is None
                    else problems.UNKNOWN_FIELD_HINT.format(name=entry.key, close=close),
                )
                continue
            result[entry.key] = entry
        for name in required:
            if name not in result or is_null(result[name]):
                where = f"{path}.{name}" if path else name
                at = result[name].key_line if name in result else line or value.line
                self.add(where, at, problems.REQUIRED.format(name=name))
        return result

    def fields_of(
        self,
        entry: Entry | None,
        path: str,
        known: Iterable[str],
        *,
        required: Iterable[str] = (),
    ) -> dict[str, Entry] | None:
        """:meth:`fields` of an optional entry (absent or null: None)."""
        if entry is None or is_null(entry):
            return None
        return self.fields(entry.value, path, known, required=required, line=entry.key_line)

    def items(self, entry: Entry | None, path: str) -> tuple[Value, ...]:
        if entry is None or is_null(entry):
            return ()
        if not isinstance(entry.value, Seq):
            self.add(path, entry.value.line, problems.EXPECTED_LIST.format(kind=kind(entry.value)))
            return ()
        return entry.value.items

    def text(self, entry: Entry | None, path: str) -> str | None:
        if entry is None or is_null(entry):
            return None
        value = entry.value
        if isinstance(value, Scalar) and isinstance(value.value, str):
            return value.value
        self.add(path, value.line, problems.EXPECTED_STRING.format(kind=kind(value)))
        return None

    def slug(self, entry: Entry | None, path: str, default: str) -> str:
        text = self.text(entry, path)
        if text is None:
            return default
        if not SLUG.fullmatch(text):
            self.add(path, entry_line(entry), slug_message(text, problems.NOT_A_NAME))
        return text

    def boolean(self, entry: Entry | None, path: str, default: bool) -> bool:
        if entry is None or is_null(entry):
            return default
        value = entry.value
        if isinstance(value, Scalar) and isinstance(value.value, bool):
            return value.value
        self.add(path, value.line, problems.EXPECTED_BOOLEAN.format(kind=kind(value)))
        return default

    def integer(
        self,
        entry: Entry | None,
        path: str,
        default: int | None,
        *,
        minimum: int | None = None,
        maximum: int | None = None,
    ) -> int | None:
        if entry is None or is_null(entry):
            return default
        value = entry.value
        number = value.value if isinstance(value, Scalar) else None
        if isinstance(number, bool) or not isinstance(number, int):
            self.add(path, value.line, problems.EXPECTED_WHOLE_NUMBER.format(kind=kind(value)))
            return default
        if minimum is not None and number < minimum:
            self.add(path, value.line, problems.AT_LEAST.format(minimum=minimum, number=number))
            return default
        if maximum is not None and number > maximum:
            self.add(path, value.line, problems.AT_MOST.format(maximum=maximum, number=number))
            return default
        return number

    def number(
        self, entry: Entry | None, path: str, default: float, low: float, high: float
    ) -> float:
        if entry is None or is_null(entry):
            return default
        value = entry.value
        number = value.value if isinstance(value, Scalar) else None
        if isinstance(number, bool) or not isinstance(number, int | float):
            self.add(path, value.line, problems.EXPECTED_NUMBER.format(kind=kind(value)))
            return default
        if not low <= number <= high:
            self.add(path, value.line, problems.BETWEEN.format(low=low, high=high, number=number))
            return default
        return float(number)

    def duration(
        self,
        entry: Entry | None,
        path: str,
        default: timedelta | None,
        *,
        positive: bool = False,
    ) -> timedelta | None:
        if entry is None or is_null(entry):
            return default
        value = entry.value
        if not isinstance(value, Scalar):
            self.add(path, value.line, problems.EXPECTED_DURATION.format(kind=kind(value)))
            return default
        try:
            parsed = durations.parse_duration(value.value)
        except durations.InvalidDuration as exc:
            self.add(path, value.line, str(exc))
            return default
        if positive and parsed <= timedelta(0):
            self.add(path, value.line, problems.LONGER_THAN_ZERO.format())
            return default
        return parsed

    def log_limit(self, entry: Entry | None, path: str, default: int | None) -> int | None:
        """A log limit: ``200MiB``, ``1GB`` or a number of bytes (``definitions.sizes``)."""
        if entry is None or is_null(entry):
            return default
        value = entry.value
        try:
            return sizes.parse_log_limit(value.value if isinstance(value, Scalar) else kind(value))
        except sizes.InvalidSize as exc:
            self.add(path, value.line, str(exc))
            return default

    def choice(self, entry: Entry | None, path: str, enum: type[E], default: E) -> E:
        if entry is None or is_null(entry):
            return default
        value = entry.value
        names = [member.value for member in enum]
        if isinstance(value, Scalar) and isinstance(value.value, str):
            if value.value in names:
                return enum(value.value)
            close = closest(value.value, names)
            listed = ", ".join(names)
            self.add(
                path,
                value.line,
                problems.UNKNOWN_VALUE.format(value=value.value, names=listed)
                if close is None
                else problems.UNKNOWN_VALUE_HINT.format(
                    value=value.value, close=close, names=listed
                ),
            )
            return default
        self.add(
            path,
            value.line,
            problems.EXPECTED_ONE_OF.format(names=", ".join(names), kind=kind(value)),
        )
        return default

    def json_object(self, entry: Entry | None, path: str) -> dict[str, JSONValue]:
        if entry is None or is_null(entry):
            return {}
        if not isinstance(entry.value, Map):
            self.add(
                path, entry.value.line, problems.EXPECTED_MAPPING.format(kind=kind(entry.value))
            )
            return {}
        result: dict[str, JSONValue] = {}
        for item in entry.value.entries:
            result[item.key] = _json(source.plain(item.value))
        return result

    # -- collecting ------------------------------------------------------------------------

    def add(self, path: str, line: int | None, message: str) -> None:
        self.problems.append(Problem(path, line, message))

    def check(self, entry: Entry | None, path: str, problem: str | None) -> None:
        if problem is not None:
            self.add(path, entry_line(entry), problem)

    def attempt(self, build: Callable[[], T], line: int | None, since: int = 0) -> T | None:
        """Build a model value unless problems were found since ``since``; the value's own
        checks become problems at ``line``."""
        if len(self.problems) > since:
            return None
        try:
            return build()
        except DefinitionError as exc:
            self.problems.extend(replace(p, line=p.line or line) for p in exc.problems)
            return None


def entry_line(entry: Entry | None) -> int | None:
    """The line of an entry's value (or of its key when the value has none)."""
    if entry is None:
        return None
    return entry.value.line or entry.key_line


def is_null(entry: Entry) -> bool:
    return isinstance(entry.value, Scalar) and entry.value.value is None


def kind(value: Value) -> str:
    if isinstance(value, Map):
        return problems.A_MAPPING.format()
    if isinstance(value, Seq):
        return problems.A_LIST.format()
    scalar = value.value
    if scalar is None:
        return problems.NULL.format()
    if isinstance(scalar, bool):
        return problems.THE_BOOLEAN.format(value=str(scalar).lower())
    if isinstance(scalar, int | float):
        return problems.THE_NUMBER.format(value=scalar)
    return problems.THE_STRING.format(value=scalar)


def closest(word: str, candidates: Iterable[str]) -> str | None:
    """The candidate closest to ``word``, if one is close enough to suggest."""
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return close[0] if close else None


def slug_message(text: str, phrase: Phrase) -> str:
    """Why ``text`` is not a name: ``phrase`` is the kind of name (a name, a task key…)."""
    return phrase.format(text=text)


def _json(value: object) -> JSONValue:
    if isinstance(value, dict):
        return {str(k): _json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)
