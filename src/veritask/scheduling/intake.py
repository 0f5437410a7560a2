"""Worker events from the wire into the core's events (the outbox and the HTTP callback)."""

from __future__ import annotations

from datetime import datetime

from veritask.core.events import Event, EventKind
from veritask.core.jsontypes import JSONObject
from veritask.execution import wire


class MalformedReport(ValueError):
    """A worker event that cannot become a core event; the message names the field."""


def to_event(payload: wire.WorkerEvent | JSONObject) -> Event:
    """The core event a worker's report stands for (its token kept for the check)."""
    data: JSONObject = dict(payload)  # type: ignore[arg-type]
    try:
        kind = EventKind(str(data["kind"]))
        evidence = data.get("evidence") or {}
        if not isinstance(evidence, dict):
            raise MalformedReport("evidence: expected an object")
        attempt_no, seq = data["attempt_no"], data["seq"]
        if not isinstance(attempt_no, int) or not isinstance(seq, int):
            raise MalformedReport("attempt_no and seq: expected integers")
        return Event(
            event_id=str(data["event_id"]),
            instance_id=str(data["instance_id"]),
            attempt_no=attempt_no,
            kind=kind,
            actor=str(data.get("actor", "worker")),
            event_time=datetime.fromisoformat(str(data["event_time"])),
            evidence=evidence,
            seq=seq,
            attempt_token=str(data.get("attempt_token") or ""),
        )
    except KeyError as exc:
        raise MalformedReport(f"{exc.args[0]}: required") from None
    except ValueError as exc:
        if isinstance(exc, MalformedReport):
            raise
        raise MalformedReport(str(exc)) from None
