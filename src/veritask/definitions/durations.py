"""Durations as definitions write them: ``"30s"``, ``"10m"``, ``"2h"``, ``"1d"``,
``"1h30m"`` (units largest first, each at most once; seconds may have a fraction, ``"1.5s"``),
or a number of seconds."""

from __future__ import annotations

import math
import re
from datetime import timedelta

from veritask.core import problems

_PATTERN = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+(?:\.\d+)?)s)?")
_UNITS = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))


class InvalidDuration(ValueError):
    """The value is not a duration; the message says what is expected."""


def parse_duration(value: object) -> timedelta:
    """Read a duration: a string of units (largest first, each at most once) or seconds.

    Raises :class:`InvalidDuration` for anything else, negative numbers included.
    """
    try:
        return _parse(value)
    except OverflowError:
        raise InvalidDuration(problems.DURATION_TOO_LONG.format(value=value)) from None


def _parse(value: object) -> timedelta:
    if isinstance(value, bool):
        raise InvalidDuration(problems.EXPECTED_A_DURATION.format(value=value))
    if isinstance(value, int | float):
        if not math.isfinite(value) or value < 0:
            raise InvalidDuration(problems.NEGATIVE_DURATION.format(value=value))
        return timedelta(seconds=value)
    if isinstance(value, str):
        text = value.strip().replace(" ", "")
        if text.isdigit():
            return timedelta(seconds=int(text))
        match = _PATTERN.fullmatch(text)
        if text and match:
            days, hours, minutes = (int(g) if g else 0 for g in match.groups()[:3])
            seconds = float(match.group(4) or 0)
            return timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
        raise InvalidDuration(problems.NOT_A_DURATION.format(value=value))
    raise InvalidDuration(problems.EXPECTED_A_DURATION.format(value=value))


def format_duration(value: timedelta) -> str:
    """The shortest unit string for a whole number of seconds (``5400s`` -> ``1h30m``);
    a fractional duration is written in seconds."""
    total = value.total_seconds()
    if total != int(total):
        return f"{total}s"
    seconds = int(total)
    if seconds == 0:
        return "0s"
    parts = []
    for unit, size in _UNITS:
        amount, seconds = divmod(seconds, size)
        if amount:
            parts.append(f"{amount}{unit}")
    return "".join(parts)


def to_seconds(value: timedelta) -> int | float:
    """Seconds as stored in JSON: an integer when the duration is whole."""
    total = value.total_seconds()
    return int(total) if total == int(total) else total
