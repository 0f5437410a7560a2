"""A task's progress notices, as the worker sends them: within what a report may hold, and at
the pace the ledger records them (``core/reports.py``).

A task may tell its progress as often as it likes; only the latest matters. The worker sends
one at once, then holds the newer ones and sends the latest when the interval is over, and
before the attempt's end: so the ledger never refuses a worker's progress as too soon, and the
last progress a task told is the one recorded.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from typing import cast

from veritask.core import jsontypes, reports
from veritask.core.events import EventKind
from veritask.execution import wire

#: The worker's pace: the ledger's interval and a margin for the clocks' drift between sends.
INTERVAL = reports.MIN_INTERVAL + timedelta(milliseconds=50)


class Pacer:
    """Holds the latest progress a task told until it may be sent."""

    def __init__(
        self,
        send: Callable[[wire.ProgressEvidence], object],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._send = send
        self._clock = clock
        self._held: wire.ProgressEvidence | None = None
        self._sent_at: float | None = None

    @property
    def due(self) -> float | None:
        """When the held progress may be sent (monotonic seconds); None when none is held."""
        if self._held is None:
            return None
        return (self._sent_at or 0.0) + INTERVAL.total_seconds()

    def tell(self, evidence: wire.ProgressEvidence) -> None:
        """A notice from the task: sent now if the interval is over, else held (the latest)."""
        self._held = evidence
        self.send_due()

    def send_due(self) -> None:
        """Send the held progress if its time has come."""
        due = self.due
        if due is not None and self._clock() >= due:
            held, self._held = self._held, None
            self._sent_at = self._clock()
            if held is not None:
                self._send(held)

    def flush(self, sleep: Callable[[float], None] = time.sleep) -> None:
        """Send the held progress before the attempt's end, waiting for its time if needed
        (at most the interval)."""
        due = self.due
        if due is None:
            return
        sleep(max(0.0, due - self._clock()))
        self._sent_at = None  # the wait is over: send it whatever the clock says
        self.send_due()


def evidence_of(notice: dict[str, jsontypes.JSONValue]) -> wire.ProgressEvidence:
    """A task's progress notice as a report's evidence, cut to what a report may hold (a
    notice a report could never hold raises TypeError: the worker logs and ignores it)."""
    phase, message = notice.get("phase"), notice.get("message")
    if not isinstance(phase, str):
        raise TypeError("progress needs a string phase")
    if message is not None and not isinstance(message, str):
        raise TypeError("progress message must be a string or null")
    evidence = wire.ProgressEvidence(
        phase=_text(phase, reports.EVIDENCE_CHARS["phase"]),
        done=_count(notice, "done"),
        total=_count(notice, "total"),
        message=None if message is None else _text(message, reports.EVIDENCE_CHARS["message"]),
    )
    limit = reports.MAX_EVIDENCE_BYTES[EventKind.PROGRESS]
    while (
        reports.evidence_bytes(cast(jsontypes.JSONObject, evidence)) > limit and evidence["message"]
    ):
        evidence["message"] = evidence["message"][: len(evidence["message"]) // 2]
    return evidence


def _text(text: str, chars: int) -> str:
    """At most ``chars`` characters of text a report may hold (no NUL, no lone surrogate)."""
    cleaned = text[:chars].replace("\x00", "\ufffd")
    return cleaned.encode("utf-8", "replace").decode("utf-8")


def _count(notice: dict[str, jsontypes.JSONValue], name: str) -> int | None:
    value = notice.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"progress {name} must be an integer or null")
    low, high = reports.INT64
    if not low <= value <= high:
        raise TypeError(f"progress {name} must be between {low} and {high}")
    return value
