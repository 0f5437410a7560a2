"""How an arriving event is classified against the snapshot (docs/outcomes-and-fencing.md).

``judge`` is pure: the ledger passes the snapshot it read, the fingerprint of an event already
recorded under the same id (if any), and gets back the outcome, a sentence a person can read
and the snapshot after. The ledger then writes that snapshot with compare-and-set.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from enum import StrEnum
from typing import assert_never

from veritask.core import fold as folding
from veritask.core import reasons, reports, transitions
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
    #: Set when a well-formed report was refused for its attempt's limit (counted, not kept).
    over_limit: reports.Refusal | None = None

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
    progress_bytes: int = 0,
) -> Verdict:
    """Classify ``event`` against ``snapshot``; ``known_fingerprint`` is that of an event
    already recorded under the same id, if there is one; ``progress_bytes`` the progress its
    attempt has recorded so far (the ledger counts it)."""

    def verdict(outcome: Outcome, reason: str, after: InstanceSnapshot = snapshot) -> Verdict:
        return Verdict(event, outcome, reason, snapshot, after)

    if known_fingerprint is not None:
        if known_fingerprint == fingerprint(event):
            return verdict(
                Outcome.DUPLICATE, reasons.ALREADY_RECORDED.format(event_id=event.event_id)
            )
        return verdict(Outcome.REJECTED, reasons.ID_REUSED.format(event_id=event.event_id))
    refusal = reports.problem(event)
    if refusal is not None:
        return verdict(Outcome.REJECTED, refusal.reason)
    problem = malformation(event) or _subject_problem(snapshot, event)
    if problem is None and event.is_decision:
        problem = _decision_problem(snapshot, event)
    if problem is not None:
        return verdict(Outcome.REJECTED, problem)
    limited = reports.over_limit(
        snapshot.facts.attempt(event.attempt_no),
        event,
        lease=policy.lease,
        progress_bytes=progress_bytes,
    )
    if limited is not None:
        return Verdict(event, Outcome.REJECTED, limited.reason, snapshot, snapshot, limited)
    after = folding.step(snapshot, event, policy)
    off_the_table = _off_the_table(snapshot, after, event)
    if off_the_table is not None:
        return verdict(Outcome.REJECTED, off_the_table)
    stale = _staleness(snapshot, event)
    if stale is not None:
        return verdict(Outcome.STALE, stale, after)
    conflict = _conflict(snapshot, after, event, policy)
    if conflict is not None:
        return verdict(Outcome.CONFLICT, conflict, after)
    return verdict(Outcome.APPLIED, _describe(snapshot, after, event), after)


def _subject_problem(snapshot: InstanceSnapshot, event: Event) -> str | None:
    if event.instance_id != snapshot.instance_id:
        return reasons.OTHER_INSTANCE.format(got=event.instance_id, expected=snapshot.instance_id)
    if event.kind is not EventKind.INSTANCE_CREATED and snapshot.facts.created is None:
        return reasons.NEVER_CREATED.format(instance_id=event.instance_id)
    level = event.rule.level
    if level is Level.ATTEMPT and event.kind is not EventKind.ATTEMPT_OPENED:
        if is_instance_cancel(event):
            return None
        attempt = snapshot.attempt(event.attempt_no)
        if attempt is None:
            return reasons.NEVER_OPENED.format(attempt_no=event.attempt_no)
        if event.attempt_token is not None or event.actor == "worker":
            token = event.attempt_token or ""
            if attempt.token_hash is None or not token_matches(token, attempt.token_hash):
                return reasons.TOKEN_MISMATCH.format(attempt_no=event.attempt_no)
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
    if kind is EventKind.INSTANCE_CREATED:
        created = snapshot.facts.created
        if created is not None:
            return reasons.ALREADY_CREATED.format(event_id=created.event_id)
        return None
    if kind is EventKind.ATTEMPT_OPENED:
        return _opening_problem(snapshot, event)
    if kind is EventKind.CLEARED:
        return _clearing_problem(snapshot, event)
    if event.attempt_no != epoch:
        return reasons.NOT_THE_EPOCH.format(epoch=epoch, attempt_no=event.attempt_no)
    attempt_state = current.state if current is not None else None
    match kind:
        case EventKind.LEASE_EXPIRED:
            if attempt_state is not AttemptState.RUNNING or current is None:
                return reasons.ILLEGAL_LEASE.format(state=state)
            seen = event.evidence["last_report_seq"]
            if seen != current.max_report_seq:
                held = current.max_report_seq
                return reasons.STALE_DECISION.format(seen=seen, held=held)
        case EventKind.TIMEOUT_REQUESTED:
            if attempt_state not in (AttemptState.QUEUED, AttemptState.RUNNING, AttemptState.LOST):
                return reasons.ILLEGAL_TIMEOUT.format(state=state)
        case EventKind.CANCEL_REQUESTED:
            if is_instance_cancel(event):
                if state not in (InstanceState.CREATED, InstanceState.UP_FOR_RETRY):
                    return reasons.ILLEGAL_IDLE_CANCEL.format(state=state)
            elif attempt_state not in _RUNNABLE_STOP:
                return reasons.NOTHING_TO_STOP.format(state=state)
        case EventKind.CANCEL_UNCONFIRMED:
            if attempt_state is not AttemptState.CANCELLING:
                return reasons.ILLEGAL_UNCONFIRMED.format(state=state)
        case EventKind.NEVER_RECEIVED:
            if attempt_state not in (AttemptState.SCHEDULED, AttemptState.QUEUED) or (
                current is not None and current.max_report_seq > 0
            ):
                return reasons.ILLEGAL_NEVER_RECEIVED.format(state=state)
        case EventKind.FENCED:
            if attempt_state is AttemptState.RUNNING and current is not None:
                facts = snapshot.facts.attempt(current.attempt_no)
                if facts is None or facts.absent_since is None:
                    return reasons.FENCE_WHILE_HEARD.format()
            elif attempt_state not in (AttemptState.LOST, AttemptState.QUEUED):
                return reasons.ILLEGAL_FENCE.format(state=state)
            if event.evidence["on_unknown"] not in (OnUnknown.RETRY, OnUnknown.FAIL):
                return reasons.FENCE_ON_UNKNOWN.format()
        case EventKind.OVERRIDE:
            if attempt_state in _OVERRIDE_BLOCKERS:
                return reasons.STOP_BEFORE_OVERRIDE.format(state=state, epoch=epoch)
        case EventKind.SKIPPED | EventKind.UPSTREAM_FAILED | EventKind.MAP_EXPANDED:
            if state is not InstanceState.CREATED or current is not None:
                return reasons.ILLEGAL_RULE.format(state=state)
        case EventKind.REMOVED:
            if attempt_state is not None and not attempt_state.is_terminal:
                return reasons.STILL_ACTIVE.format(state=state, epoch=epoch)
        case (
            EventKind.SUBMIT_ACKNOWLEDGED
            | EventKind.SUBMIT_FAILED
            | EventKind.STARTED
            | EventKind.HEARTBEAT
            | EventKind.PROGRESS
            | EventKind.OUTPUT_COMMITTED
            | EventKind.COMPLETED
            | EventKind.CANCEL_CONFIRMED
            | EventKind.ENGINE_OBSERVED
        ):
            return None  # facts, not decisions: no snapshot has to justify them
        case _:
            assert_never(kind)
    return None


def _clearing_problem(snapshot: InstanceSnapshot, event: Event) -> str | None:
    expected = snapshot.epoch + 1
    if event.attempt_no != expected:
        return reasons.CLEAR_OPENS_THE_EPOCH.format(expected=expected, attempt_no=event.attempt_no)
    if not snapshot.state.is_terminal:
        return reasons.CLEAR_FROM_FINISHED.format(state=snapshot.state)
    return None


def next_attempt_no(snapshot: InstanceSnapshot) -> int:
    """The number the next attempt opens under: that of the epoch a clear opened, if any."""
    return snapshot.epoch if snapshot.cleared else snapshot.epoch + 1


def _opening_problem(snapshot: InstanceSnapshot, event: Event) -> str | None:
    state = snapshot.state
    expected = next_attempt_no(snapshot)
    if event.attempt_no != expected:
        return reasons.NEXT_ATTEMPT_IS.format(expected=expected, got=event.attempt_no)
    reason = OpenReason(str(event.evidence["reason"]))
    retry_index = event.evidence["retry_index"]
    resubmit_index = event.evidence["resubmit_index"]
    previous = snapshot.current
    if snapshot.cleared:
        if state is not InstanceState.CREATED:
            return reasons.FIRST_FROM_CREATED.format(state=state)
        if reason is not OpenReason.RERUN:
            return reasons.RERUN_AFTER_CLEAR.format(reason=reason)
        want = (0, 0)
    elif reason is OpenReason.FIRST:
        if state is not InstanceState.CREATED or previous is not None:
            return reasons.FIRST_FROM_CREATED.format(state=state)
        want = (0, 0)
    elif reason is OpenReason.RERUN:
        if not state.is_terminal:
            return reasons.RERUN_FROM_FINISHED.format(state=state)
        want = (0, 0)
    else:
        if state is not InstanceState.UP_FOR_RETRY or previous is None:
            return reasons.RETRY_FROM_UP_FOR_RETRY.format(state=state)
        want = _next_counters(previous, reason)
        expected_reason = _retry_reason(previous)
        if reason is not expected_reason:
            return reasons.NEXT_OPEN_REASON.format(state=previous.state, expected=expected_reason)
    if (retry_index, resubmit_index) != want:
        got = (retry_index, resubmit_index)
        return reasons.COUNTERS.format(want=want, got=got)
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
    if snapshot.state is InstanceState.CREATED and snapshot.cleared:
        return OpenReason.RERUN, 0, 0
    if snapshot.state is InstanceState.CREATED and snapshot.epoch == 0:
        return OpenReason.FIRST, 0, 0
    previous = snapshot.current
    if snapshot.state is not InstanceState.UP_FOR_RETRY or previous is None:
        return None
    reason = _retry_reason(previous)
    retry_index, resubmit_index = _next_counters(previous, reason)
    return reason, retry_index, resubmit_index


def _off_the_table(before: InstanceSnapshot, after: InstanceSnapshot, event: Event) -> str | None:
    """Why folding ``event`` would make a move the transition table does not hold, or None.

    The table is law at run time: one dict lookup per state that changed (the instance's, and
    that of the attempt the event names), so the ledger's hot path stays as it was.
    """
    kind = event.kind
    if (
        before.state is not after.state
        and (before.state, after.state, kind) not in transitions.INSTANCE_EDGES
    ):
        return reasons.OFF_THE_TABLE.format(
            source=before.state,
            target=after.state,
            kind=kind,
            rules=transitions.rules_for(kind, transitions.INSTANCE_RULES),
        )
    if event.attempt_no < 1:
        return None
    was, now = before.attempt(event.attempt_no), after.attempt(event.attempt_no)
    if (
        was is not None
        and now is not None
        and was.state is not now.state
        and (was.state, now.state, kind) not in transitions.ATTEMPT_EDGES
    ):
        return reasons.ATTEMPT_OFF_THE_TABLE.format(
            attempt_no=event.attempt_no,
            source=was.state,
            target=now.state,
            kind=kind,
            rules=transitions.rules_for(kind, transitions.ATTEMPT_RULES),
        )
    return None


def _staleness(snapshot: InstanceSnapshot, event: Event) -> str | None:
    if event.rule.level is Level.INSTANCE or event.kind is EventKind.ATTEMPT_OPENED:
        return None
    if is_instance_cancel(event):
        return None
    if event.attempt_no == 0:
        return None
    if event.attempt_no < snapshot.epoch:
        return reasons.SUPERSEDED.format(attempt_no=event.attempt_no, epoch=snapshot.epoch)
    current = snapshot.current
    if current is not None and current.state is AttemptState.ABANDONED:
        return reasons.FENCED_OFF.format(attempt_no=event.attempt_no, kind=event.kind)
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
    return reasons.COMPLETIONS_DISAGREE.format(
        attempt_no=event.attempt_no,
        result=result,
        held=others,
        state=view.state,
        reason=view.reason,
    )


def _describe(before: InstanceSnapshot, after: InstanceSnapshot, event: Event) -> str:
    if before.state is not after.state:
        return after.reason
    return reasons.STAYS.format(kind=event.kind, state=after.state)
