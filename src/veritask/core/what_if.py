"""What-if replay: an instance's recorded evidence fed through the decisions under another
policy (docs/operations.md, 'What-if replay').

The recording holds two kinds of events. Facts came from outside — the executor's
acknowledgements, the worker's reports, the engine's answers, a stop's confirmation — and are
the *input* here. Decisions were the platform's own — opening attempts, calling a silent
attempt LOST, fencing it when the evidence window closed — and are what a replay *re-takes*,
with the same pure functions the loops use (:mod:`veritask.core.decide`) under the policy
asked for. So a replay is a small discrete-event run: the clock jumps to the next fact's
arrival or the next decision due, whichever comes first.

It is an estimate. Each attempt's facts are kept as one block and moved in time with the
attempt's opening (an attempt that opens later under the other policy reports later by as
much); an attempt that was never recorded has no evidence, so the replay stops there and calls
the outcome unknown. :func:`compare` replays twice — under the recorded policy and under the
other one — so that what differs comes from the policy, not from the replay's own timing.

Pure: no I/O, no clock; ids come from a counter.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum

from veritask.core import decide, judge, problems
from veritask.core.errors import InvalidPolicy
from veritask.core.events import Event, EventKind
from veritask.core.fold import InstanceSnapshot, derive, empty, step
from veritask.core.jsontypes import JSONObject, JSONValue
from veritask.core.policy import OnUnknown, TaskPolicy
from veritask.core.states import AttemptState, EngineState, InstanceState

#: The platform's decisions that a replay takes again instead of reading them.
RETAKEN = frozenset({EventKind.ATTEMPT_OPENED, EventKind.LEASE_EXPIRED, EventKind.FENCED})

#: An operator's hand on an instance: what they would have done under the other policy is not
#: in the recording, so such an instance is not replayed.
OPERATOR_KINDS = frozenset(
    {EventKind.OVERRIDE, EventKind.CLEARED, EventKind.REMOVED, EventKind.CANCEL_REQUESTED}
)

#: What a replay may change, as ``--policy`` names it.
POLICY_KEYS = ("lease", "retries", "evidence_window", "on_unknown")

_TOKEN_HASH = judge.hash_token("what-if")
_MAX_STEPS = 100_000
_SOURCE = "what-if replay"


@dataclass(frozen=True)
class PolicyChange:
    """The parts of every replayed task's policy to change; None keeps the recorded value."""

    lease: timedelta | None = None
    retries: int | None = None
    evidence_window: timedelta | None = None
    on_unknown: OnUnknown | None = None

    def __post_init__(self) -> None:
        for name in ("lease", "evidence_window"):
            value: timedelta | None = getattr(self, name)
            if value is not None and value <= timedelta(0):
                raise InvalidPolicy(f"{name}: {problems.MUST_BE_POSITIVE.format(value=value)}")
        if self.retries is not None and self.retries < 0:
            raise InvalidPolicy(
                f"retries: {problems.AT_LEAST.format(minimum=0, number=self.retries)}"
            )

    def applied_to(self, policy: TaskPolicy) -> TaskPolicy:
        """The task's recorded policy with this change."""
        retry = policy.retry
        if self.retries is not None:
            retry = replace(retry, max_retries=self.retries)
        return replace(
            policy,
            retry=retry,
            lease=self.lease or policy.lease,
            evidence_window=self.evidence_window or policy.evidence_window,
            on_unknown=self.on_unknown or policy.on_unknown,
        )

    def to_json(self) -> JSONObject:
        """The keys given, durations in seconds."""
        out: JSONObject = {}
        if self.lease is not None:
            out["lease"] = self.lease.total_seconds()
        if self.retries is not None:
            out["retries"] = self.retries
        if self.evidence_window is not None:
            out["evidence_window"] = self.evidence_window.total_seconds()
        if self.on_unknown is not None:
            out["on_unknown"] = self.on_unknown.value
        return out


@dataclass(frozen=True)
class AttemptCourse:
    """One attempt as a replay ran it."""

    attempt_no: int
    opened_at: datetime
    state: AttemptState | None
    """None: the recording holds no attempt of this number, so nothing is known of it."""
    ended_at: datetime | None

    def to_json(self) -> JSONObject:
        return {
            "attempt_no": self.attempt_no,
            "opened_at": self.opened_at.isoformat(),
            "state": None if self.state is None else self.state.value,
            "ended_at": _iso(self.ended_at),
            "evidence": self.state is not None,
        }


@dataclass(frozen=True)
class Call:
    """A decision a replay took: an attempt called LOST, or fenced."""

    attempt_no: int
    at: datetime

    def to_json(self) -> JSONObject:
        return {"attempt_no": self.attempt_no, "at": self.at.isoformat()}


@dataclass(frozen=True)
class Course:
    """What an instance went through in one replay."""

    attempts: tuple[AttemptCourse, ...]
    lost: tuple[Call, ...]
    fenced: tuple[Call, ...]
    state: InstanceState | None
    """The state the replay ended in; None when it ran out of evidence (outcome unknown)."""
    ended_at: datetime | None
    """When it reached that state, or when the evidence ran out."""

    @property
    def started_at(self) -> datetime | None:
        return self.attempts[0].opened_at if self.attempts else None

    @property
    def duration(self) -> timedelta | None:
        """From the first attempt's opening to the end (a lower bound when unknown)."""
        if self.started_at is None or self.ended_at is None:
            return None
        return self.ended_at - self.started_at

    @property
    def failed_at(self) -> datetime | None:
        """When the instance was called failed (FAILED, START_FAILED or TIMEOUT)."""
        return self.ended_at if self.state in _FAILED else None

    def outcome_json(self) -> JSONObject:
        duration = self.duration
        return {
            "state": "UNKNOWN" if self.state is None else self.state.value,
            "at": _iso(self.ended_at),
            "duration_seconds": None if duration is None else duration.total_seconds(),
            "lower_bound": self.state is None,
        }


_FAILED = frozenset({InstanceState.FAILED, InstanceState.START_FAILED, InstanceState.TIMEOUT})


class Aspect(StrEnum):
    """What a difference is about."""

    ATTEMPTS = "attempts"
    """How many attempts opened, and how each ended."""
    LOST = "lost"
    """Which attempts were called LOST, and when."""
    FENCED = "fenced"
    """Which attempts were fenced when the evidence window closed on an unknown fate, and when."""
    OUTCOME = "outcome"
    """The instance's final state, when it was reached, and the duration."""


@dataclass(frozen=True)
class Difference:
    """One aspect as replayed under the recorded policy and under the other one."""

    aspect: Aspect
    recorded: JSONValue
    what_if: JSONValue

    def to_json(self) -> JSONObject:
        return {"what": self.aspect.value, "recorded": self.recorded, "what_if": self.what_if}


@dataclass(frozen=True)
class Comparison:
    """An instance replayed under both policies, and what differs."""

    recorded: Course
    what_if: Course
    differences: tuple[Difference, ...]


def not_replayable(events: Iterable[Event]) -> EventKind | None:
    """The operator's event kind that keeps the instance from being replayed, if any."""
    for event in events:
        if event.kind in OPERATOR_KINDS:
            return event.kind
    return None


def compare(
    instance_id: str, events: Sequence[Event], policy: TaskPolicy, change: PolicyChange
) -> Comparison:
    """Replay the instance under its recorded ``policy`` and under ``change``."""
    recorded = replay(instance_id, events, policy)
    what_if = replay(instance_id, events, change.applied_to(policy), recorded_policy=policy)
    return Comparison(recorded, what_if, differences(recorded, what_if))


def differences(recorded: Course, what_if: Course) -> tuple[Difference, ...]:
    """The aspects in which two courses of one instance differ."""
    found: list[Difference] = []
    a = [x.to_json() for x in recorded.attempts]
    b = [x.to_json() for x in what_if.attempts]
    if a != b:
        found.append(Difference(Aspect.ATTEMPTS, list(a), list(b)))
    lost_a = [x.to_json() for x in recorded.lost]
    lost_b = [x.to_json() for x in what_if.lost]
    if lost_a != lost_b:
        found.append(Difference(Aspect.LOST, list(lost_a), list(lost_b)))
    fenced_a = [x.to_json() for x in recorded.fenced]
    fenced_b = [x.to_json() for x in what_if.fenced]
    if fenced_a != fenced_b:
        found.append(Difference(Aspect.FENCED, list(fenced_a), list(fenced_b)))
    if recorded.outcome_json() != what_if.outcome_json():
        found.append(Difference(Aspect.OUTCOME, recorded.outcome_json(), what_if.outcome_json()))
    return tuple(found)


def replay(
    instance_id: str,
    events: Sequence[Event],
    policy: TaskPolicy,
    *,
    recorded_policy: TaskPolicy | None = None,
) -> Course:
    """The course of the instance when its recorded facts meet ``policy``'s decisions.

    ``events`` are the instance's recorded events in the order the ledger recorded them;
    ``recorded_policy`` (default ``policy``) is the one they were recorded under, which tells
    how long the scheduler took to open each retry once it was due.
    """
    return _Replay(instance_id, events, policy, recorded_policy or policy).run()


@dataclass(frozen=True)
class _Recorded:
    """An instance's recording, split into what a replay feeds and what it re-decides."""

    created: tuple[Event, ...]
    opened_at: dict[int, datetime]
    latency: dict[int, timedelta]
    facts: dict[int, tuple[Event, ...]]

    @classmethod
    def of(cls, instance_id: str, events: Sequence[Event], policy: TaskPolicy) -> _Recorded:
        created: list[Event] = []
        opened_at: dict[int, datetime] = {}
        latency: dict[int, timedelta] = {}
        facts: dict[int, list[Event]] = {}
        snapshot = derive(empty(instance_id), policy)
        for event in events:
            if event.kind is EventKind.ATTEMPT_OPENED:
                at = _platform_time(event)
                opened_at[event.attempt_no] = at
                # How long after its retry was due the scheduler opened it: the replay keeps it.
                due = snapshot.retry_at
                latency[event.attempt_no] = max(at - due, timedelta(0)) if due else timedelta(0)
            elif event.attempt_no == 0:
                created.append(event)
            elif event.kind not in RETAKEN:
                facts.setdefault(event.attempt_no, []).append(event)
            snapshot = step(snapshot, event, policy)
        return cls(
            tuple(created),
            opened_at,
            latency,
            {n: tuple(sorted(f, key=_platform_time)) for n, f in facts.items()},
        )


class _Replay:
    """One replay: a clock, the facts still to arrive, the snapshot, and what it decided."""

    def __init__(
        self,
        instance_id: str,
        events: Sequence[Event],
        policy: TaskPolicy,
        recorded_policy: TaskPolicy,
    ) -> None:
        self.instance_id = instance_id
        self.policy = policy
        # Timeouts stay as recorded (their requests are facts here), so the monitor only
        # watches leases.
        self.monitor_policy = replace(policy, timeout=None)
        self.recorded = _Recorded.of(instance_id, events, recorded_policy)
        self.snapshot: InstanceSnapshot = derive(empty(instance_id), policy)
        self.pending: list[tuple[datetime, int, Event]] = []
        self.order = itertools.count()
        self.ids = itertools.count(1)
        self.opened: list[tuple[int, datetime, bool]] = []
        self.lost: list[Call] = []
        self.fenced: list[Call] = []
        self.ended_at: datetime | None = None
        self.ran_out: datetime | None = None
        self.waiting_for_input = False

    def run(self) -> Course:
        for event in self.recorded.created:
            self.snapshot = step(self.snapshot, event, self.policy)
        first = self.recorded.opened_at.get(1)
        if first is not None:
            self._open(first)
        for _ in range(_MAX_STEPS):
            if self.ran_out is not None:
                break
            due = None if self.waiting_for_input else self._due()
            arrival = self.pending[0][0] if self.pending else None
            if arrival is None and due is None:
                break
            if arrival is not None and (due is None or arrival <= due):
                _, _, event = heapq.heappop(self.pending)
                self._take(event, arrival)
                self.waiting_for_input = False
            elif due is not None:
                self._decide(due)
        return self._course()

    # -- the clock's next stop --------------------------------------------------------------

    def _due(self) -> datetime | None:
        """When the next decision falls due on the current snapshot, or None."""
        snapshot = self.snapshot
        current = snapshot.current
        if snapshot.state is InstanceState.UP_FOR_RETRY and snapshot.retry_at is not None:
            after = self.recorded.latency.get(judge.next_attempt_no(snapshot), timedelta(0))
            return snapshot.retry_at + after
        if current is None:
            return None
        unknown_since = self._unknown_since()
        closes = None if unknown_since is None else unknown_since + self.policy.evidence_window
        if current.state is AttemptState.RUNNING:
            expires = decide.lease_expiry(current, self.monitor_policy)
            return min((t for t in (expires, closes) if t is not None), default=None)
        if current.state is AttemptState.LOST:
            return closes
        return None

    def _unknown_since(self) -> datetime | None:
        """Since when the current attempt's fate is unknown, as the reconciler counts its
        evidence window: the lease's lapse, or the engine's first "not found" if earlier;
        None when the window is not running (or the policy waits without end)."""
        current = self.snapshot.current
        if current is None or self.policy.on_unknown is OnUnknown.WAIT:
            return None
        facts = self.snapshot.facts.attempt(current.attempt_no)
        if facts is None:
            return None
        lease = facts.lease_expired.platform_time if facts.lease_expired else None
        if current.state is AttemptState.LOST:
            return min((t for t in (lease, facts.absent_since) if t is not None), default=None)
        if current.state is AttemptState.RUNNING:
            return facts.absent_since
        return None

    def _decide(self, now: datetime) -> None:
        snapshot = self.snapshot
        if snapshot.state is InstanceState.UP_FOR_RETRY:
            self._open(now)
            return
        current = snapshot.current
        taken: list[Event] = []
        since = self._unknown_since()
        if since is not None and now >= since + self.policy.evidence_window:
            # The engine's absence is assumed to last: its answers under the recorded policy
            # are all the evidence there is, and none came.
            absent = decide.Observation(EngineState.NOT_FOUND, _SOURCE, now)
            observation = absent if current and current.state is AttemptState.RUNNING else None
            reconciled = decide.reconcile(
                snapshot,
                self.policy,
                observation,
                now=now,
                next_id=self._next_id,
                unknown_since=since,
            )
            taken = list(reconciled.events)
        elif current is not None and current.state is AttemptState.RUNNING:
            taken = decide.monitor(snapshot, self.monitor_policy, now=now, next_id=self._next_id)
        recorded = [e for e in taken if self._take(e, now)]
        if not recorded:
            self.waiting_for_input = True  # nothing to decide until a fact arrives
        for event in recorded:
            call = Call(event.attempt_no, now)
            if event.kind is EventKind.LEASE_EXPIRED:
                self.lost.append(call)
            elif event.kind is EventKind.FENCED:
                self.fenced.append(call)

    def _open(self, now: datetime) -> None:
        event = decide.open_attempt(
            self.snapshot, token_hash=_TOKEN_HASH, now=now, event_id=self._next_id()
        )
        if event is None or not self._take(event, now):
            self.waiting_for_input = True
            return
        n = event.attempt_no
        recorded_at = self.recorded.opened_at.get(n)
        self.opened.append((n, now, recorded_at is not None))
        if recorded_at is None:
            self.ran_out = now  # no recorded attempt of this number: nothing is known of it
            return
        shift = now - recorded_at
        for fact in self.recorded.facts.get(n, ()):
            moved = _moved(fact, shift)
            heapq.heappush(self.pending, (_platform_time(moved), next(self.order), moved))

    # -- one event in -----------------------------------------------------------------------

    def _take(self, event: Event, now: datetime) -> bool:
        """Record the event as the ledger would; False if the ledger would have refused it."""
        event = replace(event, observed_at=event.observed_at or now)
        before = self.snapshot.state
        if event.actor == "worker":
            # The ledger checked its token when it recorded it; the token is never kept.
            after = step(self.snapshot, event, self.policy)
        else:
            verdict = judge.judge(self.snapshot, event, self.policy)
            if not verdict.recorded:
                return False
            after = verdict.after
        self.snapshot = after
        if after.state is not before and after.state.is_terminal:
            self.ended_at = now
        return True

    def _next_id(self) -> str:
        return f"what-if-{next(self.ids)}"

    def _course(self) -> Course:
        views = {v.attempt_no: v for v in self.snapshot.attempts}
        attempts = []
        for n, opened_at, evidence in self.opened:
            view = views.get(n)
            known = view if view is not None and evidence else None
            ended = (known.ended_observed_at or known.ended_at) if known is not None else None
            state = known.state if known is not None else None
            attempts.append(AttemptCourse(n, opened_at, state, ended))
        final: InstanceState | None = self.snapshot.state
        ended_at = self.ended_at if self.snapshot.state.is_terminal else None
        if self.ran_out is not None:
            final, ended_at = None, self.ran_out
        return Course(tuple(attempts), tuple(self.lost), tuple(self.fenced), final, ended_at)


def _moved(event: Event, shift: timedelta) -> Event:
    if not shift:
        return event
    observed = None if event.observed_at is None else event.observed_at + shift
    return replace(event, event_time=event.event_time + shift, observed_at=observed)


def _platform_time(event: Event) -> datetime:
    return event.observed_at or event.event_time


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()
