"""What workers and task code send: reports (``/callbacks/events``) and the commit check.

Both prove themselves with the attempt token from the ``Authorization`` header, never with an
API token. The token is authenticated first, before the body is read (:func:`sender_of`): it
names one attempt by the hash recorded when the attempt opened, and a token that names none is
refused with nothing stored. An attempt may write only its own events: a report about another
attempt is refused and kept as evidence about its sender; a report the judge refuses is kept
too (``ledger/rejections.py`` bounds both), and one that names a log other than its own
raises an alert.
"""

from __future__ import annotations

import uuid
from typing import Final

from veritask.core import alert_messages, judge, new_events, reasons, refusals, reports
from veritask.core.events import Event, names_a_foreign_log
from veritask.core.fold import AttemptView, InstanceSnapshot
from veritask.core.jsontypes import JSONObject
from veritask.core.states import AttemptState
from veritask.execution import wire
from veritask.ledger import alerts, dialects, queries
from veritask.ledger.ledger import Applied
from veritask.ledger.vocabulary import AlertCategory
from veritask.scheduling import intake
from veritask.services import views
from veritask.services.errors import Forbidden, InvalidInput, NotFound, StaleAttempt
from veritask.services.platform import Platform

#: Attempt states in which the platform no longer wants the attempt's work.
_UNWANTED: Final = frozenset(
    {
        AttemptState.CANCELLING,
        AttemptState.CANCEL_FAILED,
        AttemptState.ABANDONED,
        AttemptState.NOT_RECEIVED,
    }
)
#: Attempt states from which output may still be committed.
_MAY_COMMIT: Final = frozenset(
    {AttemptState.SCHEDULED, AttemptState.QUEUED, AttemptState.RUNNING, AttemptState.LOST}
)
_COMMIT_IDS: Final = uuid.UUID("6f1c2f4e-6a8e-4b59-9d0b-1c3e8f0a7b21")


def sender_of(platform: Platform, attempt_token: str) -> views.AttemptSender | None:
    """The attempt ``attempt_token`` belongs to, or None: it authenticates a callback."""
    if not attempt_token:
        return None
    with dialects.read_transaction(platform.engine) as connection:
        found = queries.attempt_of_token(connection, judge.hash_token(attempt_token))
    return None if found is None else views.AttemptSender(*found)


def record_worker_report(
    platform: Platform,
    payload: JSONObject,
    *,
    attempt_token: str,
    sender: views.AttemptSender,
) -> views.CallbackAnswer:
    """Record one worker event of ``sender`` and tell the worker what became of it.

    The event's token is the header's, whatever the body says. A duplicate answers with the
    outcome the event got the first time; ``stop`` is true when the attempt is no longer the
    current one, or is being stopped, fenced, or closed by a decision.
    """
    payload = {**payload, "attempt_token": attempt_token}
    try:
        wire.validate(payload)
        event = intake.to_event(payload)
    except (ValueError, OverflowError) as exc:  # MalformedReport is a ValueError too
        raise InvalidInput(f"not a worker event: {exc}", []) from None
    if (event.instance_id, event.attempt_no) != (sender.instance_id, sender.attempt_no):
        reason = reasons.OTHER_ATTEMPT.format(
            attempt_no=sender.attempt_no,
            instance_id=sender.instance_id,
            named_attempt=event.attempt_no,
            named_instance=event.instance_id,
        )
        platform.ledger.refuse(event, reason, sender=(sender.instance_id, sender.attempt_no))
        raise Forbidden(reason)
    loaded = platform.ledger.snapshot(event.instance_id)
    if loaded is None:  # removed since the token was looked up
        raise NotFound(refusals.NO_INSTANCE.format(instance_id=event.instance_id))
    snapshot, _ = loaded
    applied = platform.ledger.apply(event)
    intake.heed_verdict(platform.ledger, event, applied)
    if applied.outcome is judge.Outcome.REJECTED:
        if names_a_foreign_log(event):
            _alert_foreign_log(platform, event)
        raise _refused(event, applied)
    duplicate = applied.outcome is judge.Outcome.DUPLICATE
    outcome = (
        applied.original_outcome if duplicate and applied.original_outcome else applied.outcome
    )
    after = applied.snapshot or snapshot
    return views.CallbackAnswer(
        outcome=outcome.value,
        reason=applied.reason,
        stop=outcome is judge.Outcome.STALE or _unwanted(after, event.attempt_no),
        duplicate=duplicate,
    )


def _refused(event: Event, applied: Applied) -> InvalidInput:
    """The 422 for a refused report, naming its field when the report's checks name one."""
    refusal = reports.problem(event)
    if refusal is not None:
        return InvalidInput.about(f"body.{refusal.field}", refusal.message)
    if applied.over_limit is not None:
        return InvalidInput.about(f"body.{applied.over_limit.field}", applied.over_limit.message)
    return InvalidInput(f"refused: {applied.reason}", [])


def _alert_foreign_log(platform: Platform, event: Event) -> None:
    """A report named a file other than its attempt's log: a forgery or a broken worker."""
    with dialects.read_transaction(platform.engine) as connection:
        instance = queries.get_instance(connection, event.instance_id)
    path = str(event.evidence.get("log_path"))
    alerts.raise_quietly(
        platform.ledger,
        category=AlertCategory.PLATFORM,
        dedup_key=f"foreign-log:{event.instance_id}:{event.attempt_no}",
        message=alert_messages.FOREIGN_LOG_PATH.format(
            attempt_no=event.attempt_no, path=path[:200]
        ),
        run_id=instance.run_id if instance is not None else None,
        instance_id=event.instance_id,
        attempt_no=event.attempt_no,
        evidence={"event_id": event.event_id, "kind": event.kind.value, "log_path": path[:1000]},
    )


def commit_output(
    platform: Platform,
    *,
    instance_id: str,
    attempt_no: int,
    marker: str,
    attempt_token: str,
    sender: views.AttemptSender,
) -> views.CommitAccepted:
    """Let the attempt publish its output only if it is the current one, neither fenced nor
    stopped (invariant 2); record ``output_committed``. Raises ``StaleAttempt`` otherwise."""
    if (instance_id, attempt_no) != (sender.instance_id, sender.attempt_no):
        raise Forbidden(
            reasons.OTHER_ATTEMPT.format(
                attempt_no=sender.attempt_no,
                instance_id=sender.instance_id,
                named_attempt=attempt_no,
                named_instance=instance_id,
            )
        )
    if not marker.strip():
        raise InvalidInput.about("marker", "a commit names its output with a marker")
    loaded = platform.ledger.snapshot(instance_id)
    if loaded is None:
        raise NotFound(refusals.NO_INSTANCE.format(instance_id=instance_id))
    snapshot, _ = loaded
    attempt = snapshot.attempt(attempt_no)
    if attempt is None or not _token_fits(attempt, attempt_token):
        raise Forbidden(
            f"the attempt token does not belong to attempt {attempt_no} of instance {instance_id}"
        )
    _refuse_if_stale(snapshot, attempt)
    if attempt.commit_marker == marker:
        # A task that retries its commit (the answer was lost) is answered the same again.
        return views.CommitAccepted(instance_id, attempt_no, marker, judge.Outcome.APPLIED.value)
    event = new_events.output_committed(
        # One id per (attempt, marker): a task that retries its commit records it once.
        event_id=str(uuid.uuid5(_COMMIT_IDS, f"{instance_id}/{attempt_no}/{marker}")),
        instance_id=instance_id,
        attempt_no=attempt_no,
        event_time=platform.now(),
        marker=marker,
        via="commit_check",
        # A report number the attempt already used: the check proves no new liveness.
        seq=max(1, attempt.max_report_seq),
        attempt_token=attempt_token,
    )
    applied = platform.ledger.apply(event)
    if applied.outcome is judge.Outcome.REJECTED:
        raise InvalidInput(f"refused: {applied.reason}", [])
    outcome = applied.original_outcome or applied.outcome
    if outcome is judge.Outcome.STALE:
        # It was fenced between the check and the record: the fact is kept, the commit refused.
        current = applied.snapshot.state.value if applied.snapshot else None
        raise StaleAttempt(f"commit refused: {applied.reason}", current_state=current)
    return views.CommitAccepted(instance_id, attempt_no, marker, outcome.value)


def _token_fits(attempt: AttemptView | None, token: str) -> bool:
    return (
        attempt is not None
        and attempt.token_hash is not None
        and bool(token)
        and judge.token_matches(token, attempt.token_hash)
    )


def _refuse_if_stale(snapshot: InstanceSnapshot, attempt: AttemptView) -> None:
    if attempt.attempt_no != snapshot.epoch:
        raise StaleAttempt(
            f"commit refused: attempt {attempt.attempt_no} is stale, attempt {snapshot.epoch} "
            "owns the instance now",
            current_state=attempt.state.value,
        )
    if snapshot.override is not None:
        raise StaleAttempt(
            f"commit refused: an operator overrode attempt {attempt.attempt_no}",
            current_state=snapshot.state.value,
        )
    if attempt.state not in _MAY_COMMIT:
        raise StaleAttempt(
            f"commit refused: attempt {attempt.attempt_no} is {attempt.state} "
            f"({attempt.reason}); it may not publish",
            current_state=attempt.state.value,
        )


def _unwanted(snapshot: InstanceSnapshot, attempt_no: int) -> bool:
    """Whether the worker of ``attempt_no`` should stop its task now."""
    if attempt_no != snapshot.epoch or snapshot.override is not None:
        return True
    attempt = snapshot.attempt(attempt_no)
    if attempt is None:
        return True
    if attempt.state in _UNWANTED:
        return True
    # The instance was closed by a decision while this attempt still runs (a cancel with
    # nothing running, a removal): the attempt's own end would be a terminal state.
    return snapshot.state.is_terminal and not attempt.state.is_terminal
