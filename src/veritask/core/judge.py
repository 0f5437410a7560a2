"""How an arriving event is classified against the snapshot (design.md section 2, "Outcomes").

``judge`` is pure: the ledger passes the snapshot it read, the fingerprint of an event already
recorded under the same id (if any), and gets back the outcome, a sentence a person can read
and the snapshot after. The ledger then writes that snapshot with compare-and-set.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from enum import StrEnum

from veritask.core import fold as folding
from veritask.core.events import (
    Event,
    EventKind,
    Level,
    OpenReason,
    fingerprint,
    malformation,
)
from veritask.core.facts import is_instance_cancel
from veritask.core.fold import AttemptView, InstanceSnapshot
from veritask.core.policy import OnUnknown, TaskPolicy
from veritask.core.states import AttemptState, InstanceState


class Outcome(StrEnum):
    """The ledger's classification of an event when it arrived."""

    APPLIED = "applied"
    """It changed the snapshot or added a fact to it."""
    DUPLICATE = "duplicate"
    """Its event id is known with the same content; nothing changed."""
    STALE = "stale"
    """It belongs to a fenced or superseded attempt: kept on that attempt's record only."""
    CONFLICT = "conflict"
    """It contradicts decisive evidence already held; precedence decided, an alert is raised."""
    REJECTED = "rejected"
    """It failed validation; kept for audit, never folded."""


@dataclass(frozen=True)
class Verdict:
    """What the ledger should do with an event, and why."""

    event: Event
    outcome: Outcome
    reason: str
    before: InstanceSnapshot
    after: InstanceSnapshot

    @property
    def recorded(self) -> bool:
        """Whether the event goes into the events table (rejected ones go to their own)."""
        return self.outcome in (Outcome.APPLIED, Outcome.STALE, Outcome.CONFLICT)


def hash_token(token: str) -> str:
    """The stored form of an attempt token: the token itself is never kept."""
    return hashlib.sha256(token.encode()).hexdigest()


def token_matches(token: str, token_hash: str) -> bool:
    """Compare in constant time, so the check does not leak how much of a guess was right."""
    return hmac.compare_digest(hash_token(token), token_hash)


def judge(
    snapshot: InstanceSnapshot,
    event: Event,
    policy: TaskPolicy,
    *,
    known_fingerprint: str | None = None,
) -> Verdict:
    """Classify ``event`` against ``snapshot``; ``known_fingerprint`` is that of an event
    already recorded under the same id, if there is one."""

    def verdict(outcome: Outcome, reason: str, after: InstanceSnapshot = snapshot) -> Verdict:
        return Verdict(event, outcome, reason, snapshot, after)

    if known_fingerprint is not None:
        if known_fingerprint == fingerprint(event):
            return verdict(Outcome.DUPLICATE, f"event {event.event_id} was already recorded")
        return verdict(
            Outcome.REJECTED,
            f"event_id: {event.event_id} was already used for different content",
        )
    problem = malformation(event) or _subject_problem(snapshot, event)
    if problem is None and event.is_decision:
        problem = _decision_problem(snapshot, event)
    if problem is not None:
        return verdict(Outcome.REJECTED, problem)
    after = folding.step(snapshot, event, policy)
    stale = _staleness(snapshot, event)
    if stale is not None:
        return verdict(Outcome.STALE, stale, after)
    conflict = _conflict(snapshot, after, event, policy)
    if conflict is not None:
        return verdict(Outcome.CONFLICT, conflict, after)
    return verdict(Outcome.APPLIED, _describe(snapshot, after, event), after)


def _subject_problem(snapshot: InstanceSnapshot, event: Event) -> str | None:
    if event.instance_id != snapshot.instance_id:
        return f"instance_id: {event.instance_id} is not {snapshot.instance_id}"
    if event.kind is not EventKind.INSTANCE_CREATED and snapshot.facts.created is None:
        return f"instance_id: instance {event.instance_id} was never created"
    level = event.rule.level
    if level is Level.ATTEMPT and event.kind is not EventKind.ATTEMPT_OPENED:
        if is_instance_cancel(event):
            return None
        attempt = snapshot.attempt(event.attempt_no)
        if attempt is None:
            return f"attempt_no: attempt {event.attempt_no} was never opened"
        if event.attempt_token is not None or event.actor == "worker":
            token = event.attempt_token or ""
            if attempt.token_hash is None or not token_matches(token, attempt.token_hash):
                return f"attempt_token: does not match attempt {event.attempt_no}"
    return None


_RUNNABLE_STOP = frozenset(
    {AttemptState.SCHEDULED, AttemptState.QUEUED, AttemptState.RUNNING, AttemptState.LOST}
)
_OVERRIDE_BLOCKERS = frozenset(
    {
        AttemptState.SCHEDULED,
        AttemptState.QUEUED,
        AttemptState.RUNNING,
        AttemptState.CANCELLING,
    }
)


def _decision_problem(snapshot: InstanceSnapshot, event: Event) -> str | None:
    """Why a decision cannot be taken on this snapshot, or None.

    A decision is recorded only on the snapshot it was based on; the ledger enforces that with
    compare-and-set, and this check refuses decisions that no snapshot could justify.
    """
    state = snapshot.state
    epoch = snapshot.epoch
    current = snapshot.current
    kind = event.kind
    now = f"illegal now: the instance is {state}"
    if kind is EventKind.INSTANCE_CREATED:
        created = snapshot.facts.created
        if created is not None:
            return f"instance_id: already created by event {created.event_id}"
        return None
    if kind is EventKind.ATTEMPT_OPENED:
        return _opening_problem(snapshot, event)
    if event.attempt_no != epoch:
        return f"attempt_no: decisions apply to the current epoch {epoch}, not {event.attempt_no}"
    attempt_state = current.state if current is not None else None
    match kind:
        case EventKind.LEASE_EXPIRED:
            if attempt_state is not AttemptState.RUNNING or current is None:
                return f"{now}; only a RUNNING attempt can lose its lease"
            seen = event.evidence["last_report_seq"]
            if seen != current.max_report_seq:
                held = current.max_report_seq
                return f"stale decision: it saw report {seen}, the ledger holds {held}"
        case EventKind.TIMEOUT_REQUESTED:
            if attempt_state not in (AttemptState.QUEUED, AttemptState.RUNNING, AttemptState.LOST):
                return f"{now}; only a queued, running or lost attempt can time out"
        case EventKind.CANCEL_REQUESTED:
            if is_instance_cancel(event):
                if state not in (InstanceState.CREATED, InstanceState.UP_FOR_RETRY):
                    return f"{now}; a cancel with nothing running needs CREATED or UP_FOR_RETRY"
            elif attempt_state not in _RUNNABLE_STOP:
                return f"{now}; there is nothing to stop"
        case EventKind.CANCEL_UNCONFIRMED:
            if attempt_state is not AttemptState.CANCELLING:
                return f"{now}; only a CANCELLING attempt can miss its confirmation"
        case EventKind.NEVER_RECEIVED:
            if attempt_state not in (AttemptState.SCHEDULED, AttemptState.QUEUED) or (
                current is not None and current.max_report_seq > 0
            ):
                return f"{now}; only an attempt no worker reported from can be never received"
        case EventKind.FENCED:
            if attempt_state not in (AttemptState.LOST, AttemptState.QUEUED):
                return f"{now}; only a LOST or QUEUED attempt can be fenced"
            if event.evidence["on_unknown"] not in (OnUnknown.RETRY, OnUnknown.FAIL):
                return "evidence.on_unknown: fencing follows on_unknown retry or fail"
        case EventKind.OVERRIDE:
            if attempt_state in _OVERRIDE_BLOCKERS:
                return f"{now}; stop attempt {epoch} before overriding it"
        case EventKind.SKIPPED | EventKind.UPSTREAM_FAILED:
            if state is not InstanceState.CREATED or epoch != 0:
                return f"{now}; trigger rules decide only before the first attempt"
        case EventKind.REMOVED:
            if attempt_state is not None and not attempt_state.is_terminal:
                return f"{now}; attempt {epoch} is still active"
        case _:
            return None
    return None


def _opening_problem(snapshot: InstanceSnapshot, event: Event) -> str | None:
    state = snapshot.state
    expected = snapshot.epoch + 1
    if event.attempt_no != expected:
        return f"attempt_no: the next attempt is {expected}, not {event.attempt_no}"
    reason = OpenReason(str(event.evidence["reason"]))
    retry_index = event.evidence["retry_index"]
    resubmit_index = event.evidence["resubmit_index"]
    previous = snapshot.current
    if reason is OpenReason.FIRST:
        if state is not InstanceState.CREATED or previous is not None:
            return f"illegal now: a first attempt opens from CREATED, the instance is {state}"
        want = (0, 0)
    elif reason is OpenReason.RERUN:
        if not state.is_terminal:
            return f"illegal now: a rerun opens from a finished instance, this one is {state}"
        want = (0, 0)
    else:
        if state is not InstanceState.UP_FOR_RETRY or previous is None:
            return f"illegal now: a retry opens from UP_FOR_RETRY, the instance is {state}"
        want = _next_counters(previous, reason)
        expected_reason = _retry_reason(previous)
        if reason is not expected_reason:
            return f"evidence.reason: after {previous.state} the next attempt is {expected_reason}"
    if (retry_index, resubmit_index) != want:
        got = (retry_index, resubmit_index)
        return f"evidence.retry_index/resubmit_index: expected {want}, got {got}"
    return None


def _retry_reason(previous: AttemptView) -> OpenReason:
    if previous.state is AttemptState.NOT_RECEIVED:
        return OpenReason.RESUBMIT
    if previous.state is AttemptState.ABANDONED:
        return OpenReason.UNKNOWN_RETRY
    return OpenReason.RETRY


def _next_counters(previous: AttemptView, reason: OpenReason) -> tuple[int, int]:
    if reason is OpenReason.RESUBMIT:
        return previous.retry_index, previous.resubmit_index + 1
    return previous.retry_index + 1, previous.resubmit_index


def next_opening(snapshot: InstanceSnapshot) -> tuple[OpenReason, int, int] | None:
    """The reason and counters of the attempt the scheduler may open next, if any.

    Returns None unless the instance is CREATED (first attempt) or UP_FOR_RETRY; whether
    ``retry_at`` has come is the scheduler's to check against its clock.
    """
    if snapshot.state is InstanceState.CREATED and snapshot.epoch == 0:
        return OpenReason.FIRST, 0, 0
    previous = snapshot.current
    if snapshot.state is not InstanceState.UP_FOR_RETRY or previous is None:
        return None
    reason = _retry_reason(previous)
    retry_index, resubmit_index = _next_counters(previous, reason)
    return reason, retry_index, resubmit_index


def _staleness(snapshot: InstanceSnapshot, event: Event) -> str | None:
    if event.rule.level is Level.INSTANCE or event.kind is EventKind.ATTEMPT_OPENED:
        return None
    if is_instance_cancel(event):
        return None
    if event.attempt_no == 0:
        return None
    if event.attempt_no < snapshot.epoch:
        return (
            f"attempt {event.attempt_no} is superseded by attempt {snapshot.epoch}: "
            "kept on its own record, changes nothing else"
        )
    current = snapshot.current
    if current is not None and current.state is AttemptState.ABANDONED:
        return (
            f"attempt {event.attempt_no} was fenced off: kept on its record "
            f"({event.kind} after it was fenced), changes nothing else"
        )
    return None


def _conflict(
    before: InstanceSnapshot, after: InstanceSnapshot, event: Event, policy: TaskPolicy
) -> str | None:
    """A new completion whose result differs from one already held for the attempt."""
    prior = before.facts.attempt(event.attempt_no)
    merged = after.facts.attempt(event.attempt_no)
    view = after.attempt(event.attempt_no)
    if prior is None or merged is None or view is None or not prior.completions:
        return None
    known_ids = {c.mark.event_id for c in prior.completions}
    new = [c for c in merged.completions if c.mark.event_id not in known_ids]
    if not new:
        return None
    held = {folding.completion_result(c, merged, policy) for c in prior.completions}
    result = folding.completion_result(new[0], merged, policy)
    if held == {result}:
        return None
    others = ", ".join(sorted(held))
    return (
        f"attempt {event.attempt_no}: this completion says {result}, evidence already held says "
        f"{others}; by precedence the attempt is {view.state} ({view.reason})"
    )


def _describe(before: InstanceSnapshot, after: InstanceSnapshot, event: Event) -> str:
    if before.state is not after.state:
        return after.reason
    return f"recorded {event.kind}; the instance stays {after.state}"
