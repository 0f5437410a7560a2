"""The transition table, as data: every edge the fold may produce between two snapshots.

This is the one copy, and it is law at run time: ``judge`` looks every move of an instance and
of the attempt an event names up in :data:`INSTANCE_EDGES` and :data:`ATTEMPT_EDGES` (one dict
lookup each), and refuses an event whose fold would make a move they lack, naming it and the
rules of its kind. The docs (``python -m veritask.docgen``), :func:`check_instance_edge` and
the property tests read it too. Each rule names the events that may cause it and who owns the
move (guarantee 3, legal paths, of docs/outcomes-and-fencing.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from veritask.core.errors import IllegalTransition
from veritask.core.events import EventKind
from veritask.core.states import AttemptState, InstanceState

S = TypeVar("S", InstanceState, AttemptState)


@dataclass(frozen=True)
class Rule(Generic[S]):
    """Edges from any of ``sources`` to any of ``targets``, caused by one of ``causes``."""

    name: str
    sources: frozenset[S]
    targets: frozenset[S]
    causes: frozenset[EventKind]
    owner: str
    why: str

    def allows(self, source: S, target: S, cause: EventKind) -> bool:
        return source in self.sources and target in self.targets and cause in self.causes


def _rule(
    name: str,
    sources: Iterable[S],
    targets: Iterable[S],
    causes: Iterable[EventKind],
    owner: str,
    why: str,
) -> Rule[S]:
    return Rule(name, frozenset(sources), frozenset(targets), frozenset(causes), owner, why)


K = EventKind
I = InstanceState  # noqa: E741 - a one-letter alias keeps the table readable
A = AttemptState

REPORTS = frozenset({K.STARTED, K.HEARTBEAT, K.PROGRESS, K.OUTPUT_COMMITTED})
COMPLETIONS = frozenset({K.COMPLETED, K.ENGINE_OBSERVED})
STOPS = frozenset({K.CANCEL_REQUESTED, K.TIMEOUT_REQUESTED})

_I_ACTIVE = (I.SCHEDULED, I.QUEUED, I.RUNNING, I.LOST, I.CANCELLING, I.CANCEL_FAILED)
_I_ENDED_BY_COMPLETION = (
    I.SUCCESS,
    I.FAILED,
    I.TIMEOUT,
    I.SKIPPED,
    I.START_FAILED,
    I.UP_FOR_RETRY,
)
_I_FINISHED = tuple(sorted(set(InstanceState) - set(_I_ACTIVE) - {I.CREATED, I.UP_FOR_RETRY}))
_I_NOT_RUNNING = (I.CREATED, I.UP_FOR_RETRY, I.LOST, I.CANCEL_FAILED, *_I_FINISHED)

INSTANCE_RULES: tuple[Rule[InstanceState], ...] = (
    _rule(
        "first_attempt_opens",
        [I.CREATED],
        [I.SCHEDULED],
        [K.ATTEMPT_OPENED],
        "scheduler",
        "dependencies, concurrency and time allow it: attempt 1 opens",
    ),
    _rule(
        "trigger_rule_decides_before_any_attempt",
        [I.CREATED],
        [I.SKIPPED, I.UPSTREAM_FAILED],
        [K.SKIPPED, K.UPSTREAM_FAILED],
        "scheduler",
        "the upstream states settle the trigger rule without running the task",
    ),
    _rule(
        "map_expands",
        [I.CREATED],
        [I.SUCCESS],
        [K.MAP_EXPANDED],
        "scheduler",
        "a mapped task's upstream succeeded with a list: one instance per item was created; "
        "the group's instances run from here",
    ),
    _rule(
        "removed_from_the_definition",
        [I.CREATED, I.UP_FOR_RETRY, *_I_FINISHED],
        [I.REMOVED],
        [K.REMOVED],
        "scheduler",
        "the task is not in the definition version any more",
    ),
    _rule(
        "cancel_with_nothing_running",
        [I.CREATED, I.UP_FOR_RETRY],
        [I.CANCELLED],
        [K.CANCEL_REQUESTED],
        "operator / scheduler / api",
        "no process exists, so there is nothing for an engine to confirm",
    ),
    _rule(
        "operator_override",
        _I_NOT_RUNNING,
        [I.SUCCESS, I.FAILED],
        [K.OVERRIDE],
        "operator",
        "an operator sets the outcome of the current epoch; the facts stay",
    ),
    _rule(
        "executor_acknowledges",
        [I.SCHEDULED],
        [I.QUEUED],
        [K.SUBMIT_ACKNOWLEDGED],
        "executor",
        "the engine accepted the submission and named its external id",
    ),
    _rule(
        "worker_report_proves_the_start",
        [I.SCHEDULED, I.QUEUED],
        [I.RUNNING],
        REPORTS,
        "worker",
        "the worker started the process (from SCHEDULED when the acknowledgement is late)",
    ),
    _rule(
        "engine_cannot_start_it",
        [I.SCHEDULED, I.QUEUED, I.CANCELLING, I.CANCEL_FAILED, I.UP_FOR_RETRY],
        [I.START_FAILED, I.UP_FOR_RETRY],
        [K.SUBMIT_FAILED],
        "executor",
        "the engine refused or could not start it and no worker ever reported",
    ),
    _rule(
        "completion_decides",
        _I_ACTIVE,
        _I_ENDED_BY_COMPLETION,
        COMPLETIONS,
        "worker / reconciler",
        "an exit code from the worker or the engine ends the attempt (start implied)",
    ),
    _rule(
        "completion_confirms_our_stop",
        [I.CANCELLING, I.CANCEL_FAILED],
        [I.CANCELLED],
        COMPLETIONS,
        "worker / reconciler",
        "the process ended by the stop we asked for",
    ),
    _rule(
        "lease_expires",
        [I.RUNNING],
        [I.LOST],
        [K.LEASE_EXPIRED],
        "monitor",
        "no report within the lease: unknown, not failed",
    ),
    _rule(
        "report_after_lost",
        [I.LOST],
        [I.RUNNING],
        REPORTS,
        "worker",
        "the same, unfenced attempt reported after the lease decision",
    ),
    _rule(
        "engine_vouches_for_a_silent_attempt",
        [I.LOST],
        [I.RUNNING],
        [K.ENGINE_OBSERVED],
        "reconciler",
        "the engine reports the process running (a pid and start time, a claim, a backend): "
        "the worker is silent, the task is not dead; monitoring resumes with a new lease",
    ),
    _rule(
        "stop_requested",
        [I.SCHEDULED, I.QUEUED, I.RUNNING, I.LOST],
        [I.CANCELLING],
        STOPS,
        "operator / scheduler / monitor",
        "a cancel or a timeout asks the engine to stop the process",
    ),
    _rule(
        "engine_confirms_the_stop",
        [I.CANCELLING, I.CANCEL_FAILED],
        [I.CANCELLED, I.TIMEOUT, I.UP_FOR_RETRY],
        [K.CANCEL_CONFIRMED],
        "reconciler / worker",
        "the engine confirmed that the process stopped; a timeout may retry",
    ),
    _rule(
        "stop_unconfirmed",
        [I.CANCELLING],
        [I.CANCEL_FAILED],
        [K.CANCEL_UNCONFIRMED],
        "reconciler",
        "the engine did not confirm the stop within the window",
    ),
    _rule(
        "engine_never_received_it",
        [I.SCHEDULED, I.QUEUED],
        [I.UP_FOR_RETRY, I.START_FAILED],
        [K.NEVER_RECEIVED],
        "reconciler",
        "resubmit as a new attempt, within a small bound of its own",
    ),
    _rule(
        "fenced_after_the_evidence_window",
        [I.LOST, I.QUEUED, I.RUNNING],
        [I.UP_FOR_RETRY, I.FAILED],
        [K.FENCED],
        "reconciler",
        "the fate stayed unknown (a lease that lapsed, or an engine that has not heard of a "
        "RUNNING attempt since recovery): on_unknown retry or fail, the old attempt fenced off",
    ),
    _rule(
        "retry_opens_the_next_attempt",
        [I.UP_FOR_RETRY],
        [I.SCHEDULED],
        [K.ATTEMPT_OPENED],
        "scheduler",
        "retry_at has come: attempt N+1 opens; attempt N keeps its record",
    ),
    _rule(
        "rerun_clears_a_finished_instance",
        _I_FINISHED,
        [I.SCHEDULED],
        [K.ATTEMPT_OPENED],
        "operator (through the scheduler)",
        "clear and rerun with the same inputs: a new attempt, counters reset",
    ),
    _rule(
        "operator_clears_a_finished_instance",
        _I_FINISHED,
        [I.CREATED],
        [K.CLEARED],
        "operator",
        "a new epoch without an attempt: decided again by its trigger rule, then a rerun",
    ),
    _rule(
        "stronger_completion_overrules",
        [*_I_ENDED_BY_COMPLETION, I.CANCELLED],
        [*_I_ENDED_BY_COMPLETION, I.CANCELLED],
        COMPLETIONS,
        "worker / reconciler",
        "late completion evidence outranks what decided before (a conflict when it disagrees)",
    ),
    _rule(
        "late_commit_marker_completes_the_success",
        [I.FAILED, I.UP_FOR_RETRY],
        [I.SUCCESS],
        [K.OUTPUT_COMMITTED],
        "worker",
        "with requires_commit, the marker arrived after the exit 0 it belongs to",
    ),
    _rule(
        "worker_report_beats_a_submit_failure",
        [I.START_FAILED, I.UP_FOR_RETRY],
        [I.RUNNING, I.CANCELLING],
        REPORTS,
        "worker",
        "a worker that reports proves the engine did start the attempt (CANCELLING if a stop "
        "was asked meanwhile)",
    ),
)

_A_ACTIVE = (A.SCHEDULED, A.QUEUED, A.RUNNING, A.LOST, A.CANCELLING, A.CANCEL_FAILED)
_A_BY_COMPLETION = (A.SUCCESS, A.FAILED, A.TIMEOUT, A.SKIPPED, A.START_FAILED, A.CANCELLED)

ATTEMPT_RULES: tuple[Rule[AttemptState], ...] = (
    _rule("acknowledged", [A.SCHEDULED], [A.QUEUED], [K.SUBMIT_ACKNOWLEDGED], "executor", ""),
    _rule(
        "started",
        [A.SCHEDULED, A.QUEUED, A.START_FAILED],
        [A.RUNNING],
        REPORTS,
        "worker",
        "",
    ),
    _rule(
        "start_failed",
        [A.SCHEDULED, A.QUEUED, A.CANCELLING, A.CANCEL_FAILED],
        [A.START_FAILED],
        [K.SUBMIT_FAILED],
        "executor",
        "",
    ),
    _rule(
        "completed",
        [*_A_ACTIVE, *_A_BY_COMPLETION, A.NOT_RECEIVED],
        _A_BY_COMPLETION,
        COMPLETIONS,
        "worker / reconciler",
        "",
    ),
    _rule(
        "started_while_stopping",
        [A.START_FAILED],
        [A.CANCELLING],
        REPORTS,
        "worker",
        "",
    ),
    _rule("late_commit_marker", [A.FAILED], [A.SUCCESS], [K.OUTPUT_COMMITTED], "worker", ""),
    _rule("lease_expired", [A.RUNNING], [A.LOST], [K.LEASE_EXPIRED], "monitor", ""),
    _rule("reported_after_lost", [A.LOST], [A.RUNNING], REPORTS, "worker", ""),
    _rule("engine_vouches", [A.LOST], [A.RUNNING], [K.ENGINE_OBSERVED], "reconciler", ""),
    _rule(
        "stop_requested",
        [A.SCHEDULED, A.QUEUED, A.RUNNING, A.LOST],
        [A.CANCELLING],
        STOPS,
        "operator / monitor",
        "",
    ),
    _rule("stop_unconfirmed", [A.CANCELLING], [A.CANCEL_FAILED], [K.CANCEL_UNCONFIRMED], "", ""),
    _rule(
        "stop_confirmed",
        [A.CANCELLING, A.CANCEL_FAILED],
        [A.CANCELLED, A.TIMEOUT],
        [K.CANCEL_CONFIRMED],
        "reconciler / worker",
        "",
    ),
    _rule(
        "never_received",
        [A.SCHEDULED, A.QUEUED],
        [A.NOT_RECEIVED],
        [K.NEVER_RECEIVED],
        "reconciler",
        "",
    ),
    _rule("fenced", [A.LOST, A.QUEUED, A.RUNNING], [A.ABANDONED], [K.FENCED], "reconciler", ""),
)


def _edges(rules: Iterable[Rule[S]]) -> Mapping[tuple[S, S, EventKind], Rule[S]]:
    """Every move the rules allow, keyed for one lookup; the first rule that allows it names it."""
    edges: dict[tuple[S, S, EventKind], Rule[S]] = {}
    for rule in rules:
        for source in rule.sources:
            for target in rule.targets:
                for cause in rule.causes:
                    if source is not target:
                        edges.setdefault((source, target, cause), rule)
    return edges


#: (source, target, cause) -> the rule allowing it: what ``judge`` checks every move against.
INSTANCE_EDGES: Mapping[tuple[InstanceState, InstanceState, EventKind], Rule[InstanceState]] = (
    _edges(INSTANCE_RULES)
)
ATTEMPT_EDGES: Mapping[tuple[AttemptState, AttemptState, EventKind], Rule[AttemptState]] = _edges(
    ATTEMPT_RULES
)


def rules_for(kind: EventKind, rules: Iterable[Rule[S]]) -> str:
    """The names of the rules by which ``kind`` may move anything, for a refusal's reason."""
    return ", ".join(r.name for r in rules if kind in r.causes) or "none"


def instance_rule(
    source: InstanceState, target: InstanceState, cause: EventKind
) -> Rule[InstanceState] | None:
    """The rule that allows this instance edge, if one does."""
    return next((r for r in INSTANCE_RULES if r.allows(source, target, cause)), None)


def attempt_rule(
    source: AttemptState, target: AttemptState, cause: EventKind
) -> Rule[AttemptState] | None:
    """The rule that allows this attempt edge, if one does."""
    return next((r for r in ATTEMPT_RULES if r.allows(source, target, cause)), None)


def check_instance_edge(source: InstanceState, target: InstanceState, cause: EventKind) -> None:
    """Raise :class:`IllegalTransition` unless the table holds the edge (or it is no move)."""
    if source is not target and instance_rule(source, target, cause) is None:
        raise IllegalTransition(source, target, cause)


def check_attempt_edge(source: AttemptState, target: AttemptState, cause: EventKind) -> None:
    """Raise :class:`IllegalTransition` unless the table holds the attempt edge."""
    if source is not target and attempt_rule(source, target, cause) is None:
        raise IllegalTransition(source, target, cause)


def instance_edges() -> list[tuple[InstanceState, InstanceState, str]]:
    """Every (source, target, rule name) the table allows, for docs and coverage."""
    return sorted(
        {(s, t, r.name) for r in INSTANCE_RULES for s in r.sources for t in r.targets if s is not t}
    )
