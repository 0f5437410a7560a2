"""A definition's run parameters: what each one holds, and the check of the values a trigger
gives (docs/definitions.md, "Parameters").

A parameter is data. Its value reaches a ``run:`` command as one shell word read from an
environment variable and a ``sql:`` statement as a bound parameter, unless the definition
declares it ``raw``: then its text is pasted into the command or the statement as written.

The short form ``parameters: {day: "2024-01-01"}`` is a parameter of any JSON value with that
default (:attr:`Parameter.type` None); it is stored, and hashed, exactly as before.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime
from enum import StrEnum

from veritask.core import problems as wording
from veritask.core import refusals
from veritask.core.jsontypes import JSONObject, JSONValue
from veritask.core.phrases import Phrase
from veritask.definitions.errors import Problem

#: The keys of a parameter written in the long form; a mapping with one of the
#: :data:`MARKERS` is a declaration, any other mapping is the default of a short-form one.
FIELDS = ("type", "default", "enum", "choices", "raw", "description")
MARKERS = ("type", "default", "enum", "choices", "raw")

#: A parameter's name: what ``{{ params.NAME }}`` writes and an environment variable's name
#: can hold (``VERITASK_PARAM_NAME``, a dot written ``__``), so that no name can break a
#: task's start or its command.
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
NAME_MAX_CHARS = 128

_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_INTEGER = re.compile(r"[+-]?\d{1,30}")


class ParameterType(StrEnum):
    """What a declared parameter's value must be."""

    STRING = "string"
    INTEGER = "integer"
    NUMBER = "number"
    BOOLEAN = "boolean"
    DATE = "date"
    """An ISO date, ``2024-01-31``, kept as that text."""
    DATETIME = "datetime"
    """An ISO 8601 date and time, ``2024-01-31T02:00:00+08:00``, kept as that text."""


@dataclass(frozen=True)
class Parameter:
    """One run parameter of a definition."""

    default: JSONValue = None
    has_default: bool = True
    """False: a trigger must give a value (a parameter declared without ``default``)."""
    type: ParameterType | None = None
    """None: any JSON value (the short form, or a long form without ``type``)."""
    choices: tuple[JSONValue, ...] = ()
    """``enum``: the values allowed (empty: any value of the type)."""
    raw: bool = False
    """Pasted as text into ``run:`` and ``sql:`` (dangerous: see docs/definitions.md)."""
    description: str = ""

    @property
    def short(self) -> bool:
        """Whether the short form (the bare default) says all of it."""
        plain_default = not (
            isinstance(self.default, dict) and any(k in MARKERS for k in self.default)
        )
        return (
            self.has_default
            and self.type is None
            and not self.choices
            and not self.raw
            and not self.description
            and plain_default
        )


def to_json(parameters: Mapping[str, Parameter]) -> JSONObject:
    """The parameters as stored: the bare default for a short-form one (as stored before
    parameters had types, so that those definitions keep their content hash)."""
    stored: JSONObject = {}
    for name, parameter in parameters.items():
        if parameter.short:
            stored[name] = parameter.default
            continue
        item: JSONObject = {}
        if parameter.type is not None:
            item["type"] = parameter.type.value
        if parameter.has_default:
            item["default"] = parameter.default
        if parameter.choices:
            item["enum"] = list(parameter.choices)
        if parameter.raw:
            item["raw"] = True
        if parameter.description:
            item["description"] = parameter.description
        stored[name] = item
    return stored


def defaults(parameters: Mapping[str, Parameter]) -> JSONObject:
    """Name -> default, for the parameters that have one."""
    return {name: p.default for name, p in parameters.items() if p.has_default}


def raw_names(parameters: Mapping[str, Parameter]) -> frozenset[str]:
    return frozenset(name for name, p in parameters.items() if p.raw)


def typed_names(parameters: Mapping[str, Parameter]) -> frozenset[str]:
    """The parameters declared with a ``type``: a trigger's value is checked and converted."""
    return frozenset(name for name, p in parameters.items() if p.type is not None)


class InvalidParameters(ValueError):
    """The values a trigger gave were refused; ``problems`` names each (``parameters.rows``)."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__(
            "; ".join(
                refusals.FIELD_PROBLEM.format(field=p.field, problem=p.message) for p in problems
            )
        )


def check_values(
    declared: Mapping[str, Parameter], given: Mapping[str, JSONValue]
) -> dict[str, JSONValue]:
    """The values a trigger gave, each as its parameter's type holds it; raises
    :class:`InvalidParameters` naming every unknown, missing or ill-typed one.

    A definition that declares no parameters takes any (each reaches the templates as data).
    """
    found: list[Problem] = []
    checked: dict[str, JSONValue] = {}
    known = ", ".join(declared)
    for name, value in given.items():
        field = f"parameters.{name[:NAME_MAX_CHARS]}"
        bad_name = name_problem(name)
        if bad_name is not None:
            found.append(Problem(field, None, bad_name))
            continue
        parameter = declared.get(name)
        if parameter is None:
            if declared:
                found.append(Problem(field, None, refusals.UNKNOWN_PARAMETER.format(known=known)))
            else:
                checked[name] = value
            continue
        result = value_problem(parameter, value)
        if isinstance(result, str):
            found.append(Problem(field, None, result))
        else:
            checked[name] = result[0]
    for name, parameter in declared.items():
        if not parameter.has_default and name not in given:
            found.append(Problem(f"parameters.{name}", None, wording.PARAMETER_REQUIRED.format()))
    if found:
        raise InvalidParameters(found)
    return checked


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a parameter, or None."""
    if len(name) <= NAME_MAX_CHARS and NAME.fullmatch(name):
        return None
    return refusals.NOT_A_PARAMETER_NAME.format(name=name[:NAME_MAX_CHARS], n=NAME_MAX_CHARS)


def value_problem(parameter: Parameter, value: JSONValue) -> tuple[JSONValue] | str:
    """The value as the parameter holds it (in a 1-tuple), or why it is refused."""
    kind = json_kind(value)
    if parameter.type is not None:
        converted = _as_type(parameter.type, value)
        if converted is None:
            return _EXPECTED[parameter.type].format(kind=kind)
        value = converted[0]
    if parameter.choices:
        for choice in parameter.choices:
            if _same(choice, value):
                return (choice,)
        names = ", ".join(json.dumps(c, ensure_ascii=False) for c in parameter.choices)
        return wording.EXPECTED_ONE_OF.format(names=names, kind=kind)
    return (value,)


def json_kind(value: JSONValue) -> str:
    """``the number 3``, ``a list``…: what a value is, in a refusal."""
    if isinstance(value, dict):
        return wording.A_MAPPING.format()
    if isinstance(value, list):
        return wording.A_LIST.format()
    if value is None:
        return wording.NULL.format()
    if isinstance(value, bool):
        return wording.THE_BOOLEAN.format(value=str(value).lower())
    if isinstance(value, int | float):
        return wording.THE_NUMBER.format(value=value)
    return wording.THE_STRING.format(value=value)


_EXPECTED: Mapping[ParameterType, Phrase] = {
    ParameterType.STRING: wording.EXPECTED_STRING,
    ParameterType.INTEGER: wording.EXPECTED_WHOLE_NUMBER,
    ParameterType.NUMBER: wording.EXPECTED_NUMBER,
    ParameterType.BOOLEAN: wording.EXPECTED_BOOLEAN,
    ParameterType.DATE: wording.EXPECTED_DATE,
    ParameterType.DATETIME: wording.EXPECTED_DATETIME,
}


def _as_type(kind: ParameterType, value: JSONValue) -> tuple[JSONValue] | None:
    """The value as ``kind`` holds it, or None. Text that reads exactly as the type is taken
    (the CLI and the web UI send what was typed); a string parameter takes a whole number or a
    boolean that such a client read as JSON, as its text."""
    match kind:
        case ParameterType.STRING:
            if isinstance(value, str):
                return (value,)
            if isinstance(value, bool | int):
                return (json.dumps(value),)
        case ParameterType.INTEGER:
            if isinstance(value, int) and not isinstance(value, bool):
                return (value,)
            if isinstance(value, str) and _INTEGER.fullmatch(value.strip()):
                return (int(value),)
        case ParameterType.NUMBER:
            if isinstance(value, int | float) and not isinstance(value, bool):
                return (value,)
            if isinstance(value, str):
                try:
                    number = float(value)
                except ValueError:
                    return None
                return (number,) if math.isfinite(number) else None
        case ParameterType.BOOLEAN:
            if isinstance(value, bool):
                return (value,)
            if value in ("true", "false"):
                return (value == "true",)
        case ParameterType.DATE:
            if isinstance(value, str) and _DATE.fullmatch(value):
                try:
                    date.fromisoformat(value)
                except ValueError:
                    return None
                return (value,)
        case ParameterType.DATETIME:
            if isinstance(value, str) and _DATE.match(value) and len(value) > 10:
                try:
                    datetime.fromisoformat(value)
                except ValueError:
                    return None
                return (value,)
    return None


def _same(choice: JSONValue, value: JSONValue) -> bool:
    if isinstance(choice, str) != isinstance(value, str):
        # ``--param mode=3`` reads as the number 3; the choice "3" is meant.
        return json.dumps(choice) == value or json.dumps(value) == choice
    return json.dumps(choice) == json.dumps(value)
