"""Events: what happened to an instance or one of its attempts, who says so, and the proof.

An event is a fact (from outside: acknowledgements, worker reports, engine observations) or a
decision (the platform's own conclusion, recorded only on the snapshot it saw). Each kind names
the actors that may send it and the evidence it must carry (docs/state-machine.md, 'Event
kinds, their actors and their evidence').
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from veritask.core import reasons
from veritask.core.jsontypes import JSONObject, JSONValue


class ActorKind(StrEnum):
    """Who may move a state. Operators carry a name: ``operator:alice``."""

    SCHEDULER = "scheduler"
    """Opens attempts, applies trigger rules, requests stops for the replace policy."""
    EXECUTOR = "executor"
    """Reports whether the engine accepted a submission."""
    WORKER = "worker"
    """The program that runs the attempt; proves itself with the attempt token."""
    MONITOR = "monitor"
    """Watches leases and timeouts."""
    RECONCILER = "reconciler"
    """Asks the engine what happened and decides on that evidence."""
    OPERATOR = "operator"
    """A person, named after the colon."""
    API = "api"
    """A program acting through the HTTP API."""


@dataclass(frozen=True)
class Actor:
    """An actor kind and, for operators, the person's name."""

    kind: ActorKind
    name: str | None = None

    def __str__(self) -> str:
        return f"{self.kind}:{self.name}" if self.name else str(self.kind)

    @classmethod
    def parse(cls, text: str) -> Actor:
        """Read ``scheduler`` or ``operator:alice``; raises ValueError on anything else."""
        kind_text, _, name = text.partition(":")
        try:
            kind = ActorKind(kind_text)
        except ValueError:
            known = ", ".join(a.value for a in ActorKind)
            raise ValueError(f"unknown actor {text!r}; expected one of {known}") from None
        if kind is ActorKind.OPERATOR and not name:
            raise ValueError("an operator actor needs a name: operator:<name>")
        if kind is not ActorKind.OPERATOR and name:
            raise ValueError(f"only operators carry a name, not {kind_text!r}")
        return cls(kind, name or None)


class EventKind(StrEnum):
    """What happened. Facts are in the past tense; decisions too, once taken."""

    INSTANCE_CREATED = "instance_created"
    """The scheduler created the instance for its run."""
    ATTEMPT_OPENED = "attempt_opened"
    """The scheduler opened attempt N and minted its token."""
    SUBMIT_ACKNOWLEDGED = "submit_acknowledged"
    """The executor's engine accepted the submission and named its external id."""
    SUBMIT_FAILED = "submit_failed"
    """The executor's engine refused the submission or could not start it."""
    STARTED = "started"
    """The worker started the task's process."""
    HEARTBEAT = "heartbeat"
    """The worker is alive."""
    PROGRESS = "progress"
    """The worker reports the task's phase and done/total."""
    OUTPUT_COMMITTED = "output_committed"
    """The task committed its output through the fencing check."""
    COMPLETED = "completed"
    """The worker saw the task's process end."""
    LEASE_EXPIRED = "lease_expired"
    """The monitor saw no report within the lease: unknown, not failed."""
    TIMEOUT_REQUESTED = "timeout_requested"
    """The monitor asked the engine to stop an attempt that ran past its timeout."""
    CANCEL_REQUESTED = "cancel_requested"
    """Someone asked to stop the instance."""
    CANCEL_CONFIRMED = "cancel_confirmed"
    """The engine (or the worker) confirmed that the process stopped."""
    CANCEL_UNCONFIRMED = "cancel_unconfirmed"
    """The engine did not confirm the stop within the window."""
    ENGINE_OBSERVED = "engine_observed"
    """The reconciler asked the engine and recorded its answer."""
    NEVER_RECEIVED = "never_received"
    """The reconciler concluded that the engine never had the attempt."""
    FENCED = "fenced"
    """The reconciler closed an attempt whose fate stayed unknown past the evidence window."""
    OVERRIDE = "override"
    """An operator set the outcome of the current epoch by hand."""
    SKIPPED = "skipped"
    """A trigger rule or a branch decided that the instance does not run."""
    UPSTREAM_FAILED = "upstream_failed"
    """A trigger rule can no longer be met because upstream instances failed."""
    REMOVED = "removed"
    """The instance's task is absent from the definition version of a rerun."""
    CLEARED = "cleared"
    """An operator cleared a finished instance: it waits to be decided again in a new epoch."""
    MAP_EXPANDED = "map_expanded"
    """The scheduler expanded a mapped task over its upstream's output: the instances of its
    items were created with this event, which carries the output they were made from."""


class Level(StrEnum):
    """Whether an event speaks about the instance as a whole or about one attempt."""

    INSTANCE = "instance"
    """``attempt_no`` names the epoch the decision was taken in (0 before any attempt)."""
    ATTEMPT = "attempt"
    """``attempt_no`` names the attempt, 1 or more."""


@dataclass(frozen=True)
class KindRule:
    """Who may send a kind, what it must prove, and whether it is a decision."""

    actors: frozenset[ActorKind]
    evidence: Mapping[str, tuple[type, ...]]
    decision: bool
    level: Level
    summary: str


_STR = (str,)
_INT = (int,)
_OPT_INT = (int, type(None))
_OPT_STR = (str, type(None))
_BOOL = (bool,)

_S, _E, _W, _M, _R, _O, _A = (
    ActorKind.SCHEDULER,
    ActorKind.EXECUTOR,
    ActorKind.WORKER,
    ActorKind.MONITOR,
    ActorKind.RECONCILER,
    ActorKind.OPERATOR,
    ActorKind.API,
)


def _rule(
    actors: set[ActorKind],
    evidence: dict[str, tuple[type, ...]],
    *,
    decision: bool,
    level: Level = Level.ATTEMPT,
    summary: str,
) -> KindRule:
    return KindRule(frozenset(actors), evidence, decision, level, summary)


#: The one place that says who may send what, with which evidence.
KIND_RULES: Mapping[EventKind, KindRule] = {
    EventKind.INSTANCE_CREATED: _rule(
        {_S}, {"task_key": _STR}, decision=True, level=Level.INSTANCE, summary="task key"
    ),
    EventKind.ATTEMPT_OPENED: _rule(
        {_S},
        {"token_hash": _STR, "reason": _STR, "retry_index": _INT, "resubmit_index": _INT},
        decision=True,
        summary="hashed token, why it opened, retry and resubmit counters",
    ),
    EventKind.SUBMIT_ACKNOWLEDGED: _rule(
        {_E}, {"external_id": _STR, "executor": _STR}, decision=False, summary="external id"
    ),
    EventKind.SUBMIT_FAILED: _rule(
        {_E, _S}, {"error": _STR, "retryable": _BOOL}, decision=False, summary="the error"
    ),
    EventKind.STARTED: _rule({_W}, {"worker": _STR}, decision=False, summary="worker, pid, token"),
    EventKind.HEARTBEAT: _rule({_W}, {}, decision=False, summary="token"),
    EventKind.PROGRESS: _rule(
        {_W}, {"phase": _STR}, decision=False, summary="phase, done/total, message"
    ),
    EventKind.OUTPUT_COMMITTED: _rule({_W}, {"marker": _STR}, decision=False, summary="marker"),
    EventKind.COMPLETED: _rule(
        {_W},
        {"exit_code": _OPT_INT, "error_category": _STR},
        decision=False,
        summary="exit code, error category, commit marker",
    ),
    EventKind.LEASE_EXPIRED: _rule(
        {_M},
        {"last_report_seq": _INT, "lease_expires_at": _STR},
        decision=True,
        summary="last report seen, lease expiry",
    ),
    EventKind.TIMEOUT_REQUESTED: _rule(
        {_M}, {"timeout_seconds": (int, float)}, decision=True, summary="the timeout"
    ),
    EventKind.CANCEL_REQUESTED: _rule(
        {_O, _S, _A}, {"reason": _STR}, decision=True, summary="who and why"
    ),
    EventKind.CANCEL_CONFIRMED: _rule(
        {_R, _W}, {"engine_state": _STR, "source": _STR}, decision=False, summary="engine answer"
    ),
    EventKind.CANCEL_UNCONFIRMED: _rule(
        {_R},
        {"engine_state": _STR, "window_seconds": (int, float)},
        decision=True,
        summary="window",
    ),
    EventKind.ENGINE_OBSERVED: _rule(
        {_R},
        {"engine_state": _STR, "source": _STR},
        decision=False,
        summary="engine state, exit record, where it came from",
    ),
    EventKind.NEVER_RECEIVED: _rule(
        {_R}, {"engine_state": _STR, "source": _STR}, decision=True, summary="engine answer"
    ),
    EventKind.FENCED: _rule(
        {_R},
        {"reason": _STR, "on_unknown": _STR, "gathered": (dict,)},
        decision=True,
        summary="why, and the evidence gathered",
    ),
    EventKind.OVERRIDE: _rule(
        {_O},
        {"to_state": _STR, "reason": _STR, "scope": _STR},
        decision=True,
        level=Level.INSTANCE,
        summary="operator, reason, scope",
    ),
    EventKind.SKIPPED: _rule(
        {_S}, {"rule": _STR}, decision=True, level=Level.INSTANCE, summary="rule and upstream"
    ),
    EventKind.UPSTREAM_FAILED: _rule(
        {_S}, {"rule": _STR}, decision=True, level=Level.INSTANCE, summary="rule and upstream"
    ),
    EventKind.REMOVED: _rule(
        {_S}, {"definition_version": _INT}, decision=True, level=Level.INSTANCE, summary="version"
    ),
    EventKind.MAP_EXPANDED: _rule(
        {_S},
        {"over": _STR, "count": _INT, "items": (list,)},
        decision=True,
        level=Level.INSTANCE,
        summary="the upstream and its attempt, the output, how many instances",
    ),
    # Its attempt_no names the epoch it opens (the current one + 1), which has no attempt
    # until the scheduler decides the instance again.
    EventKind.CLEARED: _rule(
        {_O},
        {"reason": _STR, "scope": _STR},
        decision=True,
        level=Level.INSTANCE,
        summary="operator, reason, scope",
    ),
}

#: Worker reports: they prove liveness and carry a sequence number.
WORKER_REPORTS = frozenset(
    {
        EventKind.STARTED,
        EventKind.HEARTBEAT,
        EventKind.PROGRESS,
        EventKind.OUTPUT_COMMITTED,
        EventKind.COMPLETED,
    }
)


class OpenReason(StrEnum):
    """Why the scheduler opened an attempt; it decides which counter grows."""

    FIRST = "first"
    """The instance's first attempt."""
    RETRY = "retry"
    """The previous attempt failed and the retry policy allows another."""
    RESUBMIT = "resubmit"
    """The engine never received the previous attempt (does not count as a retry)."""
    UNKNOWN_RETRY = "unknown_retry"
    """The previous attempt was fenced with on_unknown=retry (counts as a retry)."""
    RERUN = "rerun"
    """An operator cleared the instance to run again with the same inputs (counters reset)."""


class ErrorCategory(StrEnum):
    """How a worker saw the task's process end."""

    NONE = "none"
    """Exit code 0."""
    TASK_ERROR = "task_error"
    """A non-zero exit code."""
    TIMEOUT = "timeout"
    """The worker stopped it for running past its timeout."""
    CANCELLED = "cancelled"
    """The worker stopped it because a stop was asked of it."""
    KILLED = "killed"
    """It died of a signal the worker did not send."""
    SKIPPED = "skipped"
    """It exited with the skip exit code or called skip."""
    START_ERROR = "start_error"
    """It could not be started (command not found, import error)."""
    OUT_OF_MEMORY = "out_of_memory"
    """The kernel killed it for going past its memory limit (a container's ``memory:``)."""


class StopCause(StrEnum):
    """Why a stop was asked for; it decides CANCELLED or TIMEOUT once confirmed."""

    CANCEL = "cancel"
    """An operator, the API or the scheduler's replace policy asked for it."""
    TIMEOUT = "timeout"
    """The monitor saw the attempt run past its timeout."""


class ClearScope(StrEnum):
    """What an operator asked to clear."""

    FAILED = "failed"
    """Every instance of the run that ended without success."""
    TASKS = "tasks"
    """The tasks the operator named."""
    DOWNSTREAM = "downstream"
    """Downstream of a cleared instance (reached, not named)."""


class OverrideScope(StrEnum):
    """How far an override reaches."""

    INSTANCE = "instance"
    """This instance only."""
    DOWNSTREAM = "downstream"
    """This instance and everything downstream of it."""
    RUN = "run"
    """Every instance of the run."""


@dataclass(frozen=True)
class Event:
    """One event about an instance (``attempt_no`` 0) or one of its attempts.

    ``observed_at`` is set by the ledger when it records the event, never by the sender;
    ``attempt_token`` is checked on arrival and never stored.
    """

    event_id: str
    instance_id: str
    attempt_no: int
    kind: EventKind
    actor: str
    event_time: datetime
    evidence: JSONObject = field(default_factory=dict)
    seq: int | None = None
    observed_at: datetime | None = None
    attempt_token: str | None = field(default=None, repr=False, compare=False)

    @property
    def rule(self) -> KindRule:
        """The rule of this event's kind."""
        return KIND_RULES[self.kind]

    @property
    def is_decision(self) -> bool:
        """Recorded only on the snapshot version it was based on."""
        return self.rule.decision

    def ordering_key(self) -> tuple[datetime, str]:
        """The canonical tie-break: earliest by the actor's clock, then the lowest id."""
        return (self.event_time, self.event_id)


def fingerprint(event: Event) -> str:
    """A digest of what the sender said, to tell a true duplicate from a reused id.

    ``observed_at`` and the token are left out: the same report delivered twice is the same
    event even though the ledger saw it twice.
    """
    content: dict[str, JSONValue] = {
        "instance_id": event.instance_id,
        "attempt_no": event.attempt_no,
        "kind": event.kind.value,
        "actor": event.actor,
        "event_time": event.event_time.isoformat(),
        "evidence": event.evidence,
        "seq": event.seq,
    }
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def malformation(event: Event) -> str | None:
    """Why the event is malformed regardless of what the ledger holds, or None if it is not.

    Covers the shape: the actor is allowed to send this kind, the evidence it must carry is
    there with the right types, the times are timezone-aware and worker reports carry a
    sequence number and a token.
    """
    rule = KIND_RULES[event.kind]
    try:
        actor = Actor.parse(event.actor)
    except ValueError as exc:
        return reasons.BAD_ACTOR.format(problem=exc)
    if actor.kind not in rule.actors:
        allowed = ", ".join(sorted(a.value for a in rule.actors))
        return reasons.ACTOR_NOT_ALLOWED.format(actor=event.actor, kind=event.kind, allowed=allowed)
    if event.event_time.tzinfo is None:
        return reasons.NAIVE_TIME.format()
    if not event.event_id:
        return reasons.EMPTY_EVENT_ID.format()
    nothing_running = event.evidence.get("nothing_running", False)
    if event.kind is EventKind.CANCEL_REQUESTED and not isinstance(nothing_running, bool):
        return reasons.NOTHING_RUNNING_TYPE.format(got=type(nothing_running).__name__)
    instance_cancel = event.kind is EventKind.CANCEL_REQUESTED and nothing_running is True
    if rule.level is Level.ATTEMPT and event.attempt_no < 1 and not instance_cancel:
        return reasons.NAMES_AN_ATTEMPT.format(kind=event.kind, attempt_no=event.attempt_no)
    if event.attempt_no < 0:
        return reasons.NEGATIVE_ATTEMPT.format(attempt_no=event.attempt_no)
    for key, types in rule.evidence.items():
        if key not in event.evidence:
            return reasons.EVIDENCE_REQUIRED.format(key=key, kind=event.kind)
        value = event.evidence[key]
        # bool is an int in Python; an int field must not accept True.
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            expected = " or ".join(t.__name__ for t in types)
            return reasons.EVIDENCE_TYPE.format(
                key=key, expected=expected, got=type(value).__name__
            )
    if actor.kind is ActorKind.WORKER:
        if event.seq is None or event.seq < 1:
            return reasons.NO_SEQ.format()
        if not event.attempt_token:
            return reasons.NO_TOKEN.format()
    return _evidence_values_problem(event)


def _evidence_values_problem(event: Event) -> str | None:
    """Values that must come from a closed vocabulary."""
    ev = event.evidence
    checks: list[tuple[str, type[StrEnum]]] = []
    if event.kind is EventKind.ATTEMPT_OPENED:
        checks.append(("reason", OpenReason))
    if event.kind is EventKind.COMPLETED:
        checks.append(("error_category", ErrorCategory))
    if event.kind is EventKind.OVERRIDE:
        checks.append(("scope", OverrideScope))
    if event.kind is EventKind.CLEARED:
        checks.append(("scope", ClearScope))
    for key, vocabulary in checks:
        if ev[key] not in {m.value for m in vocabulary}:
            allowed = ", ".join(m.value for m in vocabulary)
            return reasons.NOT_ONE_OF.format(key=key, value=ev[key], allowed=allowed)
    if event.kind is EventKind.OVERRIDE and ev["to_state"] not in ("SUCCESS", "FAILED"):
        return reasons.OVERRIDE_TO.format(to_state=ev["to_state"])
    if event.kind is EventKind.CANCEL_REQUESTED and not str(ev["reason"]).strip():
        return reasons.CANCEL_NEEDS_REASON.format()
    if event.kind is EventKind.OVERRIDE and not str(ev["reason"]).strip():
        return reasons.OVERRIDE_NEEDS_REASON.format()
    if event.kind is EventKind.CLEARED and not str(ev["reason"]).strip():
        return reasons.CLEAR_NEEDS_REASON.format()
    if names_a_foreign_log(event):
        return reasons.FOREIGN_LOG_PATH.format(
            path=ev["log_path"], attempt_no=event.attempt_no, instance_id=event.instance_id
        )
    return None


#: Where every worker keeps an attempt's log, below its own home: ``…/attempts/<instance id>/
#: <attempt no>/task.log`` (execution/layout.py spells the same path; a test holds them equal).
ATTEMPT_LOG_NAME = "task.log"
ATTEMPTS_FOLDER = "attempts"


def own_log_tail(instance_id: str, attempt_no: int) -> tuple[str, ...]:
    """The last parts of the path of the attempt's own log, whatever host keeps it."""
    return (ATTEMPTS_FOLDER, instance_id, str(attempt_no), ATTEMPT_LOG_NAME)


def names_a_foreign_log(event: Event) -> bool:
    """Whether a worker's report names a log other than its attempt's own.

    The server never reads the path a report names (it derives the attempt's log from the
    attempt's identity), but a report that names another file is a forgery or a broken worker:
    it is refused, and the caller raises an alert. An empty path names nothing.
    """
    path = event.evidence.get("log_path")
    if path is None or path == "":
        return False
    if not isinstance(path, str) or "\x00" in path:
        return True
    parts = tuple(part for part in path.split("/") if part)
    tail = own_log_tail(event.instance_id, event.attempt_no)
    return (
        not path.startswith("/")
        or any(part in (".", "..") for part in parts)
        or parts[-len(tail) :] != tail
    )
