"""What a worker's report may hold and what an attempt may record (``core/reports.py``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from veritask.core import reports
from veritask.core.events import Event, EventKind
from veritask.core.facts import AttemptFacts, Mark
from veritask.core.jsontypes import JSONObject
from veritask.ledger import schema

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def _report(
    kind: EventKind = EventKind.PROGRESS,
    evidence: JSONObject | None = None,
    *,
    at: datetime = T0,
    seq: int = 2,
    attempt_no: int = 1,
) -> Event:
    return Event(
        "e-1",
        "i-1",
        attempt_no,
        kind,
        "worker",
        at,
        {"phase": "p", "done": 1, "total": 2, "message": None} if evidence is None else evidence,
        seq=seq,
        attempt_token="t",
    )


@pytest.mark.parametrize(
    ("event", "field"),
    [
        (_report(at=T0.replace(tzinfo=None)), "event_time"),
        (_report(attempt_no=2**31), "attempt_no"),
        (_report(seq=2**63), "seq"),
        (_report(evidence={"phase": "p", "done": 2**63}), "evidence.done"),
        (_report(evidence={"phase": "p", "total": -(2**63) - 1}), "evidence.total"),
        (_report(evidence={"phase": "x" * 129}), "evidence.phase"),
        (_report(evidence={"phase": "p", "message": "m" * 4097}), "evidence.message"),
        (_report(evidence={"phase": "p", "message": "a\x00b"}), "evidence.message"),
        (_report(evidence={"phase": "p", "x": {"y": float("nan")}}), "evidence.x.y"),
        (_report(evidence={"phase": "p", "x": ["\ud800"]}), "evidence.x[0]"),
        (_report(EventKind.COMPLETED, {"exit_code": 2**31}), "evidence.exit_code"),
        (_report(EventKind.HEARTBEAT, {"pad": "x" * 1024}), "evidence"),
        (_report(evidence={"phase": "p", "pad": "x" * (16 * 1024)}), "evidence"),
    ],
)
def test_a_report_the_ledger_cannot_keep_is_refused_naming_the_field(
    event: Event, field: str
) -> None:
    refused = reports.problem(event)
    assert refused is not None and refused.field == field, refused
    assert refused.limit is None
    assert refused.reason.startswith(f"{field}: ")


def test_deep_nesting_is_refused_and_a_large_completion_is_not() -> None:
    deep: JSONObject = {"phase": "p"}
    node = deep
    for _ in range(reports.MAX_DEPTH + 1):
        node["n"] = {}
        node = node["n"]  # type: ignore[assignment]
    refused = reports.problem(_report(evidence=deep))
    assert refused is not None and "nests deeper" in refused.message
    output: JSONObject = {
        "rows": ["r" * 1000] * 500
    }  # half a megabyte of output: the worker bounds it
    assert reports.problem(_report(EventKind.COMPLETED, {"output": output})) is None


def _attempt(last: Event | None, progress: Event | None) -> AttemptFacts:
    return AttemptFacts(
        attempt_no=1,
        last_report=None if last is None else Mark.of(last),
        progress=None if progress is None else Mark.of(progress),
    )


LEASE = timedelta(seconds=60)


def test_progress_within_a_second_of_the_last_is_refused_once_past_the_free_bytes() -> None:
    first = _report()
    attempt = _attempt(first, first)
    soon = _report(at=T0 + timedelta(milliseconds=900), seq=3)
    free = reports.FREE_PROGRESS_BYTES - 1
    assert reports.over_limit(attempt, soon, lease=LEASE, progress_bytes=free) is None
    spent = reports.FREE_PROGRESS_BYTES
    refused = reports.over_limit(attempt, soon, lease=LEASE, progress_bytes=spent)
    assert refused is not None and refused.limit is reports.Limit.RATE
    assert refused.field == "event_time"
    later = _report(at=T0 + reports.MIN_INTERVAL, seq=3)
    assert reports.over_limit(attempt, later, lease=LEASE, progress_bytes=spent) is None


def test_a_heartbeat_is_limited_only_after_a_heartbeat_and_by_a_quarter_of_a_short_lease() -> None:
    started = _report(EventKind.STARTED, {})
    beat = _report(EventKind.HEARTBEAT, {}, at=T0 + timedelta(milliseconds=10), seq=3)
    assert reports.over_limit(_attempt(started, None), beat, lease=LEASE, progress_bytes=0) is None
    again = _report(EventKind.HEARTBEAT, {}, at=T0 + timedelta(milliseconds=300), seq=4)
    limited = reports.over_limit(_attempt(beat, None), again, lease=LEASE, progress_bytes=0)
    assert limited is not None and limited.limit is reports.Limit.RATE
    short = timedelta(seconds=1)  # beats every third of it: a quarter never refuses them
    assert reports.over_limit(_attempt(beat, None), again, lease=short, progress_bytes=0) is None


def test_progress_past_the_total_is_refused_and_a_completion_never_is() -> None:
    first = _report()
    attempt = _attempt(first, first)
    later = _report(at=T0 + timedelta(seconds=5), seq=3)
    full = reports.MAX_PROGRESS_BYTES
    refused = reports.over_limit(attempt, later, lease=LEASE, progress_bytes=full)
    assert refused is not None and refused.limit is reports.Limit.TOTAL
    end = _report(EventKind.COMPLETED, {}, at=T0, seq=4)
    assert reports.over_limit(attempt, end, lease=LEASE, progress_bytes=full) is None


def test_the_limits_are_the_widths_of_the_columns_that_keep_them() -> None:
    events, attempts = schema.events.c, schema.attempts.c

    def width(column: sa.Column[object]) -> int | None:
        length: int | None = getattr(column.type, "length", None)
        return length

    assert {
        "event_id": width(events.event_id),
        "instance_id": width(events.instance_id),
        "actor": width(events.actor),
    } == reports.ENVELOPE_CHARS
    assert reports.EVIDENCE_CHARS["phase"] == width(attempts.progress_phase)
    assert reports.EVIDENCE_CHARS["worker"] == width(attempts.worker)
    assert reports.EVIDENCE_CHARS["error_category"] == width(attempts.error_category)
    assert isinstance(attempts.exit_code.type, sa.Integer)
    assert not isinstance(attempts.exit_code.type, sa.BigInteger)
    for column in (attempts.progress_done, attempts.progress_total, events.seq):
        assert isinstance(column.type, sa.BigInteger)
