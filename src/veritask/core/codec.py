"""The facts of an instance as JSON, so the ledger can fold one event at a time.

The ledger stores these facts beside the snapshot row; :func:`facts_from_json` of
:func:`facts_to_json` is the identity. Keys are short because every ``apply()`` reads and
writes them.
"""

from __future__ import annotations

from datetime import datetime

from veritask.core.events import ErrorCategory, EventKind
from veritask.core.facts import AttemptFacts, Completion, InstanceFacts, Mark
from veritask.core.jsontypes import JSONObject, JSONValue
from veritask.core.states import EngineState

FORMAT_VERSION = 1

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
    """The facts as a JSON object."""
    return {
        "v": FORMAT_VERSION,
        "id": facts.instance_id,
        "created": _mark_out(facts.created),
        "attempts": [_attempt_out(a) for a in facts.attempts],
        "decisions": [[epoch, _mark_out(mark)] for epoch, mark in facts.decisions],
    }


def facts_from_json(data: JSONObject) -> InstanceFacts:
    """Read facts written by :func:`facts_to_json`."""
    if data.get("v") != FORMAT_VERSION:
        raise ValueError(f"facts: unknown format version {data.get('v')!r}")
    decisions: list[tuple[int, Mark]] = []
    for item in _list(data["decisions"]):
        pair = _list(item)
        mark = _mark_in(pair[1])
        if mark is None:
            raise ValueError("facts.decisions: a decision without its event")
        decisions.append((_int(pair[0]), mark))
    return InstanceFacts(
        instance_id=str(data["id"]),
        created=_mark_in(data["created"]),
        attempts=tuple(_attempt_in(a) for a in _list(data["attempts"])),
        decisions=tuple(decisions),
    )


def _attempt_out(a: AttemptFacts) -> JSONObject:
    out: JSONObject = {"n": a.attempt_no, "seq": a.max_report_seq, "pseq": a.progress_seq}
    for name in _MARK_FIELDS:
        mark: Mark | None = getattr(a, name)
        if mark is not None:
            out[name] = _mark_out(mark)
    out["done"] = [
        {
            "m": _mark_out(c.mark),
            "r": c.rank,
            "x": c.exit_code,
            "c": c.category.value if c.category else None,
            "s": c.engine_state.value if c.engine_state else None,
            "k": c.commit_marker,
        }
        for c in a.completions
    ]
    return out


def _attempt_in(data: JSONValue) -> AttemptFacts:
    obj = _obj(data)
    marks = {name: _mark_in(obj.get(name)) for name in _MARK_FIELDS}
    completions = []
    for item in _list(obj.get("done", [])):
        c = _obj(item)
        mark = _mark_in(c["m"])
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


def _mark_out(mark: Mark | None) -> JSONValue:
    if mark is None:
        return None
    return {
        "id": mark.event_id,
        "k": mark.kind.value,
        "a": mark.actor,
        "t": mark.event_time.isoformat(),
        "o": mark.observed_at.isoformat() if mark.observed_at else None,
        "e": mark.evidence,
    }


def _mark_in(data: JSONValue) -> Mark | None:
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
