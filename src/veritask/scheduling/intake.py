"""Worker events from the wire into the core's events, and what their verdicts raise.

Both ways a worker's report comes in (the outbox the scheduler's collector reads and the HTTP
callback) go through here, so that what a verdict calls for is done once, for both. What a
report may hold, and how much of it an attempt may record, is checked once too, by the judge
both end in (``core/reports.py``): a bad report is refused alone, its batch recorded.
"""

from __future__ import annotations

from datetime import datetime

from veritask.core import alert_messages, judge
from veritask.core.events import Event, EventKind
from veritask.core.jsontypes import JSONObject
from veritask.execution import wire
from veritask.ledger import alerts, dialects, queries
from veritask.ledger.ledger import Applied, Ledger
from veritask.ledger.vocabulary import AlertCategory
from veritask.scheduling import overruled


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


def heed_verdict(
    ledger: Ledger, event: Event, applied: Applied, *, run_id: str | None = None
) -> None:
    """Raise what a worker report's verdict calls for, whichever way the report came in.

    A conflict (a second, different completion of one attempt) is evidence the platform cannot
    reconcile by itself: it opens a platform alert. A report that changed a finished instance
    moves its run if the run had ended on the old state, and alerts about what was already
    decided on it (:mod:`.overruled`). ``run_id``
    saves a read when the caller knows the instance's run.
    """
    if overruled.changed_a_finished_instance(event, applied):
        followed = overruled.follow_the_instances(ledger, event, applied)
        overruled.alert_decisions_on_the_old_state(ledger, event, applied, followed=followed)
    if applied.outcome is not judge.Outcome.CONFLICT:
        return
    if run_id is None:
        with dialects.read_transaction(ledger.engine) as connection:
            instance = queries.get_instance(connection, event.instance_id)
        run_id = instance.run_id if instance is not None else None
    alerts.raise_quietly(
        ledger,
        category=AlertCategory.PLATFORM,
        dedup_key=f"conflict:{event.instance_id}:{event.attempt_no}",
        message=alert_messages.CONFLICTING_EVIDENCE.format(reason=applied.reason),
        run_id=run_id,
        instance_id=event.instance_id,
        attempt_no=event.attempt_no or None,
        evidence={"event_id": event.event_id, "kind": event.kind.value},
    )
