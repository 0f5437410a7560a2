"""The JSON values that evidence and wire payloads are made of."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypeAlias

JSONValue: TypeAlias = "bool | int | float | str | list[JSONValue] | dict[str, JSONValue] | None"
JSONObject: TypeAlias = dict[str, JSONValue]


def nul_paths(value: object, at: str) -> Iterator[str]:
    """Where ``value`` (parsed JSON) holds a NUL character, in a string or a key, as dotted
    paths below ``at``: PostgreSQL refuses NUL in text, so every edge refuses it first."""
    if isinstance(value, str):
        if "\x00" in value:
            yield at
    elif isinstance(value, dict):
        for key, item in value.items():
            name = str(key)
            if "\x00" in name:
                yield f"{at}.{name.replace(chr(0), '')}"
            yield from nul_paths(item, f"{at}.{name}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from nul_paths(item, f"{at}[{index}]")
