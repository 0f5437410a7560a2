"""The fold: from the facts about an instance to the state a person sees.

The snapshot is a pure function of the *set* of events (through :mod:`veritask.core.facts`)
and the task's policy. Within the current attempt the strongest evidence decides
(docs/outcomes-and-fencing.md, 'The fold's precedence'):

1. an operator override of this epoch;
2. ``fenced`` (ABANDONED);
3. completion facts — the worker's report or the engine's terminal answer, strongest first;
4. the engine's confirmation of a stop (CANCELLED or TIMEOUT by cause);
5. ``never_received`` (NOT_RECEIVED); ``submit_failed`` (START_FAILED) while no worker reported;
6. ``cancel_unconfirmed`` (CANCEL_FAILED), then a stop request (CANCELLING);
7. ``lease_expired`` with no report past what it saw (LOST), unless the engine reported the
   process running after it (RUNNING: the engine's word renews the lease);
8. worker reports (RUNNING);
9. the executor's acknowledgement (QUEUED), then the opening (SCHEDULED).

The instance state follows from the current attempt, the retry policy and the instance-level
decisions (skip, upstream failure, removal, a cancel while nothing runs, override).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from veritask.core import reasons
from veritask.core.events import ErrorCategory, Event, EventKind, OpenReason, StopCause
from veritask.core.facts import AttemptFacts, Completion, InstanceFacts, Mark, merge
from veritask.core.jsontypes import JSONValue
from veritask.core.policy import OnUnknown, TaskPolicy
from veritask.core.states import AttemptState, EngineState, InstanceState


@dataclass(frozen=True)
class Progress:
    """What the task said about how far it got."""

    phase: str
    done: int | None
    total: int | None
    message: str | None


@dataclass(frozen=True)
class AttemptView:
    """One attempt as the fold sees it: its state, why, and its record."""

    attempt_no: int
    state: AttemptState
    reason: str
    open_reason: OpenReason | None
    retry_index: int
    resubmit_index: int
    token_hash: str | None
    executor: str | None
    external_id: str | None
    worker: str | None
    scheduled_at: datetime | None
    queued_at: datetime | None
    started_at: datetime | None
    ended_at: datetime | None
    ended_observed_at: datetime | None
    last_report_at: datetime | None
    last_report_observed_at: datetime | None
    engine_vouched_at: datetime | None
    """When the engine last reported the process running: a new lease, as a report is."""
    max_report_seq: int
    exit_code: int | None
    error_category: str | None
    progress: Progress | None
    commit_marker: str | None
    log_location: str | None
    stop_cause: StopCause | None
    on_unknown: OnUnknown | None
    retry_blocked: bool
    conflict: bool
    late: tuple[str, ...]

    @property
    def is_active(self) -> bool:
        return not self.state.is_terminal


@dataclass(frozen=True)
class InstanceSnapshot:
    """The state of one instance, derived from its facts."""

    instance_id: str
    state: InstanceState
    reason: str
    epoch: int
    retry_at: datetime | None
    attempts: tuple[AttemptView, ...]
    override: Mark | None
    facts: InstanceFacts

    @property
    def cleared(self) -> bool:
        """Whether a clear opened the current epoch and no attempt opened in it yet."""
        return self.facts.cleared_epoch()

    @property
    def current(self) -> AttemptView | None:
        """The attempt of the current epoch, if one was opened."""
        for view in self.attempts:
            if view.attempt_no == self.epoch:
                return view
        return None

    def attempt(self, attempt_no: int) -> AttemptView | None:
        for view in self.attempts:
            if view.attempt_no == attempt_no:
                return view
        return None


def empty(instance_id: str) -> InstanceFacts:
    """The facts of an instance before any event."""
    return InstanceFacts(instance_id)


def fold(instance_id: str, events: Iterable[Event], policy: TaskPolicy) -> InstanceSnapshot:
    """The snapshot of an instance from the set of its recorded events.

    Events are merged in a canonical order for readability of traces only; the result does not
    depend on it (see :mod:`veritask.core.facts`).
    """
    facts = empty(instance_id)
    for event in sorted(events, key=Event.ordering_key):
        facts = merge(facts, event)
    return derive(facts, policy)


def step(snapshot: InstanceSnapshot, event: Event, policy: TaskPolicy) -> InstanceSnapshot:
    """Fold one more event into a snapshot."""
    return derive(merge(snapshot.facts, event), policy)


def derive(facts: InstanceFacts, policy: TaskPolicy) -> InstanceSnapshot:
    """The snapshot that the facts and the policy imply."""
    views = tuple(_view(a, policy) for a in facts.attempts if a.opened is not None)
    epoch = facts.epoch
    current = next((v for v in views if v.attempt_no == epoch), None)
    override = facts.decision(epoch, EventKind.OVERRIDE)
    state, reason, retry_at = _instance_state(facts, current, policy)
    if override is not None:
        to_state = InstanceState(str(override.evidence["to_state"]))
        reason = reasons.OVERRIDDEN.format(
            to_state=to_state,
            actor=override.actor,
            why=override.evidence["reason"],
            state=state,
            reason=reason,
        )
        state, retry_at = to_state, None
    return InstanceSnapshot(
        facts.instance_id, state, reason, epoch, retry_at, views, override, facts
    )


def _instance_state(
    facts: InstanceFacts, current: AttemptView | None, policy: TaskPolicy
) -> tuple[InstanceState, str, datetime | None]:
    epoch = facts.epoch
    removed = facts.decision(epoch, EventKind.REMOVED)
    if removed is not None:
        return InstanceState.REMOVED, reasons.REMOVED.format(), None
    cancel = facts.decision(epoch, EventKind.CANCEL_REQUESTED)
    if cancel is not None:
        phrase = (
            reasons.CANCELLED_BEFORE_ANY_ATTEMPT
            if current is None
            else reasons.CANCELLED_WAITING_TO_RETRY
        )
        why = phrase.format(actor=cancel.actor, why=cancel.evidence["reason"])
        return InstanceState.CANCELLED, why, None
    if current is None:
        expanded = facts.decision(epoch, EventKind.MAP_EXPANDED)
        if expanded is not None:
            why = reasons.MAP_EXPANDED.format(
                count=expanded.evidence["count"], task=expanded.evidence["over"]
            )
            return InstanceState.SUCCESS, why, None
        for kind, state in (
            (EventKind.UPSTREAM_FAILED, InstanceState.UPSTREAM_FAILED),
            (EventKind.SKIPPED, InstanceState.SKIPPED),
        ):
            mark = facts.decision(epoch, kind)
            if mark is not None:
                return state, reasons.TRIGGER_RULE.format(rule=mark.evidence["rule"]), None
        cleared = facts.decision(epoch, EventKind.CLEARED)
        if cleared is not None:
            why = reasons.CLEARED_WAITING.format(
                actor=cleared.actor, why=cleared.evidence["reason"]
            )
            return InstanceState.CREATED, why, None
        return InstanceState.CREATED, reasons.WAITING.format(), None
    return _from_attempt(facts.instance_id, current, policy)


_SAME_NAME = {
    AttemptState.SCHEDULED: InstanceState.SCHEDULED,
    AttemptState.QUEUED: InstanceState.QUEUED,
    AttemptState.RUNNING: InstanceState.RUNNING,
    AttemptState.LOST: InstanceState.LOST,
    AttemptState.CANCELLING: InstanceState.CANCELLING,
    AttemptState.CANCEL_FAILED: InstanceState.CANCEL_FAILED,
    AttemptState.SUCCESS: InstanceState.SUCCESS,
    AttemptState.SKIPPED: InstanceState.SKIPPED,
    AttemptState.CANCELLED: InstanceState.CANCELLED,
    AttemptState.FAILED: InstanceState.FAILED,
    AttemptState.START_FAILED: InstanceState.START_FAILED,
    AttemptState.TIMEOUT: InstanceState.TIMEOUT,
}


def _from_attempt(
    instance_id: str, a: AttemptView, policy: TaskPolicy
) -> tuple[InstanceState, str, datetime | None]:
    label = reasons.ATTEMPT.format(attempt_no=a.attempt_no, reason=a.reason)
    ended = a.ended_observed_at or a.ended_at
    if a.state is AttemptState.NOT_RECEIVED:
        if a.resubmit_index < policy.max_resubmits and ended is not None:
            return InstanceState.UP_FOR_RETRY, reasons.RESUBMITTING.format(reason=label), ended
        limit = reasons.NEVER_RECEIVED_TIMES.format(reason=label, count=a.resubmit_index + 1)
        return InstanceState.START_FAILED, limit, None
    if a.state is AttemptState.ABANDONED:
        if a.on_unknown is OnUnknown.RETRY and ended is not None:
            if a.retry_index < policy.retry.max_retries:
                return InstanceState.UP_FOR_RETRY, reasons.OPENING_NEXT.format(reason=label), ended
            return InstanceState.FAILED, reasons.NO_RETRIES_LEFT.format(reason=label), None
        return InstanceState.FAILED, reasons.ON_UNKNOWN_FAIL.format(reason=label), None
    state = _SAME_NAME[a.state]
    if a.state not in policy.retry.retry_on or ended is None:
        return state, label, None
    if a.stop_cause is StopCause.CANCEL:
        return state, reasons.NO_RETRY_AFTER_CANCEL.format(reason=label), None
    if a.state is AttemptState.START_FAILED and a.retry_blocked:
        return state, reasons.RETRY_CANNOT_HELP.format(reason=label), None
    allowed = policy.retry.max_retries
    if a.retry_index >= allowed:
        return state, reasons.NO_RETRIES_ALLOWED.format(reason=label, allowed=allowed), None
    number = a.retry_index + 1
    delay = policy.retry.delay_before(retry_number=number, seed=f"{instance_id}/{a.attempt_no}")
    retry_at = ended + delay
    why = reasons.RETRY_AT.format(
        reason=label, number=number, allowed=allowed, at=retry_at.isoformat()
    )
    return InstanceState.UP_FOR_RETRY, why, retry_at


def _view(a: AttemptFacts, policy: TaskPolicy) -> AttemptView:
    opened = a.opened
    if opened is None:
        raise ValueError(f"attempt {a.attempt_no} was never opened")
    state, reason, decisive = _attempt_state(a, policy)
    best = a.completions[0] if a.completions else None
    ended = decisive if state.is_terminal else None
    started = a.started or a.first_report
    ack = a.acknowledged
    ev = opened.evidence
    return AttemptView(
        attempt_no=a.attempt_no,
        state=state,
        reason=reason,
        open_reason=OpenReason(str(ev["reason"])),
        retry_index=_int(ev["retry_index"]),
        resubmit_index=_int(ev["resubmit_index"]),
        token_hash=_str(ev.get("token_hash")),
        executor=_str(ack.evidence.get("executor")) if ack else None,
        external_id=_str(ack.evidence.get("external_id")) if ack else None,
        worker=_str(a.started.evidence.get("worker")) if a.started else None,
        scheduled_at=opened.event_time,
        queued_at=ack.event_time if ack else None,
        started_at=started.event_time if started else None,
        ended_at=ended.event_time if ended else None,
        ended_observed_at=ended.observed_at if ended else None,
        last_report_at=a.last_report.event_time if a.last_report else None,
        last_report_observed_at=a.last_report.platform_time if a.last_report else None,
        engine_vouched_at=a.engine_vouched.platform_time if a.engine_vouched else None,
        max_report_seq=a.max_report_seq,
        exit_code=best.exit_code if best else None,
        error_category=best.category.value if best and best.category else None,
        progress=_progress(a.progress),
        commit_marker=_commit_marker(a),
        log_location=_log_location(a),
        stop_cause=_stop_cause(a),
        on_unknown=OnUnknown(str(a.fenced.evidence["on_unknown"])) if a.fenced else None,
        retry_blocked=bool(a.submit_failed and a.submit_failed.evidence.get("retryable") is False),
        conflict=len({_completion_state(c, a, policy)[0] for c in a.completions}) > 1,
        late=_late_notes(a, state, policy),
    )


def _attempt_state(a: AttemptFacts, policy: TaskPolicy) -> tuple[AttemptState, str, Mark | None]:
    """The attempt's state by precedence, a sentence why, and the event that decided it."""
    stop = a.stop_requested
    if a.fenced is not None:
        return (
            AttemptState.ABANDONED,
            reasons.FENCED.format(why=a.fenced.evidence["reason"]),
            a.fenced,
        )
    if a.completions:
        best = a.completions[0]
        state, why = _completion_state(best, a, policy)
        if len({_completion_state(c, a, policy)[0] for c in a.completions}) > 1:
            why = reasons.EVIDENCE_DISAGREES.format(reason=why)
        if stop is not None and state not in (AttemptState.CANCELLED, AttemptState.TIMEOUT):
            timeout = stop.kind is EventKind.TIMEOUT_REQUESTED
            lost = reasons.TIMEOUT_LOST_RACE if timeout else reasons.CANCEL_LOST_RACE
            why = lost.format(reason=why)
        return state, why, best.mark
    if a.cancel_confirmed is not None:
        state = (
            AttemptState.TIMEOUT if _stop_cause(a) is StopCause.TIMEOUT else AttemptState.CANCELLED
        )
        source = a.cancel_confirmed.evidence["source"]
        return state, reasons.STOP_CONFIRMED.format(source=source), a.cancel_confirmed
    if a.never_received is not None:
        return AttemptState.NOT_RECEIVED, reasons.NEVER_RECEIVED.format(), a.never_received
    if a.submit_failed is not None and a.max_report_seq == 0:
        error = a.submit_failed.evidence["error"]
        why = reasons.COULD_NOT_START.format(error=error)
        return AttemptState.START_FAILED, why, a.submit_failed
    if a.cancel_unconfirmed is not None:
        return AttemptState.CANCEL_FAILED, reasons.STOP_UNCONFIRMED.format(), None
    if stop is not None:
        timeout = stop.kind is EventKind.TIMEOUT_REQUESTED
        requested = reasons.TIMEOUT_REQUESTED if timeout else reasons.CANCEL_REQUESTED
        return AttemptState.CANCELLING, requested.format(actor=stop.actor), None
    if a.lease_expired is not None and a.max_report_seq <= a.lease_basis:
        vouched = a.engine_vouched
        if vouched is not None and vouched.key > a.lease_expired.key:
            source = vouched.evidence["source"]
            return AttemptState.RUNNING, reasons.ENGINE_VOUCHES.format(source=source), None
        expiry = a.lease_expired.evidence["lease_expires_at"]
        return AttemptState.LOST, reasons.LEASE_EXPIRED.format(at=expiry), None
    if a.max_report_seq > 0:
        return AttemptState.RUNNING, reasons.REPORTS_RUNNING.format(), None
    if a.acknowledged is not None:
        return AttemptState.QUEUED, reasons.ACKNOWLEDGED.format(), None
    return AttemptState.SCHEDULED, reasons.OPENED.format(), None


def _completion_state(
    c: Completion, a: AttemptFacts, policy: TaskPolicy
) -> tuple[AttemptState, str]:
    """What one completion fact proves, given the stop requests and the policy."""
    who = (
        reasons.THE_WORKER.format()
        if c.mark.kind is EventKind.COMPLETED
        else reasons.THE_ENGINE.format(source=c.mark.evidence["source"])
    )
    exit_text = (
        reasons.EXIT.format(code=c.exit_code)
        if c.exit_code is not None
        else reasons.NO_EXIT_CODE.format()
    )
    stopped_by_us = _stop_cause(a)
    category = c.category
    if category is None:
        category = ErrorCategory.NONE if c.engine_state is EngineState.SUCCEEDED else None
    if category is ErrorCategory.NONE:
        if policy.requires_commit and not (c.commit_marker or a.committed):
            return AttemptState.FAILED, reasons.REPORTED_NO_MARKER.format(who=who, exit=exit_text)
        return AttemptState.SUCCESS, reasons.REPORTED.format(who=who, exit=exit_text)
    if category is ErrorCategory.SKIPPED:
        return AttemptState.SKIPPED, reasons.SKIPPED_ITSELF.format(who=who, exit=exit_text)
    if category is ErrorCategory.TIMEOUT:
        return AttemptState.TIMEOUT, reasons.STOPPED_AT_TIMEOUT.format(who=who)
    if category is ErrorCategory.START_ERROR:
        # The worker says why when it knows (an unknown secret, a refused environment).
        error = c.mark.evidence.get("start_error")
        if isinstance(error, str):
            why = reasons.COULD_NOT_START_TASK_BECAUSE.format(who=who, error=error)
            return AttemptState.START_FAILED, why
        return AttemptState.START_FAILED, reasons.COULD_NOT_START_TASK.format(who=who)
    if category in (ErrorCategory.CANCELLED, ErrorCategory.KILLED, None):
        if stopped_by_us is StopCause.TIMEOUT:
            why = reasons.STOPPED_AT_OUR_TIMEOUT.format(who=who, exit=exit_text)
            return AttemptState.TIMEOUT, why
        if stopped_by_us is StopCause.CANCEL:
            why = reasons.STOPPED_ON_REQUEST.format(who=who, exit=exit_text)
            return AttemptState.CANCELLED, why
        if category is None:
            return AttemptState.FAILED, reasons.REPORTED_FAILURE.format(who=who, exit=exit_text)
        return AttemptState.FAILED, reasons.KILLED_BY_SIGNAL.format(who=who)
    return AttemptState.FAILED, reasons.REPORTED.format(who=who, exit=exit_text)


def completion_result(c: Completion, a: AttemptFacts, policy: TaskPolicy) -> AttemptState:
    """The attempt state that one completion fact proves on its own."""
    return _completion_state(c, a, policy)[0]


def _stop_cause(a: AttemptFacts) -> StopCause | None:
    stop = a.stop_requested
    if stop is None:
        return None
    return StopCause.TIMEOUT if stop.kind is EventKind.TIMEOUT_REQUESTED else StopCause.CANCEL


def _late_notes(a: AttemptFacts, state: AttemptState, policy: TaskPolicy) -> tuple[str, ...]:
    """Facts kept on the record that arrived after a decision closed the attempt."""
    notes: list[str] = []
    if state is AttemptState.ABANDONED:
        for c in a.completions:
            result, _ = _completion_state(c, a, policy)
            late = reasons.LATE_AFTER_ABANDONED.format(
                state=result.lower(), event_id=c.mark.event_id
            )
            notes.append(late)
    if state is AttemptState.NOT_RECEIVED and a.max_report_seq > 0:
        # A completion would outrank the decision; a report without one only adds this note.
        notes.append(reasons.REPORTED_AFTER_NOT_RECEIVED.format())
    return tuple(notes)


def _commit_marker(a: AttemptFacts) -> str | None:
    for c in a.completions:
        if c.commit_marker:
            return c.commit_marker
    return _str(a.committed.evidence.get("marker")) if a.committed else None


def _log_location(a: AttemptFacts) -> str | None:
    """Where the worker keeps the attempt's log, from its start or its completion report."""
    for mark in (a.started, *(c.mark for c in a.completions)):
        if mark is not None and isinstance(mark.evidence.get("log_path"), str):
            return _str(mark.evidence["log_path"])
    return None


def _progress(mark: Mark | None) -> Progress | None:
    if mark is None:
        return None
    ev = mark.evidence
    return Progress(
        str(ev["phase"]),
        _opt_int(ev.get("done")),
        _opt_int(ev.get("total")),
        _str(ev.get("message")),
    )


def _int(value: JSONValue) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _opt_int(value: JSONValue) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: JSONValue) -> str | None:
    return value if isinstance(value, str) else None
