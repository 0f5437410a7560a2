"""``{{ ... }}`` in task commands and parameters: a small, safe substitution.

Only names the run defines are substituted (``logical_date``, ``logical_time``, ``run_id``,
``ds``, ``params.NAME``); anything else is left as written, so a shell ``{{`` never breaks.
No expressions are evaluated.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import datetime

from veritask.core.jsontypes import JSONValue

_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_.]*)\s*\}\}")


def context(
    *, run_id: str, logical_time: datetime | None, params: Mapping[str, JSONValue]
) -> dict[str, str]:
    values = {"run_id": run_id}
    if logical_time is not None:
        values["logical_time"] = logical_time.isoformat()
        values["logical_date"] = logical_time.date().isoformat()
        values["ds"] = values["logical_date"]
    for name, value in params.items():
        values[f"params.{name}"] = value if isinstance(value, str) else json.dumps(value)
    return values


def render(text: str, values: Mapping[str, str]) -> str:
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), text)


def render_json(value: JSONValue, values: Mapping[str, str]) -> JSONValue:
    if isinstance(value, str):
        return render(value, values)
    if isinstance(value, list):
        return [render_json(item, values) for item in value]
    if isinstance(value, dict):
        return {key: render_json(item, values) for key, item in value.items()}
    return value
