"""What people type into the pages' forms, read the one way every form reads it."""

from __future__ import annotations

import json

from veritask.core import refusals
from veritask.core.jsontypes import JSONObject, JSONValue
from veritask.services import errors


def typed_value(text: str) -> JSONValue:
    """A value as typed: JSON when it parses (numbers, true, lists), else the text."""
    stripped = text.strip()
    try:
        parsed: JSONValue = json.loads(stripped)
    except ValueError:
        return stripped
    return parsed


def as_typed(value: JSONValue) -> str:
    """A value as a person types it: text as it is, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def parameter_lines(lines: str) -> tuple[JSONObject, list[errors.FieldProblem]]:
    """NAME=VALUE lines as values, and a problem for each line that is not NAME=VALUE:
    dropping it would start a run without the value the operator meant."""
    given: JSONObject = {}
    problems: list[errors.FieldProblem] = []
    for number, line in enumerate(lines.splitlines(), start=1):
        if "=" in line and line.partition("=")[0].strip():
            name, _, value = line.partition("=")
            given[name.strip()] = typed_value(value)
        elif line.strip():
            text = refusals.PARAMETER_LINE.format(line=number, text=line.strip())
            problems.append(errors.FieldProblem("parameters", number, text))
    return given, problems
