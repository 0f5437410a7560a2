"""What the ledger knows about an instance, kept as a join of its events.

Every field is merged by a rule that is commutative, associative and idempotent (earliest by
``(event_time, event_id)``, latest, maximum, union). So merging a set of events gives the same
facts in any order, and merging one event twice changes nothing: convergence (guarantee 1 of
docs/outcomes-and-fencing.md) holds by construction, and the snapshot can be folded one event
at a time without re-reading the instance's whole history (an attempt that heartbeats for hours
stays small).

The state is not stored here; :mod:`veritask.core.fold` derives it from these facts.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from typing import TypeVar

from veritask.core.events import ErrorCategory, Event, EventKind, Level
from veritask.core.jsontypes import JSONObject, JSONValue
from veritask.core.states import EngineState

_Record = TypeVar("_Record")


def _revised(record: _Record, **changes: object) -> _Record:
    """``dataclasses.replace`` for this module's frozen records, which have neither
    ``__post_init__`` nor slots: a copy of the fields with ``changes``, several times faster.
    The fold merges nearly every event with it, and a scheduler merges thousands a second.

    A name that is not one of the record's fields raises ``TypeError`` (as ``replace`` would),
    so a misspelled field cannot pass silently: the check is one subset test on a set built
    once per record type.
    """
    names = _FIELDS[type(record)]
    if not names.issuperset(changes):
        unknown = ", ".join(sorted(set(changes) - names))
        raise TypeError(f"{type(record).__name__} has no field {unknown}")
    revised = object.__new__(type(record))
    revised.__dict__.update(record.__dict__, **changes)
    return revised


@dataclass(frozen=True)
class Mark:
    """One event kept as evidence: its identity, time, actor and what it proved."""

    event_id: str
    kind: EventKind
    actor: str
    event_time: datetime
    observed_at: datetime | None
    evidence: JSONObject

    @classmethod
    def of(cls, event: Event) -> Mark:
        return cls(
            event.event_id,
            event.kind,
            event.actor,
            event.event_time,
            event.observed_at,
            event.evidence,
        )

    @property
    def key(self) -> tuple[datetime, str]:
        return (self.event_time, self.event_id)

    @property
    def platform_time(self) -> datetime:
        """When the platform learned it, or the sender's time before it is recorded."""
        return self.observed_at or self.event_time


def earliest(a: Mark | None, b: Mark | None) -> Mark | None:
    """The mark with the lowest ``(event_time, event_id)``."""
    if a is None or b is None:
        return a or b
    return a if a.key <= b.key else b


def latest(a: Mark | None, b: Mark | None) -> Mark | None:
    """The mark with the highest ``(event_time, event_id)``."""
    if a is None or b is None:
        return a or b
    return a if a.key >= b.key else b


class CompletionRank:
    """Which completion evidence is strongest when several disagree; lower is stronger.

    docs/outcomes-and-fencing.md, 'The fold's precedence', rule 2.
    """

    WORKER_WITH_MARKER = 0
    WORKER = 1
    EXIT_RECORD = 2
    ENGINE = 3


@dataclass(frozen=True)
class Completion:
    """A completion fact: the worker's own report, or the engine's terminal answer."""

    mark: Mark
    rank: int
    exit_code: int | None
    category: ErrorCategory | None
    engine_state: EngineState | None
    commit_marker: str | None

    @property
    def key(self) -> tuple[int, str]:
        return (self.rank, self.mark.event_id)


def completion_of(event: Event) -> Completion | None:
    """The completion an event proves, if it proves one."""
    ev = event.evidence
    if event.kind is EventKind.COMPLETED:
        marker = _opt_str(ev.get("commit_marker"))
        rank = CompletionRank.WORKER_WITH_MARKER if marker else CompletionRank.WORKER
        return Completion(
            Mark.of(event),
            rank,
            _opt_int(ev.get("exit_code")),
            ErrorCategory(str(ev["error_category"])),
            None,
            marker,
        )
    if event.kind is EventKind.ENGINE_OBSERVED:
        engine_state = EngineState(str(ev["engine_state"]))
        if engine_state not in (EngineState.SUCCEEDED, EngineState.FAILED):
            return None
        category = ev.get("error_category")
        rank = (
            CompletionRank.EXIT_RECORD if ev["source"] == "exit_record" else CompletionRank.ENGINE
        )
        return Completion(
            Mark.of(event),
            rank,
            _opt_int(ev.get("exit_code")),
            ErrorCategory(str(category)) if category is not None else None,
            engine_state,
            _opt_str(ev.get("commit_marker")),
        )
    return None


@dataclass(frozen=True)
class AttemptFacts:
    """The merged evidence about one attempt."""

    attempt_no: int
    opened: Mark | None = None
    acknowledged: Mark | None = None
    submit_failed: Mark | None = None
    started: Mark | None = None
    first_report: Mark | None = None
    last_report: Mark | None = None
    max_report_seq: int = 0
    progress: Mark | None = None
    progress_seq: int = 0
    committed: Mark | None = None
    lease_expired: Mark | None = None
    stop_requested: Mark | None = None
    cancel_unconfirmed: Mark | None = None
    cancel_confirmed: Mark | None = None
    never_received: Mark | None = None
    fenced: Mark | None = None
    engine_last: Mark | None = None
    engine_vouched: Mark | None = None
    """The engine's latest word that the attempt's process runs (``engine_observed`` running)."""
    completions: tuple[Completion, ...] = ()

    @property
    def absent_since(self) -> datetime | None:
        """Since when the engine has answered that it does not know this attempt.

        None unless the engine's last recorded word is ``not_found`` and no report of the
        attempt arrived after it: a report refutes the absence, and a later ``not_found``
        starts it again.
        """
        seen = self.engine_last
        if seen is None or seen.evidence.get("engine_state") != EngineState.NOT_FOUND.value:
            return None
        heard = self.last_report
        if heard is not None and heard.platform_time > seen.platform_time:
            return None
        return seen.platform_time

    @property
    def lease_basis(self) -> int:
        """The highest report sequence any lease-expiry decision saw (-1 when none)."""
        if self.lease_expired is None:
            return -1
        seq = self.lease_expired.evidence["last_report_seq"]
        return seq if isinstance(seq, int) else -1


@dataclass(frozen=True)
class InstanceFacts:
    """The merged evidence about one instance and all of its attempts."""

    instance_id: str
    created: Mark | None = None
    attempts: tuple[AttemptFacts, ...] = ()
    #: Instance-level decisions, one per (epoch, kind): skipped, upstream_failed, removed,
    #: cancel before any attempt, override, cleared.
    decisions: tuple[tuple[int, Mark], ...] = ()

    @property
    def epoch(self) -> int:
        """The highest opened attempt number (0 before any attempt), or the epoch a clear
        opened after it (its attempt opens under that number)."""
        opened = [a.attempt_no for a in self.attempts if a.opened is not None]
        cleared = [e for e, mark in self.decisions if mark.kind is EventKind.CLEARED]
        return max((*opened, *cleared), default=0)

    def cleared_epoch(self) -> bool:
        """Whether the current epoch was opened by a clear and has no attempt yet."""
        epoch = self.epoch
        if self.decision(epoch, EventKind.CLEARED) is None:
            return False
        attempt = self.attempt(epoch)
        return attempt is None or attempt.opened is None

    def attempt(self, attempt_no: int) -> AttemptFacts | None:
        for a in self.attempts:
            if a.attempt_no == attempt_no:
                return a
        return None

    def decision(self, epoch: int, kind: EventKind) -> Mark | None:
        for e, mark in self.decisions:
            if e == epoch and mark.kind is kind:
                return mark
        return None


#: The field names of the records ``_revised`` copies.
_FIELDS: dict[type, frozenset[str]] = {
    kind: frozenset(f.name for f in fields(kind)) for kind in (AttemptFacts, InstanceFacts)
}


def merge(facts: InstanceFacts, event: Event) -> InstanceFacts:
    """Add one event to the facts. Commutative, associative and idempotent."""
    rule = event.rule
    if event.kind is EventKind.INSTANCE_CREATED:
        return _revised(facts, created=earliest(facts.created, Mark.of(event)))
    if rule.level is Level.INSTANCE or is_instance_cancel(event):
        return _merge_decision(facts, event)
    current = facts.attempt(event.attempt_no) or AttemptFacts(event.attempt_no)
    updated = _merge_attempt(current, event)
    others = tuple(a for a in facts.attempts if a.attempt_no != event.attempt_no)
    ordered = tuple(sorted((*others, updated), key=lambda a: a.attempt_no))
    return _revised(facts, attempts=ordered)


def is_instance_cancel(event: Event) -> bool:
    """A cancel taken while nothing ran: it decides the instance, not an attempt."""
    return (
        event.kind is EventKind.CANCEL_REQUESTED and event.evidence.get("nothing_running") is True
    )


def _merge_decision(facts: InstanceFacts, event: Event) -> InstanceFacts:
    mark = Mark.of(event)
    kept = facts.decision(event.attempt_no, event.kind)
    # The latest override of an epoch is what the operator meant; other decisions stand
    # from the first time they were taken.
    if kept is None:
        chosen = mark
    elif event.kind is EventKind.OVERRIDE:
        chosen = mark if mark.key >= kept.key else kept
    else:
        chosen = mark if mark.key <= kept.key else kept
    rest = tuple(
        (e, m) for e, m in facts.decisions if not (e == event.attempt_no and m.kind is event.kind)
    )
    ordered = tuple(sorted((*rest, (event.attempt_no, chosen)), key=lambda d: (d[0], d[1].kind)))
    return _revised(facts, decisions=ordered)


def _merge_attempt(a: AttemptFacts, event: Event) -> AttemptFacts:
    mark = Mark.of(event)
    kind = event.kind
    if event.seq is not None and kind in _REPORT_KINDS:
        a = _merge_report(a, event, mark)
    match kind:
        case EventKind.ATTEMPT_OPENED:
            return _revised(a, opened=earliest(a.opened, mark))
        case EventKind.SUBMIT_ACKNOWLEDGED:
            return _revised(a, acknowledged=earliest(a.acknowledged, mark))
        case EventKind.SUBMIT_FAILED:
            return _revised(a, submit_failed=earliest(a.submit_failed, mark))
        case EventKind.STARTED:
            return _revised(a, started=earliest(a.started, mark))
        case EventKind.HEARTBEAT:
            return a
        case EventKind.PROGRESS:
            seq = event.seq or 0
            if (seq, event.event_id) > (a.progress_seq, a.progress.event_id if a.progress else ""):
                return _revised(a, progress=mark, progress_seq=seq)
            return a
        case EventKind.OUTPUT_COMMITTED:
            return _revised(a, committed=earliest(a.committed, mark))
        case EventKind.COMPLETED | EventKind.ENGINE_OBSERVED:
            completion = completion_of(event)
            if completion is None:
                vouched = event.evidence.get("engine_state") == EngineState.RUNNING.value
                return _revised(
                    a,
                    engine_last=latest(a.engine_last, mark),
                    engine_vouched=latest(a.engine_vouched, mark) if vouched else a.engine_vouched,
                )
            if any(c.mark.event_id == event.event_id for c in a.completions):
                return a
            return _revised(a, completions=tuple(sorted((*a.completions, completion), key=_ckey)))
        case EventKind.LEASE_EXPIRED:
            return _revised(a, lease_expired=_higher_basis(a.lease_expired, mark))
        case EventKind.TIMEOUT_REQUESTED | EventKind.CANCEL_REQUESTED:
            return _revised(a, stop_requested=earliest(a.stop_requested, mark))
        case EventKind.CANCEL_CONFIRMED:
            return _revised(a, cancel_confirmed=earliest(a.cancel_confirmed, mark))
        case EventKind.CANCEL_UNCONFIRMED:
            return _revised(a, cancel_unconfirmed=earliest(a.cancel_unconfirmed, mark))
        case EventKind.NEVER_RECEIVED:
            return _revised(a, never_received=earliest(a.never_received, mark))
        case EventKind.FENCED:
            return _revised(a, fenced=earliest(a.fenced, mark))
        case (
            EventKind.INSTANCE_CREATED
            | EventKind.OVERRIDE
            | EventKind.SKIPPED
            | EventKind.UPSTREAM_FAILED
            | EventKind.REMOVED
            | EventKind.CLEARED
            | EventKind.MAP_EXPANDED
        ):
            raise ValueError(f"{kind} is an instance-level event, not an attempt's")


_REPORT_KINDS = frozenset(
    {
        EventKind.STARTED,
        EventKind.HEARTBEAT,
        EventKind.PROGRESS,
        EventKind.OUTPUT_COMMITTED,
        EventKind.COMPLETED,
    }
)


def _ckey(c: Completion) -> tuple[int, str]:
    return c.key


def _merge_report(a: AttemptFacts, event: Event, mark: Mark) -> AttemptFacts:
    seq = event.seq or 0
    last = a.last_report
    last_key = (a.max_report_seq, last.event_id) if last else (0, "")
    return _revised(
        a,
        max_report_seq=max(a.max_report_seq, seq),
        first_report=earliest(a.first_report, mark),
        last_report=mark if (seq, event.event_id) > last_key else last,
    )


def _higher_basis(a: Mark | None, b: Mark | None) -> Mark | None:
    """The lease decision that saw the most reports; ties go to the latest.

    A lease lapses again at the same report count after the engine vouched for a silent
    attempt: the latest decision is the one the evidence window runs from.
    """
    if a is None or b is None:
        return a or b

    def basis(m: Mark) -> int:
        seq = m.evidence["last_report_seq"]
        return seq if isinstance(seq, int) else -1

    if basis(a) != basis(b):
        return a if basis(a) > basis(b) else b
    return latest(a, b)


def _opt_int(value: JSONValue) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _opt_str(value: JSONValue) -> str | None:
    return value if isinstance(value, str) and value else None
