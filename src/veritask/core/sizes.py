"""Sizes as definitions and settings write them: a number of bytes, or a number with a unit —
``512KiB``, ``200MiB``, ``2GiB`` (powers of 1024) or ``100MB``, ``1GB`` (powers of 1000).

Used for an attempt's log limit (``log_limit`` in a definition, ``VERITASK_LOG_LIMIT`` for an
executor), which the worker enforces. Pure."""

from __future__ import annotations

import re
from typing import Final

from veritask.core import problems

_UNITS: Final = {
    "": 1,
    "B": 1,
    "KIB": 1024,
    "MIB": 1024**2,
    "GIB": 1024**3,
    "KB": 1000,
    "MB": 1000**2,
    "GB": 1000**3,
}
_PATTERN: Final = re.compile(r"(\d+(?:\.\d+)?)\s*([A-Za-z]*)")

#: The smallest and largest log limit an attempt may have.
MIN_LOG_LIMIT: Final = 1024
MAX_LOG_LIMIT: Final = 64 * 1024**3
#: The log limit of an attempt whose definition and executor name none.
DEFAULT_LOG_LIMIT: Final = 10 * 1024**2


class InvalidSize(ValueError):
    """The value is not a size, or not one allowed here; the message says which."""


def parse_size(value: object) -> int:
    """A size in bytes; :class:`InvalidSize` for anything else (negative numbers included)."""
    if isinstance(value, bool):
        raise InvalidSize(problems.NOT_A_SIZE.format(value=value))
    if isinstance(value, int) and value >= 0:
        return value
    if isinstance(value, str):
        match = _PATTERN.fullmatch(value.strip())
        unit = match.group(2).upper() if match else None
        if match and unit in _UNITS:
            return int(float(match.group(1)) * _UNITS[unit])
    raise InvalidSize(problems.NOT_A_SIZE.format(value=value))


def parse_log_limit(value: object) -> int:
    """A log limit in bytes, within :data:`MIN_LOG_LIMIT` .. :data:`MAX_LOG_LIMIT`."""
    size = parse_size(value)
    if not MIN_LOG_LIMIT <= size <= MAX_LOG_LIMIT:
        raise InvalidSize(problems.SIZE_OUT_OF_RANGE.format(value=value, low="1KiB", high="64GiB"))
    return size


def format_size(size: int) -> str:
    """The shortest exact way to write ``size`` (``209715200`` -> ``200MiB``)."""
    for unit in ("GiB", "MiB", "KiB"):
        factor = _UNITS[unit.upper()]
        if size >= factor and size % factor == 0:
            return f"{size // factor}{unit}"
    return str(size)
