"""What a worker's report may hold, and how much of its attempt's reports the ledger records.

Both ways a report comes in (the HTTP callback and the outbox the scheduler drains) end in the
judge, which asks this module before anything else, so the checks exist once:

- :func:`problem`: a report the ledger could not store as sent (a time without its UTC offset,
  a number past the 64-bit columns, a text longer than its column, a NUL character, NaN, a
  report larger than its kind may be). It is refused naming the field, and kept as refused
  evidence; the other reports delivered with it are recorded.
- :func:`over_limit`: a well-formed report beyond what one attempt may record: heartbeats at
  most one every :data:`MIN_INTERVAL` (by the report's own time), progress too once the
  attempt has recorded :data:`FREE_PROGRESS_BYTES` of it, and at most
  :data:`MAX_PROGRESS_BYTES` in all. It is refused and only counted: a flood is not kept.
  ``completed`` is never refused here, so an attempt's end is never lost to a limit.

Pure: the limits are data, the callers pass the report and the attempt's facts.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import UTC, timedelta
from enum import StrEnum
from typing import Final

from veritask.core import refusals
from veritask.core.events import Event, EventKind
from veritask.core.facts import AttemptFacts
from veritask.core.jsontypes import JSONValue

#: The range of the ledger's INTEGER columns (``attempt_no``, ``exit_code``).
INT32: Final = (-(2**31), 2**31 - 1)
#: The range of its BIGINT columns (``seq``, ``progress_done``, ``peak_rss_bytes``): every
#: whole number a report carries must fit in one.
INT64: Final = (-(2**63), 2**63 - 1)
#: The envelope's texts and the widths of the columns that keep them.
ENVELOPE_CHARS: Final = {"event_id": 128, "instance_id": 64, "actor": 160}
#: Evidence texts kept in a column of their own, and its width.
EVIDENCE_CHARS: Final = {"phase": 128, "worker": 256, "error_category": 32, "message": 4096}
#: Evidence numbers kept in an INTEGER column (or that are one: a signal).
EVIDENCE_INT32: Final = frozenset({"exit_code", "signal"})
#: How deep a report's evidence may nest.
MAX_DEPTH: Final = 32
#: The most JSON text a report's evidence may be, by kind. ``completed`` carries the task's
#: output, bounded by the worker (``VERITASK_MAX_OUTPUT_BYTES``), and is not limited here.
MAX_EVIDENCE_BYTES: Final = {
    EventKind.HEARTBEAT: 1024,
    EventKind.PROGRESS: 16 * 1024,
    EventKind.STARTED: 16 * 1024,
    EventKind.OUTPUT_COMMITTED: 16 * 1024,
}
#: Progress and heartbeats of one attempt closer together than this (by their own times)
#: are not recorded: the latest of them is what the attempt's view and the lease need.
MIN_INTERVAL: Final = timedelta(seconds=1)
#: The progress an attempt records freely before the interval applies to it: a wait's or a
#: SQL statement's few reports may come close together, a flood may not.
FREE_PROGRESS_BYTES: Final = 64 * 1024
#: The most progress evidence (JSON text) one attempt records in all.
MAX_PROGRESS_BYTES: Final = 16 * 1024 * 1024
#: The kinds a worker sends.
REPORT_KINDS: Final = frozenset(MAX_EVIDENCE_BYTES) | {EventKind.COMPLETED}


class Limit(StrEnum):
    """Which of an attempt's limits refused a well-formed report (a label on ``/metrics``)."""

    RATE = "rate"
    """A progress or heartbeat within ``MIN_INTERVAL`` of the attempt's last one, or a
    progress older than the one held (it would change nothing)."""
    TOTAL = "total"
    """Progress past ``MAX_PROGRESS_BYTES`` for the attempt."""


@dataclass(frozen=True)
class Refusal:
    """Why a report is refused: the field it names and what is wrong with it."""

    field: str
    message: str
    #: Set when the report is well-formed but over its attempt's limit: counted, not kept.
    limit: Limit | None = None

    @property
    def reason(self) -> str:
        return refusals.FIELD_PROBLEM.format(field=self.field, problem=self.message)


def problem(event: Event) -> Refusal | None:
    """Why the ledger cannot keep this report as it was sent, or None.

    Applies to the kinds a worker sends, whoever sends them; other events are the platform's.
    """
    if event.kind not in REPORT_KINDS:
        return None
    return _envelope_problem(event) or _evidence_problem(event)


def over_limit(
    attempt: AttemptFacts | None, event: Event, *, lease: timedelta, progress_bytes: int
) -> Refusal | None:
    """Why this well-formed report exceeds what its attempt may record, or None;
    ``progress_bytes`` is the progress the attempt has recorded so far.

    The interval is the shorter of :data:`MIN_INTERVAL` and a quarter of the lease, so that a
    short lease's heartbeats are never the ones refused.
    """
    if attempt is None or event.kind not in (EventKind.PROGRESS, EventKind.HEARTBEAT):
        return None
    window = min(MIN_INTERVAL, lease / 4)
    # Progress after progress, a heartbeat after a heartbeat: a heartbeat right after another
    # report still counts (it is how the worker's beat begins).
    last = attempt.progress if event.kind is EventKind.PROGRESS else attempt.last_report
    if last is not None and last.kind is not event.kind:
        last = None
    if event.kind is EventKind.PROGRESS and progress_bytes < FREE_PROGRESS_BYTES:
        last = None
    if last is not None and abs(event.event_time - last.event_time) < window:
        gap = abs(event.event_time - last.event_time).total_seconds()
        message = refusals.REPORT_TOO_SOON.format(
            kind=event.kind.value, gap=round(gap, 3), window=window.total_seconds()
        )
        return Refusal("event_time", message, Limit.RATE)
    if (
        event.kind is EventKind.PROGRESS
        and progress_bytes + evidence_bytes(event.evidence) > MAX_PROGRESS_BYTES
    ):
        message = refusals.PROGRESS_FULL.format(size=progress_bytes)
        return Refusal("evidence", message, Limit.TOTAL)
    return None


def evidence_bytes(evidence: JSONValue) -> int:
    """The size of a report's evidence as compact JSON text, as the ledger keeps it."""
    return len(json.dumps(evidence, separators=(",", ":"), ensure_ascii=False).encode())


def _envelope_problem(event: Event) -> Refusal | None:
    moment = event.event_time
    if moment.tzinfo is None or moment.utcoffset() is None:
        return Refusal("event_time", refusals.NEEDS_UTC_OFFSET.format(value=moment.isoformat()))
    try:
        moment.astimezone(UTC)
    except OverflowError:
        return Refusal("event_time", refusals.TIME_OUT_OF_RANGE.format())
    texts = {"event_id": event.event_id, "instance_id": event.instance_id, "actor": event.actor}
    for name, text in texts.items():
        found = _text_problem(name, text, ENVELOPE_CHARS[name])
        if found is not None:
            return found
    if not INT32[0] <= event.attempt_no <= INT32[1]:
        return _between("attempt_no", INT32)
    if event.seq is not None and not INT64[0] <= event.seq <= INT64[1]:
        return _between("seq", INT64)
    return None


def _evidence_problem(event: Event) -> Refusal | None:
    evidence = event.evidence
    found = _value_problem("evidence", evidence, 0)
    if found is not None:
        return found
    for key, chars in EVIDENCE_CHARS.items():
        value = evidence.get(key)
        if isinstance(value, str) and len(value) > chars:
            return Refusal(f"evidence.{key}", refusals.AT_MOST_CHARACTERS.format(n=chars))
    for key in EVIDENCE_INT32:
        value = evidence.get(key)
        if isinstance(value, int) and not INT32[0] <= value <= INT32[1]:
            return _between(f"evidence.{key}", INT32)
    limit = MAX_EVIDENCE_BYTES.get(event.kind)
    if limit is not None:
        size = evidence_bytes(evidence)
        if size > limit:
            message = refusals.REPORT_TOO_LARGE.format(
                size=size, kind=event.kind.value, limit=limit
            )
            return Refusal("evidence", message)
    return None


def _value_problem(path: str, value: object, depth: int) -> Refusal | None:
    """The first part of a JSON value the ledger cannot store, depth first."""
    if depth > MAX_DEPTH:
        return Refusal(path, refusals.NESTED_TOO_DEEP.format(depth=MAX_DEPTH))
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return None if INT64[0] <= value <= INT64[1] else _between(path, INT64)
    if isinstance(value, float):
        return None if math.isfinite(value) else Refusal(path, refusals.NOT_FINITE.format())
    if isinstance(value, str):
        return _text_problem(path, value, None)
    if isinstance(value, list):
        for index, item in enumerate(value):
            found = _value_problem(f"{path}[{index}]", item, depth + 1)
            if found is not None:
                return found
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            found = _text_problem(f"{path} (a key)", str(key), None) or _value_problem(
                f"{path}.{str(key)[:64]}", item, depth + 1
            )
            if found is not None:
                return found
    return None


def _text_problem(path: str, text: str, chars: int | None) -> Refusal | None:
    if chars is not None and len(text) > chars:
        return Refusal(path, refusals.AT_MOST_CHARACTERS.format(n=chars))
    if "\x00" in text:
        return Refusal(path, refusals.NO_NUL.format())
    if not text.isascii():
        try:
            text.encode()
        except UnicodeEncodeError:
            return Refusal(path, refusals.NOT_UNICODE.format())
    return None


def _between(path: str, bounds: tuple[int, int]) -> Refusal:
    return Refusal(path, refusals.BETWEEN.format(low=bounds[0], high=bounds[1]))
