"""Cron expressions and time zones, checked where a definition names them.

Five fields (minute, hour, day of month, month, day of week) with the usual ``*``, lists,
ranges, steps and names (``JAN``, ``MON``), cronsim's ``L`` and ``#`` extensions, and the
macros ``@hourly``, ``@daily``/``@midnight``, ``@weekly``, ``@monthly``,
``@yearly``/``@annually``. Day of month and day of week follow Debian cron: if either starts
with ``*`` both must match, otherwise either may.
"""

from __future__ import annotations

import difflib
import zoneinfo
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache

from cronsim import CronSim, CronSimError

from veritask.core import problems
from veritask.core.errors import VeritaskError

MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

_PROBE = datetime(2000, 1, 1)


class InvalidSchedule(VeritaskError, ValueError):
    """A cron string or a time zone was refused; the message says why."""


@dataclass(frozen=True)
class CronExpr:
    """A checked cron expression."""

    text: str
    """As written in the definition."""
    fields: tuple[str, str, str, str, str]
    """The five fields, macros expanded, upper case."""
    every_hour: bool
    """The hour field matches all 24 hours: such a schedule fires in both passes of a
    repeated (fall-back) hour."""

    @property
    def expression(self) -> str:
        """The five fields as one string, for cronsim."""
        return " ".join(self.fields)


@lru_cache(maxsize=256)
def parse_cron(text: str) -> CronExpr:
    """Check ``text`` and return it parsed; raise :class:`InvalidSchedule` naming the field."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidSchedule(problems.CRON_REQUIRED.format())
    stripped = text.strip()
    if stripped.startswith("@"):
        expanded = MACROS.get(stripped.lower())
        if expanded is None:
            names = ", ".join(sorted(MACROS))
            raise InvalidSchedule(problems.UNKNOWN_MACRO.format(macro=stripped, known=names))
        stripped = expanded
    parts = stripped.upper().split()
    if len(parts) != 5:
        raise InvalidSchedule(problems.CRON_FIELD_COUNT.format(text=text, count=len(parts)))
    for i, part in enumerate(parts):
        probe = ["*"] * 5
        probe[i] = part
        try:
            CronSim(" ".join(probe), _PROBE)
        except (CronSimError, ValueError, IndexError) as exc:
            raise InvalidSchedule(problems.CRON_FIELDS[i].format(part=part)) from exc
    try:
        sim = CronSim(" ".join(parts), _PROBE)
    except (CronSimError, ValueError, IndexError) as exc:
        raise InvalidSchedule(problems.NEVER_FIRES.format(text=text, detail=exc)) from exc
    return CronExpr(
        text=text,
        fields=(parts[0], parts[1], parts[2], parts[3], parts[4]),
        every_hour=set(sim.hours) == set(range(24)),
    )


def cron_problem(text: str) -> str | None:
    """Why ``text`` is not a cron expression, or None if it is one."""
    try:
        parse_cron(text)
    except InvalidSchedule as exc:
        return str(exc)
    return None


@lru_cache(maxsize=256)
def load_zone(name: str) -> zoneinfo.ZoneInfo:
    """The IANA time zone ``name``; raise :class:`InvalidSchedule` suggesting a close name."""
    try:
        if not name or name != name.strip():
            raise ValueError(name)
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        close = difflib.get_close_matches(name, sorted(zoneinfo.available_timezones()), n=1)
        raise InvalidSchedule(
            problems.UNKNOWN_ZONE_HINT.format(name=name, close=close[0])
            if close
            else problems.UNKNOWN_ZONE.format(name=name)
        ) from None


def zone_problem(name: str) -> str | None:
    """Why ``name`` is not a time zone, or None if it is one."""
    try:
        load_zone(name)
    except InvalidSchedule as exc:
        return str(exc)
    return None
