"""Any instance's or run's state explained as of an instant T (docs/explain.md).

Two cuts of the same recorded events give two states for the moment T:

- **known then** (the ``observed`` axis): the events the platform had *recorded* by T
  (``observed_at <= T``). This is what it knew at T, and what every decision taken at T saw.
- **known now for then** (the ``event`` axis): the events that *happened* by T by their
  sender's clock (``event_time <= T``), whenever they were recorded, including those learned
  after T. This is the best account of T that the ledger holds today.

Where the two differ, the difference is **late evidence**: events that happened by T but were
recorded after it (a worker's report delivered from its spool, an engine's exit record the
reconciler found). Each column is :func:`veritask.core.fold.fold`'s snapshot of its events,
stepped one event at a time (:func:`veritask.core.fold.step`, from the empty facts) so that the
event that made the state is known and the transition table (:mod:`.transitions`) names the
rule that allowed its move: the observed axis in the order the ledger recorded them (the
moves it actually made), the event axis in the fold's canonical order (event time, then id).
Since the fold depends on the set only, the last step is exactly the fold of the column.

Pure: the service reads the events and the refused events and passes them in.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from veritask.core import fold, phrasebook, reasons, transitions
from veritask.core.events import Event, EventKind
from veritask.core.facts import InstanceFacts, merge
from veritask.core.jsontypes import JSONObject
from veritask.core.policy import TaskPolicy
from veritask.core.states import InstanceState, PublicationState, RunExecutionState


class Axis(StrEnum):
    """Which time of an event places it before or after the instant asked about."""

    OBSERVED = "observed"
    """When the platform recorded it: the state known then."""
    EVENT = "event"
    """When it happened, by its sender's clock: the state known now for then."""


class ChangeKind(StrEnum):
    """Why a state changed after the instant asked about."""

    LATE_EVIDENCE = "late_evidence"
    """An event that happened by the instant but was recorded after it."""
    OVERRIDE = "override"
    """An operator set the outcome (the operator and the reason are shown)."""
    RECONCILIATION = "reconciliation"
    """The reconciler decided on the evidence it gathered from the engine."""
    LATER = "later"
    """The run went on: an event that happened after the instant."""


BOTH_AXES = frozenset(Axis)


@dataclass(frozen=True)
class Recorded:
    """An instance event as the ledger recorded it (``event.observed_at`` is set)."""

    event: Event
    outcome: str
    """``applied``, ``stale`` or ``conflict``: how the ledger classified it on arrival."""

    @property
    def observed_at(self) -> datetime:
        return self.event.observed_at or self.event.event_time


@dataclass(frozen=True)
class RunRecorded:
    """A run-level event as recorded: a creation, or a move of one of the run's two states."""

    event_id: str
    kind: str
    actor: str
    event_time: datetime
    observed_at: datetime
    from_state: str | None
    to_state: str | None
    reason: str | None
    evidence: JSONObject


@dataclass(frozen=True)
class Refusal:
    """An event the ledger refused, as kept (any field may be missing from what was sent)."""

    event_id: str | None
    attempt_no: int | None
    kind: str | None
    actor: str | None
    event_time: datetime | None
    observed_at: datetime
    reason: str


@dataclass(frozen=True)
class Cause:
    """The event that made a state: who, both times, the evidence, and the rule allowing it."""

    event_id: str
    kind: str
    actor: str
    attempt_no: int
    event_time: datetime
    observed_at: datetime
    evidence: JSONObject
    outcome: str
    late: bool
    """It happened by the instant asked about but was recorded after it."""
    rule: str | None
    """The transition table's rule that allowed the move (for a run: the reason's phrase)."""
    rule_why: str | None


@dataclass(frozen=True)
class Column:
    """An instance's state in one column; ``state`` is None when no event was in it yet."""

    axis: Axis
    state: InstanceState | None
    reason: str | None
    attempt_no: int
    events: int
    moved_from: InstanceState | None
    made_by: Cause | None
    snapshot: fold.InstanceSnapshot | None = field(default=None, repr=False, compare=False)
    """The fold itself (its attempts and times: what a timeline as of the instant draws)."""


@dataclass(frozen=True)
class RefusedEvent:
    """An event refused by T, and the rule it broke (the key of the refusal's phrase; for a
    move the transition table lacks, also the table's rules of its kind)."""

    event_id: str | None
    attempt_no: int | None
    kind: str | None
    actor: str | None
    event_time: datetime | None
    observed_at: datetime
    reason: str
    rule: str | None
    table_rules: tuple[str, ...]


@dataclass(frozen=True)
class Change:
    """A move recorded after the instant asked about, and why."""

    kind: ChangeKind
    from_state: str
    to_state: str
    cause: Cause
    operator: str | None
    why: str | None


@dataclass(frozen=True)
class InstanceExplanation:
    """One instance as of ``as_of`` (None: the present) on the asked axes."""

    instance_id: str
    as_of: datetime | None
    known_then: Column | None
    known_now: Column | None
    state_now: InstanceState
    late: tuple[Cause, ...]
    refused: tuple[RefusedEvent, ...]
    afterwards: tuple[Change, ...]


@dataclass(frozen=True)
class RunColumn:
    """A run's two states in one column, each with the event that made it."""

    axis: Axis
    execution_state: RunExecutionState | None
    execution_reason: str | None
    execution_made_by: Cause | None
    publication_state: PublicationState | None
    publication_reason: str | None
    publication_made_by: Cause | None


@dataclass(frozen=True)
class RunExplanation:
    """A run's own states as of ``as_of``; its instances are explained one by one."""

    run_id: str
    as_of: datetime | None
    known_then: RunColumn | None
    known_now: RunColumn | None
    late: tuple[Cause, ...]
    afterwards: tuple[Change, ...]


# -- an instance -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Move:
    recorded: Recorded
    before: InstanceState
    after: InstanceState


class _Prefixes:
    """The snapshots after each prefix of ``events`` (folded in that order), derived only
    when asked: merging facts is cheap, deriving a snapshot is not, and an explanation needs
    only a few of them (the last, and those back to the last move)."""

    def __init__(
        self,
        instance_id: str,
        events: Sequence[Recorded],
        policy: TaskPolicy,
        *,
        base: _Prefixes | None = None,
    ) -> None:
        """``base``: prefixes whose first events are these events' first, to start from."""
        self.events = tuple(events)
        self.policy = policy
        shared = 0
        if base is not None:
            limit = min(len(self.events), len(base.events))
            while shared < limit and self.events[shared] is base.events[shared]:
                shared += 1
        facts: list[InstanceFacts] = (
            base._facts[: shared + 1] if base is not None else [fold.empty(instance_id)]
        )
        for item in self.events[shared:]:
            facts.append(merge(facts[-1], item.event))
        self._facts: list[InstanceFacts] = facts
        self._snapshots: dict[int, fold.InstanceSnapshot] = (
            {k: v for k, v in base._snapshots.items() if k <= shared} if base is not None else {}
        )

    def snapshot(self, count: int) -> fold.InstanceSnapshot:
        """The fold of the first ``count`` events."""
        found = self._snapshots.get(count)
        if found is None:
            found = self._snapshots[count] = fold.derive(self._facts[count], self.policy)
        return found

    def state(self, count: int) -> InstanceState:
        return self.snapshot(count).state

    def last_move(self, count: int) -> _Move | None:
        """The last move among the first ``count`` events (None if none moved the state)."""
        now = self.state(count)
        for index in range(count, 0, -1):
            before = self.state(index - 1)
            if before is not now:
                return _Move(self.events[index - 1], before, now)
        return None

    def moves_after(self, count: int) -> list[_Move]:
        """The moves of the events after the first ``count``."""
        moves = []
        for index in range(count + 1, len(self.events) + 1):
            before, after = self.state(index - 1), self.state(index)
            if before is not after:
                moves.append(_Move(self.events[index - 1], before, after))
        return moves


def explain_instance(
    instance_id: str,
    recorded: Sequence[Recorded],
    refusals: Iterable[Refusal],
    policy: TaskPolicy,
    *,
    as_of: datetime | None,
    axes: frozenset[Axis] = BOTH_AXES,
) -> InstanceExplanation:
    """Explain the instance from its recorded events (in the ledger's recorded order) and the
    events refused for it; ``as_of`` None is the present (every event, in both columns)."""
    whole = _Prefixes(instance_id, recorded, policy)
    cut = len(recorded) if as_of is None else _prefix_length(recorded, as_of)
    if cut is None:
        then = _Prefixes(
            instance_id, [r for r in recorded if r.observed_at <= _never(as_of)], policy
        )
        then_count = len(then.events)
        # Recorded out of clock order: the moves after as_of are those recorded after it.
        after_cut = [m for m in whole.moves_after(0) if m.recorded.observed_at > _never(as_of)]
    else:
        then, then_count = whole, cut
        after_cut = whole.moves_after(cut)
    now_for_then, now_count = then, then_count
    if as_of is not None:
        happened = sorted(
            (r for r in recorded if r.event.event_time <= as_of),
            key=lambda r: r.event.ordering_key(),
        )
        # Nothing late and nothing out of order (the common case): the same fold.
        same = len(happened) == then_count and all(
            a is b for a, b in zip(happened, then.events, strict=False)
        )
        if not same:
            now_for_then = _Prefixes(instance_id, happened, policy, base=then)
            now_count = len(happened)
    return InstanceExplanation(
        instance_id=instance_id,
        as_of=as_of,
        known_then=(
            _column(Axis.OBSERVED, then, then_count, as_of) if Axis.OBSERVED in axes else None
        ),
        known_now=(
            _column(Axis.EVENT, now_for_then, now_count, as_of) if Axis.EVENT in axes else None
        ),
        state_now=whole.state(len(recorded)),
        late=tuple(_cause_of(r, as_of) for r in recorded if _is_late(r, as_of)),
        refused=tuple(refused(r) for r in refusals if _by(r.observed_at, as_of)),
        afterwards=tuple(_change(m, as_of) for m in after_cut),
    )


def _never(as_of: datetime | None) -> datetime:
    """``as_of``, which only a cut that exists needs (the present cuts nothing)."""
    if as_of is None:
        raise ValueError("the present has no events after it")
    return as_of


def _prefix_length(events: Sequence[Recorded], as_of: datetime) -> int | None:
    """How many of the first events were recorded by ``as_of``, if no later one was too."""
    count = 0
    while count < len(events) and events[count].observed_at <= as_of:
        count += 1
    if any(r.observed_at <= as_of for r in events[count:]):
        return None
    return count


def _column(axis: Axis, prefixes: _Prefixes, count: int, as_of: datetime | None) -> Column:
    if count == 0:
        return Column(axis, None, None, 0, 0, None, None)
    snapshot = prefixes.snapshot(count)
    last = prefixes.last_move(count)
    if last is not None:
        made_by = _cause_of(last.recorded, as_of, last.before, last.after)
        moved_from: InstanceState | None = last.before
    else:
        # Nothing moved it since its creation: the first event (instance_created) made it.
        made_by, moved_from = _cause_of(prefixes.events[0], as_of), None
    return Column(
        axis, snapshot.state, snapshot.reason, snapshot.epoch, count, moved_from, made_by, snapshot
    )


def _cause_of(
    recorded: Recorded,
    as_of: datetime | None,
    before: InstanceState | None = None,
    after: InstanceState | None = None,
) -> Cause:
    event = recorded.event
    rule = (
        transitions.instance_rule(before, after, event.kind)
        if before is not None and after is not None
        else None
    )
    return Cause(
        event_id=event.event_id,
        kind=event.kind.value,
        actor=event.actor,
        attempt_no=event.attempt_no,
        event_time=event.event_time,
        observed_at=recorded.observed_at,
        evidence=event.evidence,
        outcome=recorded.outcome,
        late=_is_late(recorded, as_of),
        rule=rule.name if rule is not None else None,
        rule_why=rule.why if rule is not None else None,
    )


def _change(move: _Move, as_of: datetime | None) -> Change:
    cause = _cause_of(move.recorded, as_of, move.before, move.after)
    event = move.recorded.event
    why = event.evidence.get("reason")
    operator = event.evidence.get("operator")
    return Change(
        kind=_change_kind(event.kind.value, event.actor, cause.late),
        from_state=move.before.value,
        to_state=move.after.value,
        cause=cause,
        operator=operator if isinstance(operator, str) else None,
        why=why if isinstance(why, str) else None,
    )


def _change_kind(kind: str, actor: str, late: bool) -> ChangeKind:
    if kind == EventKind.OVERRIDE.value:
        return ChangeKind.OVERRIDE
    if late:
        return ChangeKind.LATE_EVIDENCE
    if actor == "reconciler":
        return ChangeKind.RECONCILIATION
    return ChangeKind.LATER


def refused(refusal: Refusal) -> RefusedEvent:
    """A refused event with the rule it broke, read back from its recorded reason."""
    found = phrasebook.match(refusal.reason)
    rule: str | None = None
    table_rules: tuple[str, ...] = ()
    if found is not None:
        phrase, fields = found
        rule = _rule_name(phrase.key)
        if phrase.key in (reasons.OFF_THE_TABLE.key, reasons.ATTEMPT_OFF_THE_TABLE.key):
            table_rules = tuple(name for name in fields["rules"].split(", ") if name != "none")
    return RefusedEvent(
        refusal.event_id,
        refusal.attempt_no,
        refusal.kind,
        refusal.actor,
        refusal.event_time,
        refusal.observed_at,
        refusal.reason,
        rule,
        table_rules,
    )


def _rule_name(key: str) -> str:
    """``reason.token_mismatch`` -> ``token_mismatch``: the phrase names the rule broken."""
    return key.split(".", 1)[1] if "." in key else key


def _by(moment: datetime, as_of: datetime | None) -> bool:
    return as_of is None or moment <= as_of


def _is_late(recorded: Recorded, as_of: datetime | None) -> bool:
    return as_of is not None and recorded.event.event_time <= as_of < recorded.observed_at


# -- a run -------------------------------------------------------------------------------------

_EXECUTION_KINDS = frozenset({"run_created", "run_state_changed"})
_PUBLICATION_KIND = "publication_changed"


def explain_run(
    run_id: str,
    recorded: Sequence[RunRecorded],
    *,
    publication_start: PublicationState,
    as_of: datetime | None,
    axes: frozenset[Axis] = BOTH_AXES,
) -> RunExplanation:
    """Explain a run's execution and publication states from its run-level events (in
    recorded order). A run's states are the platform's own decisions, each recorded with the
    state it moved from and to, so each column's state is where its latest event left it.
    ``publication_start`` is where publication starts (no event records it)."""
    then = [r for r in recorded if _by(r.observed_at, as_of)]
    happened = sorted(
        (r for r in recorded if as_of is None or r.event_time <= as_of),
        key=lambda r: (r.event_time, r.event_id),
    )
    return RunExplanation(
        run_id=run_id,
        as_of=as_of,
        known_then=(
            _run_column(Axis.OBSERVED, then, publication_start, as_of)
            if Axis.OBSERVED in axes
            else None
        ),
        known_now=(
            _run_column(Axis.EVENT, happened, publication_start, as_of)
            if Axis.EVENT in axes
            else None
        ),
        late=tuple(
            _run_cause(r, as_of)
            for r in recorded
            if as_of is not None and r.event_time <= as_of < r.observed_at
        ),
        afterwards=tuple(
            _run_change(r, as_of)
            for r in recorded
            if not _by(r.observed_at, as_of) and r.kind != "run_created"
        ),
    )


def _run_column(
    axis: Axis,
    events: Sequence[RunRecorded],
    publication_start: PublicationState,
    as_of: datetime | None,
) -> RunColumn:
    execution = next((r for r in reversed(events) if r.kind in _EXECUTION_KINDS), None)
    publication = next((r for r in reversed(events) if r.kind == _PUBLICATION_KIND), None)
    created = next((r for r in events if r.kind == "run_created"), None)
    if created is None or execution is None:
        return RunColumn(axis, None, None, None, None, None, None)
    published: tuple[PublicationState, str | None, Cause]
    if publication is None:
        published = (publication_start, None, _run_cause(created, as_of))
    else:
        published = (
            PublicationState(str(publication.to_state)),
            publication.reason,
            _run_cause(publication, as_of),
        )
    return RunColumn(
        axis,
        RunExecutionState(str(execution.to_state)),
        execution.reason,
        _run_cause(execution, as_of),
        *published,
    )


def _run_cause(recorded: RunRecorded, as_of: datetime | None) -> Cause:
    found = phrasebook.match(recorded.reason) if recorded.reason else None
    return Cause(
        event_id=recorded.event_id,
        kind=recorded.kind,
        actor=recorded.actor,
        attempt_no=0,
        event_time=recorded.event_time,
        observed_at=recorded.observed_at,
        evidence=recorded.evidence,
        outcome="applied",
        late=as_of is not None and recorded.event_time <= as_of < recorded.observed_at,
        rule=_rule_name(found[0].key) if found is not None else None,
        rule_why=None,
    )


def _run_change(recorded: RunRecorded, as_of: datetime | None) -> Change:
    cause = _run_cause(recorded, as_of)
    kind = ChangeKind.LATER
    if cause.late or "late_evidence" in recorded.evidence:
        kind = ChangeKind.LATE_EVIDENCE
    elif recorded.actor.startswith("operator:"):
        kind = ChangeKind.OVERRIDE
    elif recorded.actor == "reconciler":
        kind = ChangeKind.RECONCILIATION
    operator = recorded.actor.split(":", 1)[1] if recorded.actor.startswith("operator:") else None
    return Change(
        kind=kind,
        from_state=recorded.from_state or "",
        to_state=recorded.to_state or "",
        cause=cause,
        operator=operator,
        why=recorded.reason,
    )
