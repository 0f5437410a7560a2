"""The platform's decisions as pure functions of a snapshot, an observation and the time.

The monitor, the reconciler and the scheduler are loops in :mod:`veritask.scheduling`; each of
their decisions is taken here, so the same rules run in the loops, in the simulator and in the
tests. Ids come from the caller (``next_id``), and so does the time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from veritask.core import alert_messages, judge, new_events, reasons
from veritask.core.events import Event
from veritask.core.fold import AttemptView, InstanceSnapshot
from veritask.core.jsontypes import JSONObject
from veritask.core.phrases import Phrase
from veritask.core.policy import OnUnknown, TaskPolicy
from veritask.core.states import PROCESSES_ENDED, AttemptState, EngineState, InstanceState

NextId = Callable[[], str]


@dataclass(frozen=True)
class Observation:
    """What an engine said about an attempt, and where the answer came from."""

    engine_state: EngineState
    source: str
    observed_at: datetime
    exit_code: int | None = None
    error_category: str | None = None
    commit_marker: str | None = None
    details: JSONObject = field(default_factory=dict)

    def evidence(self) -> JSONObject:
        return {
            "engine_state": self.engine_state.value,
            "source": self.source,
            "exit_code": self.exit_code,
            "error_category": self.error_category,
            "commit_marker": self.commit_marker,
            "engine_observed_at": self.observed_at.isoformat(),
            "details": self.details,
        }


@dataclass(frozen=True)
class Reconciliation:
    """The events to record and what to ask of the engine."""

    events: tuple[Event, ...] = ()
    stop_engine: bool = False
    """Ask the engine to stop the attempt (again), before anything replaces it."""
    submit: bool = False
    """Submit the opened attempt (idempotently): the engine does not have it yet."""
    alert: str | None = None
    """A sentence for an alert: the evidence stays inconclusive and the policy says wait."""


def open_attempt(
    snapshot: InstanceSnapshot,
    *,
    token_hash: str,
    now: datetime,
    event_id: str,
    nonce: str | None = None,
) -> Event | None:
    """The scheduler's ``attempt_opened`` if the instance may open its next attempt now.

    Dependencies and concurrency are the caller's to check; this checks the state and
    ``retry_at``. ``nonce`` is kept in the evidence when the caller rebuilds tokens from it.
    """
    opening = judge.next_opening(snapshot)
    if opening is None:
        return None
    if snapshot.retry_at is not None and now < snapshot.retry_at:
        return None
    reason, retry_index, resubmit_index = opening
    return new_events.attempt_opened(
        event_id=event_id,
        instance_id=snapshot.instance_id,
        attempt_no=judge.next_attempt_no(snapshot),
        event_time=now,
        token_hash=token_hash,
        reason=reason,
        retry_index=retry_index,
        resubmit_index=resubmit_index,
        nonce=nonce,
    )


def monitor(
    snapshot: InstanceSnapshot, policy: TaskPolicy, *, now: datetime, next_id: NextId
) -> list[Event]:
    """Leases and timeouts of the current attempt: ``lease_expired``, ``timeout_requested``."""
    current = snapshot.current
    if current is None or snapshot.override is not None:
        return []
    events: list[Event] = []
    if current.state is AttemptState.RUNNING:
        expires = lease_expiry(current, policy)
        if expires is not None and now >= expires:
            events.append(
                new_events.lease_expired(
                    event_id=next_id(),
                    instance_id=snapshot.instance_id,
                    attempt_no=snapshot.epoch,
                    event_time=now,
                    last_report_seq=current.max_report_seq,
                    lease_expires_at=expires,
                    last_report_at=current.last_report_at,
                    lease_seconds=policy.lease.total_seconds(),
                )
            )
    deadline = timeout_deadline(current, policy)
    running = current.state in (AttemptState.QUEUED, AttemptState.RUNNING, AttemptState.LOST)
    timeout = policy.timeout
    if deadline and timeout and running and now >= deadline and current.stop_cause is None:
        events.append(
            new_events.timeout_requested(
                event_id=next_id(),
                instance_id=snapshot.instance_id,
                attempt_no=snapshot.epoch,
                event_time=now,
                timeout_seconds=timeout.total_seconds(),
                started_at=current.started_at,
                reason=reasons.RAN_PAST_TIMEOUT.format(),
            )
        )
        # A timeout stops the attempt; a lease decision on the same snapshot would be moot.
        return events[-1:]
    return events


def lease_expiry(attempt: AttemptView, policy: TaskPolicy) -> datetime | None:
    """When the attempt's lease runs out, by the platform's clock.

    A report renews the lease, and so does the engine's word that the process runs.
    """
    renewed = [t for t in (attempt.last_report_observed_at, attempt.engine_vouched_at) if t]
    if not renewed:
        return None
    return max(renewed) + policy.lease


#: The monitor's due time of a running attempt whose lease nobody has renewed yet: at once.
DUE_AT_ONCE = datetime(1970, 1, 1, tzinfo=UTC)


def monitor_due(attempt: AttemptView, policy: TaskPolicy) -> datetime | None:
    """When the monitor must look at a running attempt again: its lease's end or its timeout,
    whichever comes first (None for an attempt that is not running)."""
    if attempt.state is not AttemptState.RUNNING:
        return None
    due = lease_expiry(attempt, policy) or DUE_AT_ONCE
    deadline = timeout_deadline(attempt, policy)
    return due if deadline is None else min(due, deadline)


def timeout_deadline(attempt: AttemptView, policy: TaskPolicy) -> datetime | None:
    """When the attempt has run for its whole timeout."""
    if policy.timeout is None or attempt.started_at is None:
        return None
    return attempt.started_at + policy.timeout


def reconcile(
    snapshot: InstanceSnapshot,
    policy: TaskPolicy,
    observation: Observation | None,
    *,
    now: datetime,
    next_id: NextId,
    unknown_since: datetime | None = None,
) -> Reconciliation:
    """Decide on the engine's evidence what became of the current attempt.

    The decisions are the reconciler's table in docs/scheduling.md, section 4, and the
    restart table of section 5 (a RUNNING attempt the engine does not know).

    ``observation`` is None when the executor could not be asked at all. The evidence window
    runs from ``unknown_since``, by default when the lease decision was recorded.
    """
    current = snapshot.current
    if current is None or snapshot.override is not None:
        return Reconciliation()
    state = current.state
    engine = observation.engine_state if observation else None
    ended = engine in (EngineState.SUCCEEDED, EngineState.FAILED)

    def about() -> new_events.Subject:
        return _about(snapshot, now, next_id)

    if observation is not None and ended and state in _WATCHED:
        return Reconciliation((new_events.engine_observed(**about(), observation=observation),))
    if state is AttemptState.SCHEDULED:
        if engine is EngineState.NOT_FOUND:
            return Reconciliation(submit=True)
        return Reconciliation()
    never_had_it = engine is EngineState.NOT_FOUND and current.max_report_seq == 0
    if state is AttemptState.QUEUED and never_had_it and observation:
        return Reconciliation((new_events.never_received(**about(), observation=observation),))
    if state is AttemptState.QUEUED and engine is EngineState.UNKNOWN:
        # The engine took it and cannot tell what became of it: the process that took it died
        # before the worker's first report (a host lost between its claim and `started`). No
        # lease will ever lapse for it, so it is judged as a LOST one is, with the evidence
        # window running from the acknowledgement.
        since = unknown_since or current.queued_at or now
        return _reconcile_lost(policy, current, observation, now, since, about)
    if state in (AttemptState.CANCELLING, AttemptState.CANCEL_FAILED):
        return _reconcile_stop(snapshot, policy, current, observation, now, about)
    if state is AttemptState.LOST and observation is not None and engine is EngineState.RUNNING:
        # The engine's word that the process runs is evidence; a silent worker is not. It
        # renews the lease, and the next lapse asks again: only evidence of an end, or of
        # absence past the window, concludes.
        vouched = new_events.engine_observed(**about(), observation=observation)
        alert = alert_messages.ENGINE_VOUCHES.format(
            attempt_no=current.attempt_no, source=observation.source
        )
        return Reconciliation((vouched,), alert=alert)
    if state is AttemptState.LOST:
        facts = snapshot.facts.attempt(current.attempt_no)
        lease = facts.lease_expired if facts else None
        since = unknown_since or (lease.platform_time if lease else now)
        if unknown_since is None and facts is not None and facts.absent_since is not None:
            since = min(since, facts.absent_since)  # the engine's not_found came first
        return _reconcile_lost(policy, current, observation, now, since, about)
    if state is AttemptState.RUNNING and engine is EngineState.NOT_FOUND and observation:
        # Found at a restart: the ledger holds it RUNNING, the engine has no trace of it. The
        # first such answer is recorded as evidence and the window runs from it, as from a
        # lapsed lease; a report meanwhile refutes it (``absent_since``).
        facts = snapshot.facts.attempt(current.attempt_no)
        absent = facts.absent_since if facts else None
        if absent is None:
            return Reconciliation((new_events.engine_observed(**about(), observation=observation),))
        inconclusive = reasons.ABSENT_INCONCLUSIVE
        return _reconcile_lost(policy, current, observation, now, absent, about, inconclusive)
    return Reconciliation()


_WATCHED = frozenset(
    {
        AttemptState.QUEUED,
        AttemptState.RUNNING,
        AttemptState.LOST,
        AttemptState.CANCELLING,
        AttemptState.CANCEL_FAILED,
    }
)


def _reconcile_stop(
    snapshot: InstanceSnapshot,
    policy: TaskPolicy,
    current: AttemptView,
    observation: Observation | None,
    now: datetime,
    about: Callable[[], new_events.Subject],
) -> Reconciliation:
    if observation is not None and _no_process_runs(observation):
        return Reconciliation((new_events.cancel_confirmed(**about(), observation=observation),))
    stop = snapshot.facts.attempt(current.attempt_no)
    requested = stop.stop_requested if stop else None
    window_closed = requested is not None and now >= requested.platform_time + policy.cancel_window
    if current.state is AttemptState.CANCELLING and window_closed:
        unconfirmed = new_events.cancel_unconfirmed(
            **about(),
            engine_state=observation.engine_state.value if observation else "unreachable",
            window_seconds=policy.cancel_window.total_seconds(),
        )
        return Reconciliation((unconfirmed,), True)
    return Reconciliation(stop_engine=True)


def _no_process_runs(observation: Observation) -> bool:
    """The engine's evidence that the attempt it was asked to stop runs no process any more:
    it has no trace of it, or it checked that the task's processes ended (``unknown`` alone is
    not enough: an engine says it of a host it cannot reach, too)."""
    if observation.engine_state is EngineState.NOT_FOUND:
        return True
    return observation.details.get(PROCESSES_ENDED) is True


def _reconcile_lost(
    policy: TaskPolicy,
    current: AttemptView,
    observation: Observation | None,
    now: datetime,
    since: datetime,
    about: Callable[[], new_events.Subject],
    inconclusive: Phrase = reasons.INCONCLUSIVE,
) -> Reconciliation:
    if now < since + policy.evidence_window:
        return Reconciliation()
    gathered: JSONObject = {
        "engine": observation.evidence() if observation else None,
        "last_report_at": _iso(current.last_report_at),
        "last_report_seq": current.max_report_seq,
        "unknown_since": since.isoformat(),
        "window_seconds": policy.evidence_window.total_seconds(),
    }
    if policy.on_unknown is OnUnknown.WAIT:
        return Reconciliation(alert=inconclusive.format(attempt_no=current.attempt_no))
    fenced = new_events.fenced(
        **about(),
        reason=reasons.FATE_UNKNOWN.format(window=policy.evidence_window),
        on_unknown=policy.on_unknown,
        gathered=gathered,
    )
    # Fencing keeps a stale attempt from committing; only a stop keeps two copies from
    # running side by side, so the shell stops the old one first.
    return Reconciliation((fenced,), stop_engine=True)


def request_stop(
    snapshot: InstanceSnapshot,
    *,
    actor: str,
    reason: str,
    now: datetime,
    event_id: str,
) -> Event | None:
    """A cancel of the instance as the API or the scheduler records it, or None if illegal.

    A timeout is the monitor's (:func:`monitor`), never a caller's.

    With nothing running (CREATED, UP_FOR_RETRY) the cancel takes effect at once; otherwise it
    asks the engine to stop the current attempt.
    """
    nothing_running = snapshot.state in (InstanceState.CREATED, InstanceState.UP_FOR_RETRY)
    current = snapshot.current
    if not nothing_running and (current is None or current.state not in _STOPPABLE):
        return None
    return new_events.cancel_requested(
        event_id=event_id,
        instance_id=snapshot.instance_id,
        attempt_no=snapshot.epoch,
        event_time=now,
        actor=actor,
        reason=reason,
        nothing_running=nothing_running,
    )


_STOPPABLE = frozenset(
    {AttemptState.SCHEDULED, AttemptState.QUEUED, AttemptState.RUNNING, AttemptState.LOST}
)


def _about(snapshot: InstanceSnapshot, now: datetime, next_id: NextId) -> new_events.Subject:
    """A decision on ``snapshot``: about its epoch, taken now, under a fresh id."""
    return {
        "event_id": next_id(),
        "instance_id": snapshot.instance_id,
        "attempt_no": snapshot.epoch,
        "event_time": now,
    }


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None
