"""The one maker of each event kind the platform sends: a named constructor per kind.

Every event Veritask itself records (the scheduler's, the executor's, the monitor's, the
reconciler's, an operator's, the commit check's) is built here, so what a kind carries is
written once. The evidence a kind must carry (``KIND_RULES`` in :mod:`.events`) is a
keyword-only parameter without a default: a caller cannot forget it, and mypy checks its
type. Keys are written in the order they always were, so the stored evidence is the same.

Events that arrive from outside (a worker's report, a row read back, a JSON record) are
decoded where they arrive, not made here; ``malformation`` judges them.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Literal, TypedDict

from veritask.core.events import ClearScope, Event, EventKind, OpenReason, OverrideScope
from veritask.core.jsontypes import JSONObject, JSONValue
from veritask.core.policy import OnUnknown
from veritask.core.states import InstanceState

if TYPE_CHECKING:
    from veritask.core.decide import Observation


class Subject(TypedDict):
    """What every event names besides its kind and evidence: ``**subject`` fills them."""

    event_id: str
    instance_id: str
    attempt_no: int
    event_time: datetime


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


# -- the scheduler --------------------------------------------------------------------------


def instance_created(
    *,
    event_id: str,
    instance_id: str,
    event_time: datetime,
    observed_at: datetime,
    task_key: str,
    map_index: int,
    run_id: str,
) -> Event:
    """The first event of every instance, written with its row."""
    return Event(
        event_id,
        instance_id,
        0,
        EventKind.INSTANCE_CREATED,
        "scheduler",
        event_time,
        {"task_key": task_key, "map_index": map_index, "run_id": run_id},
        observed_at=observed_at,
    )


def attempt_opened(
    *,
    event_id: str,
    instance_id: str,
    attempt_no: int,
    event_time: datetime,
    token_hash: str,
    reason: OpenReason,
    retry_index: int,
    resubmit_index: int,
    nonce: str | None = None,
) -> Event:
    """Attempt ``attempt_no`` opens; ``nonce`` (when the scheduler keeps it) rebuilds the token."""
    evidence: JSONObject = {
        "token_hash": token_hash,
        "reason": reason.value,
        "retry_index": retry_index,
        "resubmit_index": resubmit_index,
    }
    if nonce is not None:
        evidence["nonce"] = nonce
    return Event(
        event_id=event_id,
        instance_id=instance_id,
        attempt_no=attempt_no,
        kind=EventKind.ATTEMPT_OPENED,
        actor="scheduler",
        event_time=event_time,
        evidence=evidence,
    )


def trigger_rule_decided(
    kind: Literal[EventKind.SKIPPED, EventKind.UPSTREAM_FAILED],
    *,
    event_id: str,
    instance_id: str,
    event_time: datetime,
    rule: str,
    upstream: Mapping[str, InstanceState],
) -> Event:
    """``skipped`` or ``upstream_failed``: a trigger rule (or a branch) settled it unrun."""
    evidence: JSONObject = {
        "rule": rule,
        "upstream": {key: state.value for key, state in upstream.items()},
    }
    return Event(event_id, instance_id, 0, kind, "scheduler", event_time, evidence)


def map_expanded(
    *,
    event_id: str,
    instance_id: str,
    epoch: int,
    event_time: datetime,
    over: str,
    upstream_instance_id: str,
    upstream_attempt_no: int,
    items: list[JSONValue],
) -> Event:
    """``map_expanded``: a mapped task's instances, one per item of its upstream's output,
    created together with this event, whose evidence is that output."""
    evidence: JSONObject = {
        "over": over,
        "upstream_instance_id": upstream_instance_id,
        "upstream_attempt_no": upstream_attempt_no,
        "count": len(items),
        "items": items,
    }
    return _decision(
        EventKind.MAP_EXPANDED, "scheduler", event_id, instance_id, epoch, event_time, evidence
    )


def cancel_requested(
    *,
    event_id: str,
    instance_id: str,
    attempt_no: int,
    event_time: datetime,
    actor: str,
    reason: str,
    nothing_running: bool,
) -> Event:
    """A stop asked of the instance by an operator, the API or the scheduler."""
    return Event(
        event_id=event_id,
        instance_id=instance_id,
        attempt_no=attempt_no,
        kind=EventKind.CANCEL_REQUESTED,
        actor=actor,
        event_time=event_time,
        evidence={"reason": reason, "nothing_running": nothing_running},
    )


# -- the executor ---------------------------------------------------------------------------


def submit_acknowledged(
    *,
    event_id: str,
    instance_id: str,
    attempt_no: int,
    event_time: datetime,
    external_id: str,
    executor: str,
    resubmitted: bool,
) -> Event:
    """The engine took the submission under ``external_id``."""
    return Event(
        event_id,
        instance_id,
        attempt_no,
        EventKind.SUBMIT_ACKNOWLEDGED,
        "executor",
        event_time,
        {"external_id": external_id, "executor": executor, "resubmitted": resubmitted},
    )


def submit_failed(
    *,
    event_id: str,
    instance_id: str,
    attempt_no: int,
    event_time: datetime,
    error: str,
    retryable: bool,
) -> Event:
    """The engine refused the submission or could not start it."""
    return Event(
        event_id,
        instance_id,
        attempt_no,
        EventKind.SUBMIT_FAILED,
        "executor",
        event_time,
        {"error": error, "retryable": retryable},
    )


# -- the commit check (on the worker's behalf) ----------------------------------------------


def output_committed(
    *,
    event_id: str,
    instance_id: str,
    attempt_no: int,
    event_time: datetime,
    marker: str,
    via: str,
    seq: int,
    attempt_token: str,
) -> Event:
    """The task committed ``marker`` through the fencing check (``via`` names the check)."""
    return Event(
        event_id=event_id,
        instance_id=instance_id,
        attempt_no=attempt_no,
        kind=EventKind.OUTPUT_COMMITTED,
        actor="worker",
        event_time=event_time,
        evidence={"marker": marker, "via": via},
        seq=seq,
        attempt_token=attempt_token,
    )


# -- the monitor ----------------------------------------------------------------------------


def lease_expired(
    *,
    event_id: str,
    instance_id: str,
    attempt_no: int,
    event_time: datetime,
    last_report_seq: int,
    lease_expires_at: datetime,
    last_report_at: datetime | None,
    lease_seconds: float,
) -> Event:
    """No report arrived within the lease: the attempt is LOST (unknown, not failed)."""
    evidence: JSONObject = {
        "last_report_seq": last_report_seq,
        "lease_expires_at": lease_expires_at.isoformat(),
        "last_report_at": _iso(last_report_at),
        "lease_seconds": lease_seconds,
    }
    return _decision(
        EventKind.LEASE_EXPIRED, "monitor", event_id, instance_id, attempt_no, event_time, evidence
    )


def timeout_requested(
    *,
    event_id: str,
    instance_id: str,
    attempt_no: int,
    event_time: datetime,
    timeout_seconds: float,
    started_at: datetime | None,
    reason: str,
) -> Event:
    """The attempt ran past its timeout: the engine is asked to stop it."""
    evidence: JSONObject = {
        "timeout_seconds": timeout_seconds,
        "started_at": _iso(started_at),
        "reason": reason,
    }
    return _decision(
        EventKind.TIMEOUT_REQUESTED,
        "monitor",
        event_id,
        instance_id,
        attempt_no,
        event_time,
        evidence,
    )


# -- the reconciler -------------------------------------------------------------------------


def engine_observed(
    *,
    event_id: str,
    instance_id: str,
    attempt_no: int,
    event_time: datetime,
    observation: Observation,
) -> Event:
    """What the engine said about an attempt that ended."""
    return _observed(
        EventKind.ENGINE_OBSERVED, event_id, instance_id, attempt_no, event_time, observation
    )


def never_received(
    *,
    event_id: str,
    instance_id: str,
    attempt_no: int,
    event_time: datetime,
    observation: Observation,
) -> Event:
    """The engine never had the attempt."""
    return _observed(
        EventKind.NEVER_RECEIVED, event_id, instance_id, attempt_no, event_time, observation
    )


def cancel_confirmed(
    *,
    event_id: str,
    instance_id: str,
    attempt_no: int,
    event_time: datetime,
    observation: Observation,
) -> Event:
    """The engine no longer has the process we asked it to stop."""
    return _observed(
        EventKind.CANCEL_CONFIRMED, event_id, instance_id, attempt_no, event_time, observation
    )


def cancel_unconfirmed(
    *,
    event_id: str,
    instance_id: str,
    attempt_no: int,
    event_time: datetime,
    engine_state: str,
    window_seconds: float,
) -> Event:
    """The engine did not confirm the stop within the window."""
    evidence: JSONObject = {"engine_state": engine_state, "window_seconds": window_seconds}
    return _decision(
        EventKind.CANCEL_UNCONFIRMED,
        "reconciler",
        event_id,
        instance_id,
        attempt_no,
        event_time,
        evidence,
    )


def fenced(
    *,
    event_id: str,
    instance_id: str,
    attempt_no: int,
    event_time: datetime,
    reason: str,
    on_unknown: OnUnknown,
    gathered: JSONObject,
) -> Event:
    """The attempt's fate stayed unknown past the evidence window: it is fenced off."""
    evidence: JSONObject = {"reason": reason, "on_unknown": on_unknown.value, "gathered": gathered}
    return _decision(
        EventKind.FENCED, "reconciler", event_id, instance_id, attempt_no, event_time, evidence
    )


# -- an operator ----------------------------------------------------------------------------


def override(
    *,
    event_id: str,
    instance_id: str,
    attempt_no: int,
    event_time: datetime,
    operator: str,
    to_state: InstanceState,
    reason: str,
    scope: OverrideScope,
    origin_instance: str,
) -> Event:
    """``operator`` sets the outcome of epoch ``attempt_no`` (asked on ``origin_instance``)."""
    evidence: JSONObject = {
        "to_state": to_state.value,
        "reason": reason,
        "scope": scope.value,
        "operator": operator,
        "origin_instance": origin_instance,
    }
    return _decision(
        EventKind.OVERRIDE, operator, event_id, instance_id, attempt_no, event_time, evidence
    )


def cleared(
    *,
    event_id: str,
    instance_id: str,
    attempt_no: int,
    event_time: datetime,
    operator: str,
    reason: str,
    scope: ClearScope,
) -> Event:
    """``operator`` clears a finished instance: epoch ``attempt_no`` waits to be decided again."""
    evidence: JSONObject = {"reason": reason, "scope": scope.value, "operator": operator}
    return _decision(
        EventKind.CLEARED, operator, event_id, instance_id, attempt_no, event_time, evidence
    )


def _observed(
    kind: EventKind,
    event_id: str,
    instance_id: str,
    attempt_no: int,
    event_time: datetime,
    observation: Observation,
) -> Event:
    return _decision(
        kind, "reconciler", event_id, instance_id, attempt_no, event_time, observation.evidence()
    )


def _decision(
    kind: EventKind,
    actor: str,
    event_id: str,
    instance_id: str,
    attempt_no: int,
    event_time: datetime,
    evidence: JSONObject,
) -> Event:
    return Event(
        event_id=event_id,
        instance_id=instance_id,
        attempt_no=attempt_no,
        kind=kind,
        actor=actor,
        event_time=event_time,
        evidence=evidence,
    )
