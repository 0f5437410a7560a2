"""An attempt's last error and what it cost, taken from the reports that carry them.

A worker's ``completed`` report carries the failed task's last output lines and the process's
resource use; the reconciler's ``engine_observed`` carries the SQL server's error in its
details. Neither is a fact the fold decides on, so they are not kept in the instance's folded
facts (rewritten with every event): they go to the attempt's row, once, by the first report
that holds them (a later copy or a second observation never rewrites them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import sqlalchemy as sa

from veritask.core import reports
from veritask.core.events import Event, EventKind
from veritask.core.judge import Outcome
from veritask.ledger import schema
from veritask.ledger.database import Connection

#: The attempts' columns written here and nowhere else (the snapshot's upsert leaves them be).
REPORT_COLUMNS = ("error_message", "cpu_user_seconds", "cpu_system_seconds", "peak_rss_bytes")
#: Counters the ledger adds to as it records reports; the snapshot's upsert leaves them be.
COUNTER_COLUMNS = ("progress_bytes",)
#: A report's error is cut to this many characters, whoever sent it.
ERROR_MESSAGE_MAX_CHARS = 4096
#: Outcomes whose report is the attempt's own: a fenced attempt's late completion still tells
#: how that attempt ended.
_KEPT_OUTCOMES = frozenset({Outcome.APPLIED, Outcome.STALE})
#: Outcomes of the events the events table holds: their progress counts.
_RECORDED_OUTCOMES = frozenset({Outcome.APPLIED, Outcome.STALE, Outcome.CONFLICT})
_CHUNK = 500

_a = schema.attempts.c
_RECORD = (
    sa.update(schema.attempts)
    .where(
        _a.instance_id == sa.bindparam("b_instance_id"),
        _a.attempt_no == sa.bindparam("b_attempt_no"),
    )
    .values(
        {
            name: sa.func.coalesce(_a[name], sa.bindparam(f"b_{name}", type_=_a[name].type))
            for name in REPORT_COLUMNS
        }
    )
)


_ADD_PROGRESS = (
    sa.update(schema.attempts)
    .where(
        _a.instance_id == sa.bindparam("b_instance_id"),
        _a.attempt_no == sa.bindparam("b_attempt_no"),
    )
    .values(progress_bytes=sa.func.coalesce(_a.progress_bytes, 0) + sa.bindparam("b_bytes"))
)


def progress_spent(
    connection: Connection, instance_ids: Iterable[str]
) -> dict[tuple[str, int], int]:
    """The progress bytes each attempt of these instances has recorded so far."""
    ids = sorted(set(instance_ids))
    spent: dict[tuple[str, int], int] = {}
    for start in range(0, len(ids), _CHUNK):
        found = connection.execute(
            sa.select(_a.instance_id, _a.attempt_no, _a.progress_bytes).where(
                _a.instance_id.in_(ids[start : start + _CHUNK])
            )
        )
        for instance_id, attempt_no, progress_bytes in found:
            spent[(instance_id, attempt_no)] = progress_bytes or 0
    return spent


def report_of(kind: str, evidence: Mapping[str, object]) -> dict[str, object] | None:
    """The error and resource use an event of ``kind`` with this evidence reports for its
    attempt; None when it has none."""
    if kind == EventKind.COMPLETED:
        error = _text(evidence.get("error_message"))
    elif kind == EventKind.ENGINE_OBSERVED:
        details = evidence.get("details")
        if not isinstance(details, Mapping):
            return None
        error = _server_error(details)
        evidence = {}
    else:
        return None
    values: dict[str, object] = {
        "error_message": error,
        "cpu_user_seconds": _seconds(evidence.get("cpu_user_seconds")),
        "cpu_system_seconds": _seconds(evidence.get("cpu_system_seconds")),
        "peak_rss_bytes": _count(evidence.get("peak_rss_bytes")),
    }
    if all(value is None for value in values.values()):
        return None
    return values


def record(connection: Connection, reported: Iterable[tuple[Event, Outcome]]) -> None:
    """Write what these classified events report onto their attempts' rows, first one wins."""
    rows = []
    progress: dict[tuple[str, int], int] = {}
    for event, outcome in reported:
        if event.kind is EventKind.PROGRESS and outcome in _RECORDED_OUTCOMES:
            key = (event.instance_id, event.attempt_no)
            progress[key] = progress.get(key, 0) + reports.evidence_bytes(event.evidence)
        if outcome not in _KEPT_OUTCOMES:
            continue
        values = report_of(event.kind, event.evidence)
        if values is not None:
            rows.append(_bound(event.instance_id, event.attempt_no, values))
    if rows:
        connection.execute(_RECORD, rows)
    if progress:
        connection.execute(
            _ADD_PROGRESS,
            [
                {"b_instance_id": i, "b_attempt_no": n, "b_bytes": size}
                for (i, n), size in sorted(progress.items())
            ],
        )


def record_again(connection: Connection, instance_id: str) -> None:
    """Write the reports onto an instance's attempt rows again from its recorded events, in
    their order (after a replay or a repair rebuilt the rows from the fold)."""
    e = schema.events.c
    found = connection.execute(
        sa.select(e.attempt_no, e.kind, e.evidence)
        .where(
            e.instance_id == instance_id,
            e.kind.in_((EventKind.COMPLETED.value, EventKind.ENGINE_OBSERVED.value)),
            e.outcome.in_([outcome.value for outcome in _KEPT_OUTCOMES]),
        )
        .order_by(e.position)
    )
    rows = []
    for attempt_no, kind, evidence in found:
        values = report_of(kind, evidence) if isinstance(evidence, Mapping) else None
        if values is not None and attempt_no is not None:
            rows.append(_bound(instance_id, attempt_no, values))
    if rows:
        connection.execute(_RECORD, rows)
    _count_progress_again(connection, instance_id)


def _count_progress_again(connection: Connection, instance_id: str) -> None:
    e = schema.events.c
    found = connection.execute(
        sa.select(e.attempt_no, e.evidence).where(
            e.instance_id == instance_id,
            e.kind == EventKind.PROGRESS.value,
            e.outcome.in_([outcome.value for outcome in _RECORDED_OUTCOMES]),
        )
    )
    spent: dict[int, int] = {}
    for attempt_no, evidence in found:
        if attempt_no is not None:
            spent[attempt_no] = spent.get(attempt_no, 0) + reports.evidence_bytes(evidence)
    for attempt_no, size in sorted(spent.items()):
        connection.execute(
            sa.update(schema.attempts)
            .where(_a.instance_id == instance_id, _a.attempt_no == attempt_no)
            .values(progress_bytes=size)
        )


def _bound(instance_id: str, attempt_no: int, values: Mapping[str, object]) -> dict[str, object]:
    return {
        "b_instance_id": instance_id,
        "b_attempt_no": attempt_no,
        **{f"b_{name}": value for name, value in values.items()},
    }


def _server_error(details: Mapping[str, object]) -> str | None:
    message = _text(details.get("error_message"))
    sqlstate = _text(details.get("error_sqlstate"))
    if message is None:
        return None
    return message if sqlstate is None else f"{message} (SQLSTATE {sqlstate})"


def _text(value: object) -> str | None:
    if not isinstance(value, str) or not value.strip():
        return None
    return value[-ERROR_MESSAGE_MAX_CHARS:]


def _seconds(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        return None
    return float(value)


def _count(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value
