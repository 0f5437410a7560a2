"""The worker's events on the wire: one JSON object per event, a tagged union on ``kind``.

Every event carries a fresh time-ordered UUID ``event_id`` (the platform dedups by it), the
attempt token (checked by the platform, never stored) and ``seq``, which numbers an attempt's
events 1, 2, 3… across worker restarts. The platform rejects what it cannot parse, so this
module is the one place that spells the fields.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Literal, NotRequired, TypeAlias, TypedDict, cast, overload

from veritask import ids
from veritask.core import jsontypes

WorkerEventKind: TypeAlias = Literal[
    "started", "heartbeat", "progress", "completed", "output_committed"
]
WORKER_EVENT_KINDS: frozenset[str] = frozenset(
    ("started", "heartbeat", "progress", "completed", "output_committed")
)


class StartedEvidence(TypedDict):
    worker: str
    """``<host>:<worker pid>``."""
    host: str
    pid: int
    """The task's pid."""
    pid_start_time: int
    """The task's start time in clock ticks since boot, from /proc: pid + this is unique."""
    pgid: int


class SqlStartedEvidence(TypedDict):
    """A SQL attempt's start, as the server shows it (``execution/sql``)."""

    worker: str
    """``sql:<connection>``: no worker of ours runs it."""
    host: str
    """The server's address."""
    pid: int
    """The backend's pid."""
    backend_start: str
    """When the backend started: pid + this is unique on the server."""
    query_start: str | None
    """When the backend began the attempt's script (``pg_stat_activity``)."""
    server: jsontypes.JSONObject
    """The server's identity: system identifier, address, port, database, start time."""


class WaitStartedEvidence(TypedDict):
    """A wait's first check, by the scheduler process that holds it (``execution/waits.py``)."""

    worker: str
    """``wait:<host>:<pid>``: the scheduler process, not a worker."""
    host: str
    pid: int
    condition: str
    """``path``, ``sql``, ``http`` or ``call``."""
    target: str
    """What is checked: the path, the statement, the URL or the callable."""


class ContainerStartedEvidence(TypedDict):
    """A container's start, as its engine shows it (``execution/container``)."""

    worker: str
    """``container:<engine host>``: no worker of ours runs in it."""
    host: str
    """The engine's address (``unix://…`` or ``tcp://…``)."""
    container: str
    """The container's name (one per attempt)."""
    container_id: str
    """The engine's id of the container: with the name, unique on the engine."""
    image: str
    started_at: str
    """The engine's ``StartedAt``."""


class SparkStartedEvidence(TypedDict):
    """A Spark driver's start, as its master shows it (``execution/spark``)."""

    worker: str
    """``spark:<master>``: no worker of ours runs beside the driver."""
    host: str
    """The master's REST submission server."""
    driver_id: str
    """The master's id of the driver: unique on the master."""
    spark_worker: str
    """The Spark worker that runs the driver (``host:port``), as the master says."""
    app_name: str
    """``spark.app.name``: the attempt's name and the start of its token's hash."""
    started_at: str
    """When the driver was first seen RUNNING (the master keeps no start time of a driver)."""
    started_at_source: str
    """How ``started_at`` was learnt: ``first_seen_running``."""


class HeartbeatEvidence(TypedDict):
    pass


class ProgressEvidence(TypedDict):
    phase: str
    done: int | None
    total: int | None
    message: str | None


class WaitProgressEvidence(ProgressEvidence):
    """What a wait's checks saw: recorded when it changed, and now and then with the count."""

    check: int
    """The number of this check since the wait began in this process."""
    seen: str
    checks_since: int
    """The checks made since the last one recorded (those in between saw the same)."""


class CompletedEvidence(TypedDict):
    exit_code: int | None
    signal: int | None
    error_category: str
    """An ``ErrorCategory`` value."""
    commit_marker: str | None
    log_path: str
    output: jsontypes.JSONValue
    """The JSON the task left in VERITASK_OUTPUT, or null."""
    start_error: NotRequired[str]
    """Why the worker could not start the task, when it knows (a secret no provider holds);
    absent otherwise."""
    error_message: NotRequired[str]
    """A failed attempt's last error: the last lines of the task's output (a callable's
    traceback, a command's stderr), at most 4 KiB, secrets masked; absent on success."""
    cpu_user_seconds: NotRequired[float]
    """CPU time the task's process (and the children it waited for) spent in user mode."""
    cpu_system_seconds: NotRequired[float]
    """The same in the kernel."""
    peak_rss_bytes: NotRequired[int]
    """The largest resident set of the task's process or of a child it waited for."""
    engine: NotRequired[jsontypes.JSONObject]
    """What the engine said when the attempt ended, where no worker of ours saw it end (a SQL
    statement): state, source, engine id and details, as ``describe`` answered."""


class OutputCommittedEvidence(TypedDict):
    marker: str


class _Envelope(TypedDict):
    event_id: str
    instance_id: str
    attempt_no: int
    actor: Literal["worker"]
    event_time: str
    seq: int
    attempt_token: str


class StartedEvent(_Envelope):
    kind: Literal["started"]
    evidence: (
        StartedEvidence
        | SqlStartedEvidence
        | WaitStartedEvidence
        | ContainerStartedEvidence
        | SparkStartedEvidence
    )


class HeartbeatEvent(_Envelope):
    kind: Literal["heartbeat"]
    evidence: HeartbeatEvidence


class ProgressEvent(_Envelope):
    kind: Literal["progress"]
    evidence: ProgressEvidence


class CompletedEvent(_Envelope):
    kind: Literal["completed"]
    evidence: CompletedEvidence


class OutputCommittedEvent(_Envelope):
    kind: Literal["output_committed"]
    evidence: OutputCommittedEvidence


WorkerEvent: TypeAlias = (
    StartedEvent | HeartbeatEvent | ProgressEvent | CompletedEvent | OutputCommittedEvent
)
Evidence: TypeAlias = (
    StartedEvidence
    | SqlStartedEvidence
    | WaitStartedEvidence
    | ContainerStartedEvidence
    | SparkStartedEvidence
    | HeartbeatEvidence
    | ProgressEvidence
    | CompletedEvidence
    | OutputCommittedEvidence
)

_ENVELOPE_FIELDS: dict[str, type] = {
    "event_id": str,
    "instance_id": str,
    "attempt_no": int,
    "kind": str,
    "actor": str,
    "event_time": str,
    "seq": int,
    "attempt_token": str,
    "evidence": dict,
}


def utc_now() -> datetime:
    return datetime.now(UTC)


def format_time(moment: datetime) -> str:
    """ISO-8601 in UTC with its offset, as every event time on the wire."""
    return moment.astimezone(UTC).isoformat()


@overload
def make_event(
    *,
    kind: Literal["completed"],
    instance_id: str,
    attempt_no: int,
    attempt_token: str,
    seq: int,
    evidence: CompletedEvidence,
    event_time: datetime | None = None,
) -> CompletedEvent: ...


@overload
def make_event(
    *,
    kind: WorkerEventKind,
    instance_id: str,
    attempt_no: int,
    attempt_token: str,
    seq: int,
    evidence: Evidence,
    event_time: datetime | None = None,
) -> WorkerEvent: ...


def make_event(
    *,
    kind: WorkerEventKind,
    instance_id: str,
    attempt_no: int,
    attempt_token: str,
    seq: int,
    evidence: Evidence,
    event_time: datetime | None = None,
) -> WorkerEvent:
    """A new event with a fresh id. The caller owns ``seq``: the spool hands them out."""
    event = {
        "event_id": ids.time_ordered_id(),
        "instance_id": instance_id,
        "attempt_no": attempt_no,
        "kind": kind,
        "actor": "worker",
        "event_time": format_time(event_time or utc_now()),
        "seq": seq,
        "attempt_token": attempt_token,
        "evidence": evidence,
    }
    # The kind and the evidence were given together by the caller; the union cannot see that.
    return cast(WorkerEvent, event)


def encode(event: WorkerEvent) -> bytes:
    return json.dumps(event, separators=(",", ":"), sort_keys=True).encode()


def decode(data: bytes) -> WorkerEvent:
    """Parse and check one event; raises ValueError when it is not a worker event."""
    try:
        raw = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not JSON: {exc}") from None
    return validate(raw)


def validate(raw: object) -> WorkerEvent:
    """Check the envelope of a parsed event; raises ValueError when it is not a worker event."""
    if not isinstance(raw, dict):
        raise ValueError("an event is a JSON object")
    for name, expected in _ENVELOPE_FIELDS.items():
        value = raw.get(name)
        if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
            raise ValueError(f"event field {name!r} must be a {expected.__name__}")
    if raw["kind"] not in WORKER_EVENT_KINDS:
        raise ValueError(f"unknown event kind {raw['kind']!r}")
    if raw["actor"] != "worker":
        raise ValueError("worker events have actor 'worker'")
    return cast(WorkerEvent, raw)
