"""The golden-history file format, shared by the generator and the replay test.

One JSON object a line:

1. a header ``{"history": name, "description": ..., "instance_id": ..., "policy": {...}}``
   (the policy as :meth:`TaskPolicy.to_json` writes it);
2. the recorded events in the order the ledger recorded them, each with ``event_id``,
   ``instance_id``, ``attempt_no``, ``kind``, ``actor``, ``event_time``, ``observed_at``,
   ``evidence`` and ``seq`` (tokens are never stored);
3. a trailer ``{"expect": {...}}``: the final instance state, epoch, ``retry_at``, each
   attempt's state, and optional ``checkpoints`` (the same, after a prefix of the log).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from veritask.core.events import Event, EventKind
from veritask.core.fold import InstanceSnapshot
from veritask.core.jsontypes import JSONObject, JSONValue
from veritask.core.policy import TaskPolicy

HERE = Path(__file__).parent


@dataclass(frozen=True)
class History:
    name: str
    description: str
    instance_id: str
    policy: TaskPolicy
    events: tuple[Event, ...]
    expect: JSONObject


def event_to_json(event: Event) -> JSONObject:
    return {
        "event_id": event.event_id,
        "instance_id": event.instance_id,
        "attempt_no": event.attempt_no,
        "kind": event.kind.value,
        "actor": event.actor,
        "event_time": event.event_time.isoformat(),
        "observed_at": None if event.observed_at is None else event.observed_at.isoformat(),
        "evidence": event.evidence,
        "seq": event.seq,
    }


def event_from_json(data: JSONObject) -> Event:
    observed = data["observed_at"]
    seq = data["seq"]
    evidence = data["evidence"]
    attempt_no = data["attempt_no"]
    if not isinstance(evidence, dict) or not isinstance(attempt_no, int):
        raise ValueError(f"malformed event line: {data}")
    return Event(
        event_id=str(data["event_id"]),
        instance_id=str(data["instance_id"]),
        attempt_no=attempt_no,
        kind=EventKind(str(data["kind"])),
        actor=str(data["actor"]),
        event_time=datetime.fromisoformat(str(data["event_time"])),
        evidence=evidence,
        seq=seq if isinstance(seq, int) else None,
        observed_at=None if observed is None else datetime.fromisoformat(str(observed)),
    )


def dumps(history: History) -> str:
    header: JSONObject = {
        "history": history.name,
        "description": history.description,
        "instance_id": history.instance_id,
        "policy": history.policy.to_json(),
    }
    lines = [header, *(event_to_json(e) for e in history.events), {"expect": history.expect}]
    return "".join(json.dumps(line, sort_keys=True) + "\n" for line in lines)


def load(path: Path) -> History:
    lines: list[JSONObject] = []
    for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        value = json.loads(text)
        if not isinstance(value, dict):
            raise ValueError(f"{path.name}:{number}: expected a JSON object")
        lines.append(value)
    header, *body, trailer = lines
    policy, expect = header["policy"], trailer["expect"]
    if not isinstance(policy, dict) or not isinstance(expect, dict):
        raise ValueError(f"{path.name}: the header needs a policy and the trailer an expect")
    return History(
        name=str(header["history"]),
        description=str(header["description"]),
        instance_id=str(header["instance_id"]),
        policy=TaskPolicy.from_json(policy),
        events=tuple(event_from_json(e) for e in body),
        expect=expect,
    )


def iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def summary(snapshot: InstanceSnapshot) -> JSONObject:
    """What a golden history pins down about a snapshot, in the shape of its ``expect``."""
    attempts: dict[str, JSONValue] = {}
    for view in snapshot.attempts:
        attempts[str(view.attempt_no)] = {
            "state": view.state.value,
            "open_reason": None if view.open_reason is None else view.open_reason.value,
            "counters": [view.retry_index, view.resubmit_index],
            "late": len(view.late),
            "conflict": view.conflict,
        }
    return {
        "state": snapshot.state.value,
        "epoch": snapshot.epoch,
        "retry_at": iso(snapshot.retry_at),
        "attempts": attempts,
    }


def mismatches(snapshot: InstanceSnapshot, expected: JSONObject) -> list[str]:
    """How the snapshot differs from an expectation (empty when it matches)."""
    actual = summary(snapshot)
    problems = [
        f"{key}: expected {expected[key]!r}, got {actual[key]!r}"
        for key in ("state", "epoch", "retry_at", "attempts")
        if actual[key] != expected[key]
    ]
    reason_contains = expected.get("reason_contains")
    if isinstance(reason_contains, str) and reason_contains not in snapshot.reason:
        problems.append(f"reason: expected to contain {reason_contains!r}, got {snapshot.reason!r}")
    return problems


def checkpoints(history: History) -> list[tuple[tuple[Event, ...], JSONObject]]:
    """Each checkpoint's expectation with the prefix of the log it speaks about."""
    found = []
    listed = history.expect.get("checkpoints", [])
    if not isinstance(listed, list):
        raise ValueError(f"{history.name}: checkpoints must be a list")
    ids = [e.event_id for e in history.events]
    for checkpoint in listed:
        if not isinstance(checkpoint, dict):
            raise ValueError(f"{history.name}: a checkpoint must be an object")
        through = ids.index(str(checkpoint["through"]))
        found.append((history.events[: through + 1], checkpoint))
    return found
