"""The typed reading of a located tree: each getter returns a value or records a problem
with the field's path and line, so one pass finds every problem."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import timedelta
from enum import StrEnum
from typing import TypeVar

from veritask.core.jsontypes import JSONValue
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
            self.add(path, value.line, f"expected a mapping, got {kind(value)}")
            return None
        allowed = list(known)
        result: dict[str, Entry] = {}
        for entry in value.entries:
            child = f"{path}.{entry.key}" if path else entry.key
            if entry.key not in allowed:
                self.add(
                    child,
                    entry.key_line,
                    f"unknown field {entry.key!r}{hint(entry.key, allowed)}",
                )
                continue
            result[entry.key] = entry
        for name in required:
            if name not in result or is_null(result[name]):
                where = f"{path}.{name}" if path else name
                at = result[name].key_line if name in result else line or value.line
                self.add(where, at, f"the field {name!r} is required")
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
            self.add(path, entry.value.line, f"expected a list, got {kind(entry.value)}")
            return ()
        return entry.value.items

    def text(self, entry: Entry | None, path: str) -> str | None:
        if entry is None or is_null(entry):
            return None
        value = entry.value
        if isinstance(value, Scalar) and isinstance(value.value, str):
            return value.value
        self.add(path, value.line, f"expected a string, got {kind(value)}")
        return None

    def slug(self, entry: Entry | None, path: str, default: str) -> str:
        text = self.text(entry, path)
        if text is None:
            return default
        if not SLUG.fullmatch(text):
            self.add(path, entry_line(entry), slug_message(text, "name"))
        return text

    def boolean(self, entry: Entry | None, path: str, default: bool) -> bool:
        if entry is None or is_null(entry):
            return default
        value = entry.value
        if isinstance(value, Scalar) and isinstance(value.value, bool):
            return value.value
        self.add(path, value.line, f"expected true or false, got {kind(value)}")
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
            self.add(path, value.line, f"expected a whole number, got {kind(value)}")
            return default
        if minimum is not None and number < minimum:
            self.add(path, value.line, f"must be {minimum} or more, got {number}")
            return default
        if maximum is not None and number > maximum:
            self.add(path, value.line, f"must be {maximum} or less, got {number}")
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
            self.add(path, value.line, f"expected a number, got {kind(value)}")
            return default
        if not low <= number <= high:
            self.add(path, value.line, f"must be between {low:g} and {high:g}, got {number}")
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
            self.add(
                path, value.line, f"expected a duration such as 30s or 1h30m, got {kind(value)}"
            )
            return default
        try:
            parsed = durations.parse_duration(value.value)
        except durations.InvalidDuration as exc:
            self.add(path, value.line, str(exc))
            return default
        if positive and parsed <= timedelta(0):
            self.add(path, value.line, "must be longer than 0s")
            return default
        return parsed

    def choice(self, entry: Entry | None, path: str, enum: type[E], default: E) -> E:
        if entry is None or is_null(entry):
            return default
        value = entry.value
        names = [member.value for member in enum]
        if isinstance(value, Scalar) and isinstance(value.value, str):
            if value.value in names:
                return enum(value.value)
            self.add(
                path,
                value.line,
                f"unknown value {value.value!r}{hint(value.value, names)}; "
                f"one of: {', '.join(names)}",
            )
            return default
        self.add(path, value.line, f"expected one of {', '.join(names)}, got {kind(value)}")
        return default

    def json_object(self, entry: Entry | None, path: str) -> dict[str, JSONValue]:
        if entry is None or is_null(entry):
            return {}
        if not isinstance(entry.value, Map):
            self.add(path, entry.value.line, f"expected a mapping, got {kind(entry.value)}")
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
        return "a mapping"
    if isinstance(value, Seq):
        return "a list"
    scalar = value.value
    if scalar is None:
        return "null"
    if isinstance(scalar, bool):
        return f"the boolean {str(scalar).lower()}"
    if isinstance(scalar, int | float):
        return f"the number {scalar}"
    return f"the string {scalar!r}"


def hint(word: str, candidates: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest candidate, or nothing."""
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def slug_message(text: str, what: str) -> str:
    return (
        f"{text!r} is not a valid {what}: use lowercase letters, digits, '_' and '-', "
        "starting with a letter, at most 64 characters"
    )


def _json(value: object) -> JSONValue:
    if isinstance(value, dict):
        return {str(k): _json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)
