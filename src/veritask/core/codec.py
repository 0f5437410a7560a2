"""The facts of an instance as JSON, so the ledger can fold one event at a time.

The ledger stores these facts beside the snapshot row; :func:`facts_from_json` of
:func:`facts_to_json` is the identity. Keys are short because every ``apply()`` reads and
writes them, and every instance keeps them as long as the ledger keeps it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from veritask.core.events import ErrorCategory, EventKind
from veritask.core.facts import AttemptFacts, Completion, InstanceFacts, Mark
from veritask.core.jsontypes import JSONObject, JSONValue
from veritask.core.states import EngineState

FORMAT_VERSION = 2
#: The first format, with every mark written in full where it is used; still read, since the
#: snapshots of finished instances are never folded again.
_FULL_MARKS_VERSION = 1

#: Integer times count microseconds from here; exact, where a float would round.
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)

_MARK_FIELDS = (
    "opened",
    "acknowledged",
    "submit_failed",
    "started",
    "first_report",
    "last_report",
    "progress",
    "committed",
    "lease_expired",
    "stop_requested",
    "cancel_unconfirmed",
    "cancel_confirmed",
    "never_received",
    "fenced",
    "engine_last",
    "engine_vouched",
)


def facts_to_json(facts: InstanceFacts) -> JSONObject:
    """The facts as a JSON object.

    Every instance's snapshot is written on each of its events and kept as long as the
    instance, so the format spends few bytes: each distinct mark is written once, in ``m``,
    and named by its index there (the started mark is usually the first report, the last
    report usually the completion); times are integer microseconds when they are in UTC;
    what equals its default is left out.
    """
    marks = _Marks()
    out: JSONObject = {"v": FORMAT_VERSION, "id": facts.instance_id}
    if facts.created is not None:
        out["created"] = marks.ref(facts.created)
    if facts.attempts:
        out["attempts"] = [_attempt_out(a, marks) for a in facts.attempts]
    if facts.decisions:
        out["decisions"] = [[epoch, marks.ref(mark)] for epoch, mark in facts.decisions]
    out["m"] = marks.written
    return out


def facts_from_json(data: JSONObject) -> InstanceFacts:
    """Read facts written by :func:`facts_to_json`, in this format or the first one."""
    version = data.get("v")
    if version == _FULL_MARKS_VERSION and not isinstance(version, bool):
        return _facts_from_full_marks(data)
    if version != FORMAT_VERSION or isinstance(version, bool):
        raise ValueError(f"facts: unknown format version {version!r}")
    marks = [_mark_in(m) for m in _list(data["m"])]

    def mark(ref: JSONValue) -> Mark:
        index = _int(ref)
        if not 0 <= index < len(marks):
            raise ValueError(f"facts: no mark {index}")
        return marks[index]

    created = data.get("created")
    return InstanceFacts(
        instance_id=str(data["id"]),
        created=None if created is None else mark(created),
        attempts=tuple(_attempt_in(a, mark) for a in _list(data.get("attempts", []))),
        decisions=tuple(
            (_int(_list(item)[0]), mark(_list(item)[1]))
            for item in _list(data.get("decisions", []))
        ),
    )


class _Marks:
    """The distinct marks of one snapshot, in the order first written."""

    def __init__(self) -> None:
        self.written: list[JSONValue] = []
        self._by_event: dict[str, list[tuple[Mark, int]]] = {}

    def ref(self, mark: Mark) -> int:
        # Marks hold evidence dicts and cannot be hashed; one event id rarely names two.
        same_event = self._by_event.setdefault(mark.event_id, [])
        for known, index in same_event:
            if known == mark:
                return index
        self.written.append(_mark_out(mark))
        same_event.append((mark, len(self.written) - 1))
        return len(self.written) - 1


def _attempt_out(a: AttemptFacts, marks: _Marks) -> JSONObject:
    out: JSONObject = {"n": a.attempt_no}
    if a.max_report_seq:
        out["seq"] = a.max_report_seq
    if a.progress_seq:
        out["pseq"] = a.progress_seq
    for name in _MARK_FIELDS:
        mark: Mark | None = getattr(a, name)
        if mark is not None:
            out[name] = marks.ref(mark)
    done: list[JSONValue] = []
    for c in a.completions:
        item: JSONObject = {"m": marks.ref(c.mark), "r": c.rank}
        if c.exit_code is not None:
            item["x"] = c.exit_code
        if c.category is not None:
            item["c"] = c.category.value
        if c.engine_state is not None:
            item["s"] = c.engine_state.value
        if c.commit_marker is not None:
            item["k"] = c.commit_marker
        done.append(item)
    if done:
        out["done"] = done
    return out


def _attempt_in(data: JSONValue, mark: Callable[[JSONValue], Mark]) -> AttemptFacts:
    obj = _obj(data)
    marks = {name: None if obj.get(name) is None else mark(obj[name]) for name in _MARK_FIELDS}
    completions = []
    for item in _list(obj.get("done", [])):
        c = _obj(item)
        category, engine_state, marker, exit_code = (c.get(k) for k in ("c", "s", "k", "x"))
        completions.append(
            Completion(
                mark(c["m"]),
                _int(c["r"]),
                None if exit_code is None else _int(exit_code),
                None if category is None else ErrorCategory(str(category)),
                None if engine_state is None else EngineState(str(engine_state)),
                None if marker is None else str(marker),
            )
        )
    return AttemptFacts(
        attempt_no=_int(obj["n"]),
        max_report_seq=_int(obj.get("seq", 0)),
        progress_seq=_int(obj.get("pseq", 0)),
        completions=tuple(completions),
        **marks,
    )


def _mark_out(mark: Mark) -> JSONObject:
    out: JSONObject = {"id": mark.event_id, "k": mark.kind.value, "a": mark.actor}
    out["t"] = _time_out(mark.event_time)
    # Absent: observed when it happened (the platform's own events); null: not yet observed.
    if mark.observed_at is None:
        out["o"] = None
    elif not _same_time(mark.observed_at, mark.event_time):
        out["o"] = _time_out(mark.observed_at)
    if mark.evidence:
        out["e"] = mark.evidence
    return out


def _mark_in(data: JSONValue) -> Mark:
    obj = _obj(data)
    event_time = _time_in(obj["t"])
    observed = obj["o"] if "o" in obj else obj["t"]
    return Mark(
        event_id=str(obj["id"]),
        kind=EventKind(str(obj["k"])),
        actor=str(obj["a"]),
        event_time=event_time,
        observed_at=None if observed is None else _time_in(observed),
        evidence=_obj(obj.get("e", {})),
    )


def _same_time(a: datetime, b: datetime) -> bool:
    return a == b and a.utcoffset() == b.utcoffset()


def _time_out(value: datetime) -> JSONValue:
    # Only a UTC time becomes an integer: another offset is kept as written (ISO 8601).
    if value.tzinfo is UTC:
        return (value - _EPOCH) // _MICROSECOND
    return value.isoformat()


def _time_in(value: JSONValue) -> datetime:
    if isinstance(value, str):
        return datetime.fromisoformat(value)
    return _EPOCH + _int(value) * _MICROSECOND


# -- the first format ---------------------------------------------------------------------


def _facts_from_full_marks(data: JSONObject) -> InstanceFacts:
    decisions: list[tuple[int, Mark]] = []
    for item in _list(data["decisions"]):
        pair = _list(item)
        mark = _full_mark_in(pair[1])
        if mark is None:
            raise ValueError("facts.decisions: a decision without its event")
        decisions.append((_int(pair[0]), mark))
    return InstanceFacts(
        instance_id=str(data["id"]),
        created=_full_mark_in(data["created"]),
        attempts=tuple(_full_attempt_in(a) for a in _list(data["attempts"])),
        decisions=tuple(decisions),
    )


def _full_attempt_in(data: JSONValue) -> AttemptFacts:
    obj = _obj(data)
    marks = {name: _full_mark_in(obj.get(name)) for name in _MARK_FIELDS}
    completions = []
    for item in _list(obj.get("done", [])):
        c = _obj(item)
        mark = _full_mark_in(c["m"])
        if mark is None:
            raise ValueError("facts.completion: missing its event")
        category, engine_state, marker, exit_code = c["c"], c["s"], c["k"], c["x"]
        completions.append(
            Completion(
                mark,
                _int(c["r"]),
                None if exit_code is None else _int(exit_code),
                None if category is None else ErrorCategory(str(category)),
                None if engine_state is None else EngineState(str(engine_state)),
                None if marker is None else str(marker),
            )
        )
    return AttemptFacts(
        attempt_no=_int(obj["n"]),
        max_report_seq=_int(obj["seq"]),
        progress_seq=_int(obj["pseq"]),
        completions=tuple(completions),
        **marks,
    )


def _full_mark_in(data: JSONValue) -> Mark | None:
    if data is None:
        return None
    obj = _obj(data)
    observed = obj["o"]
    return Mark(
        event_id=str(obj["id"]),
        kind=EventKind(str(obj["k"])),
        actor=str(obj["a"]),
        event_time=datetime.fromisoformat(str(obj["t"])),
        observed_at=None if observed is None else datetime.fromisoformat(str(observed)),
        evidence=_obj(obj["e"]),
    )


def _obj(value: JSONValue) -> JSONObject:
    if not isinstance(value, dict):
        raise ValueError(f"facts: expected an object, got {type(value).__name__}")
    return value


def _list(value: JSONValue) -> list[JSONValue]:
    if not isinstance(value, list):
        raise ValueError(f"facts: expected a list, got {type(value).__name__}")
    return value


def _int(value: JSONValue) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"facts: expected an integer, got {value!r}")
    return value
