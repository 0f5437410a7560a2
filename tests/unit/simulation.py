"""A simulator of true executions, the network between them and the platform, for the proofs.

The *world* runs attempts whose fates are chosen up front (succeed, fail, crash, hang, go
silent then finish late, never reach the engine, fail to start, skip themselves, ignore a
stop). Every actor emits the events it would really send; the *network* delays, duplicates
and reorders the facts; the *platform* classifies each arrival with ``judge`` and takes its
decisions with the same pure functions the loops use (``veritask.core.decide``), each on the
snapshot it sees. What the platform recorded is returned for the properties to check.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from veritask.core import decide, judge
from veritask.core.events import Event, EventKind, fingerprint
from veritask.core.fold import InstanceSnapshot, derive, empty
from veritask.core.jsontypes import JSONObject
from veritask.core.policy import OnUnknown, RetryPolicy, TaskPolicy
from veritask.core.states import AttemptState, EngineState, InstanceState

T0 = datetime(2026, 1, 1, tzinfo=UTC)
STEP = timedelta(seconds=1)
INSTANCE = "inst-1"


class Fate(StrEnum):
    """What really happens to one attempt."""

    SUCCEED = "succeed"
    FAIL = "fail"
    SKIP = "skip"
    CRASH = "crash"  # the worker dies: no completion, the engine loses the process
    HANG = "hang"  # runs forever and stops heartbeating (a stuck worker)
    SILENT_THEN_SUCCEED = "silent_then_succeed"  # SIGSTOP-like pause, then a late success
    NEVER_RECEIVED = "never_received"  # the engine drops the submission
    START_FAIL = "start_fail"  # the engine refuses it


@dataclass(frozen=True)
class Scenario:
    """Everything the world, the network and the operators will do."""

    fates: tuple[Fate, ...]
    durations: tuple[int, ...]
    max_retries: int
    on_unknown: OnUnknown
    timeout: int | None
    max_delay: int
    duplicate_rate: float
    cancel_at: int | None
    override_at_end: bool
    seed: int
    requires_commit: bool = False
    steps: int = 160


@dataclass
class TrueAttempt:
    """The world's side of one attempt."""

    attempt_no: int
    token: str
    fate: Fate
    duration: int
    submitted_at: int
    started: bool = False
    start_at: int = 0
    ended_at: int | None = None
    exit_code: int | None = None
    category: str | None = None
    seq: int = 0
    stop_requested_at: int | None = None
    stop_cause: str | None = None
    engine_knows: bool = True


@dataclass
class Recorded:
    """One arrival as the ledger classified it."""

    event: Event
    outcome: judge.Outcome
    before: InstanceSnapshot
    after: InstanceSnapshot
    reason: str = ""


@dataclass
class Simulation:
    """The platform's record of one simulated history, and the world's truth."""

    scenario: Scenario
    policy: TaskPolicy
    recorded: list[Recorded] = field(default_factory=list)
    attempts: dict[int, TrueAttempt] = field(default_factory=dict)
    delivered_completions: set[int] = field(default_factory=set)
    snapshot: InstanceSnapshot = field(
        default_factory=lambda: derive(empty(INSTANCE), TaskPolicy())
    )

    @property
    def events(self) -> list[Event]:
        """The set of recorded events (rejected and duplicate arrivals left out)."""
        return [r.event for r in self.recorded if r.outcome in _RECORDED]


Record = Callable[[Event, int], judge.Verdict]
Send = Callable[[Event, int], None]

_RECORDED = frozenset({judge.Outcome.APPLIED, judge.Outcome.STALE, judge.Outcome.CONFLICT})


def policy_for(scenario: Scenario) -> TaskPolicy:
    return TaskPolicy(
        retry=RetryPolicy(
            max_retries=scenario.max_retries,
            delay=timedelta(seconds=2),
            max_delay=timedelta(seconds=8),
            jitter=0.5,
        ),
        timeout=None if scenario.timeout is None else timedelta(seconds=scenario.timeout),
        lease=timedelta(seconds=5),
        evidence_window=timedelta(seconds=8),
        cancel_window=timedelta(seconds=6),
        on_unknown=scenario.on_unknown,
        max_resubmits=2,
        requires_commit=scenario.requires_commit,
    )


def simulate(scenario: Scenario) -> Simulation:
    """Run the scenario to its end and return what the platform recorded."""
    policy = policy_for(scenario)
    sim = Simulation(scenario, policy, snapshot=derive(empty(INSTANCE), policy))
    rng = random.Random(scenario.seed)
    ids = _ids("e")
    inflight: list[tuple[int, int, Event]] = []  # (deliver_at, tiebreak, event)

    def send(event: Event, now: int) -> None:
        """A fact crosses the network: late, perhaps twice, in any order."""
        copies = 2 if rng.random() < scenario.duplicate_rate else 1
        for _ in range(copies):
            at = now + rng.randint(0, scenario.max_delay)
            inflight.append((at, rng.randint(0, 1 << 30), event))

    def record(event: Event, now: int) -> judge.Verdict:
        stamped = _observed(event, now)
        known = next(
            (
                fingerprint(r.event)
                for r in sim.recorded
                if r.event.event_id == event.event_id and r.outcome in _RECORDED
            ),
            None,
        )
        verdict = judge.judge(sim.snapshot, stamped, policy, known_fingerprint=known)
        sim.recorded.append(
            Recorded(stamped, verdict.outcome, verdict.before, verdict.after, verdict.reason)
        )
        if verdict.recorded:
            sim.snapshot = verdict.after
        return verdict

    record(_event(ids, 0, EventKind.INSTANCE_CREATED, "scheduler", 0, {"task_key": "t"}), 0)
    for now in range(1, scenario.steps):
        _deliver(inflight, now, record)
        _world_step(sim, now, ids, send)
        _platform_step(sim, now, ids, record)
        _operator_step(sim, now, ids, record)
    # Drain the network: at-least-once delivery means everything arrives eventually.
    for now in range(scenario.steps, scenario.steps + scenario.max_delay + 1):
        _deliver(inflight, now, record)
    if scenario.override_at_end:
        end = scenario.steps + scenario.max_delay + 1
        override = _event(
            ids,
            sim.snapshot.epoch,
            EventKind.OVERRIDE,
            "operator:alice",
            end,
            {"to_state": "SUCCESS", "reason": "checked the output by hand", "scope": "instance"},
        )
        record(override, end)
    return sim


def _deliver(inflight: list[tuple[int, int, Event]], now: int, record: Record) -> None:
    due = sorted((item for item in inflight if item[0] <= now), key=lambda i: (i[0], i[1]))
    for item in due:
        inflight.remove(item)
        verdict = record(item[2], now)
        # A rejected report (its attempt not opened yet here) is retried by the sender.
        if verdict.outcome is judge.Outcome.REJECTED and "never opened" in verdict.reason:
            inflight.append((now + 1, item[1], item[2]))


def _world_step(sim: Simulation, now: int, ids: Iterator[str], emit: Send) -> None:
    for a in sim.attempts.values():
        if a.ended_at is not None or not a.engine_knows:
            continue
        if not a.started and now >= a.start_at:
            if a.fate is Fate.START_FAIL:
                a.ended_at = now
                a.engine_knows = False
                continue
            a.started = True
            emit(_report(ids, a, EventKind.STARTED, now, {"worker": "host:1"}), now)
            continue
        if not a.started:
            continue
        elapsed = now - a.start_at
        silent = a.fate is Fate.HANG or (
            a.fate is Fate.SILENT_THEN_SUCCEED and elapsed < a.duration
        )
        stop_due = a.stop_requested_at is not None and now >= a.stop_requested_at + 1
        if stop_due and a.fate not in (Fate.HANG,):
            # The worker forwards the stop to the task and reports how it ended.
            category = "timeout" if a.stop_cause == "timeout" else "cancelled"
            _finish(a, now, None, category)
            emit(_completion(ids, a, now), now)
            continue
        if a.fate is Fate.CRASH and elapsed >= a.duration:
            a.ended_at = now
            a.engine_knows = False  # the process is gone and no exit record was written
            continue
        if elapsed >= a.duration and a.fate in (Fate.SUCCEED, Fate.FAIL, Fate.SKIP):
            code = {Fate.SUCCEED: 0, Fate.FAIL: 1, Fate.SKIP: 99}[a.fate]
            category = {0: "none", 1: "task_error", 99: "skipped"}[code]
            if code == 0 and sim.scenario.requires_commit:
                marker: JSONObject = {"marker": f"partition-{a.attempt_no}"}
                emit(_report(ids, a, EventKind.OUTPUT_COMMITTED, now, marker), now)
            _finish(a, now, code, category)
            emit(_completion(ids, a, now), now)
            continue
        if a.fate is Fate.SILENT_THEN_SUCCEED and elapsed >= 2 * a.duration:
            if sim.scenario.requires_commit:
                marker = {"marker": f"partition-{a.attempt_no}"}
                emit(_report(ids, a, EventKind.OUTPUT_COMMITTED, now, marker), now)
            _finish(a, now, 0, "none")
            emit(_completion(ids, a, now), now)
            continue
        if not silent and elapsed % 2 == 0:
            emit(_report(ids, a, EventKind.HEARTBEAT, now, {}), now)


def _finish(a: TrueAttempt, now: int, code: int | None, category: str) -> None:
    a.ended_at = now
    a.exit_code = code
    a.category = category


def _platform_step(sim: Simulation, now: int, ids: Iterator[str], rec: Record) -> None:
    scenario, policy = sim.scenario, sim.policy
    at = T0 + now * STEP

    def next_id() -> str:
        return next(ids)

    snapshot = sim.snapshot
    for event in decide.monitor(snapshot, policy, now=at, next_id=next_id):
        verdict = rec(event, now)
        if verdict.recorded and event.kind is EventKind.TIMEOUT_REQUESTED:
            _ask_stop(sim, event.attempt_no, now, "timeout")
    snapshot = sim.snapshot
    current = snapshot.current
    if current is not None and current.state in _RECONCILED:
        truth = sim.attempts[current.attempt_no]
        result = decide.reconcile(snapshot, policy, _observe(truth, at), now=at, next_id=next_id)
        if result.stop_engine:
            _ask_stop(sim, current.attempt_no, now, truth.stop_cause or "cancel")
        for event in result.events:
            rec(event, now)
    snapshot = sim.snapshot
    attempt_no = snapshot.epoch + 1
    if attempt_no <= len(scenario.fates):
        token = f"token-{attempt_no}"
        opened = decide.open_attempt(
            snapshot, token_hash=judge.hash_token(token), now=at, event_id=next(ids)
        )
        if opened is not None and rec(opened, now).recorded:
            _submit(sim, attempt_no, token, now, ids, rec)


_RECONCILED = frozenset(
    {
        AttemptState.QUEUED,
        AttemptState.RUNNING,
        AttemptState.LOST,
        AttemptState.CANCELLING,
        AttemptState.CANCEL_FAILED,
    }
)


def _submit(
    sim: Simulation, attempt_no: int, token: str, now: int, ids: Iterator[str], rec: Record
) -> None:
    scenario = sim.scenario
    fate = scenario.fates[attempt_no - 1]
    truth = TrueAttempt(
        attempt_no,
        token,
        fate,
        scenario.durations[attempt_no - 1],
        submitted_at=now,
        start_at=now + 1,
        engine_knows=fate is not Fate.NEVER_RECEIVED,
    )
    sim.attempts[attempt_no] = truth
    if fate is Fate.START_FAIL:
        evidence: JSONObject = {"error": "image not found", "retryable": True}
        failed = _event(ids, attempt_no, EventKind.SUBMIT_FAILED, "executor", now, evidence)
        rec(failed, now)
        return
    ack: JSONObject = {"external_id": f"ext-{attempt_no}", "executor": "sim"}
    rec(_event(ids, attempt_no, EventKind.SUBMIT_ACKNOWLEDGED, "executor", now, ack), now)
    if fate is Fate.NEVER_RECEIVED:
        truth.start_at = 10**9


def _operator_step(sim: Simulation, now: int, ids: Iterator[str], record: Record) -> None:
    if sim.scenario.cancel_at != now:
        return
    snapshot = sim.snapshot
    event = decide.request_stop(
        snapshot,
        actor="operator:bob",
        reason="wrong parameters",
        now=T0 + now * STEP,
        event_id=next(ids),
    )
    if event is None or not record(event, now).recorded:
        return
    if not event.evidence.get("nothing_running"):
        _ask_stop(sim, event.attempt_no, now, "cancel")


def _ask_stop(sim: Simulation, attempt_no: int, now: int, cause: str) -> None:
    truth = sim.attempts.get(attempt_no)
    if truth is not None and truth.stop_requested_at is None:
        truth.stop_requested_at = now
        truth.stop_cause = cause


def _observe(truth: TrueAttempt, at: datetime) -> decide.Observation:
    """What the engine says: its own view, which knows nothing of paused workers."""
    if not truth.engine_knows:
        return decide.Observation(EngineState.NOT_FOUND, "engine", at)
    if truth.ended_at is None:
        state = EngineState.RUNNING if truth.started else EngineState.PENDING
        return decide.Observation(state, "engine", at)
    ok = truth.exit_code == 0
    return decide.Observation(
        EngineState.SUCCEEDED if ok else EngineState.FAILED,
        "exit_record",
        at,
        exit_code=truth.exit_code,
        error_category=truth.category,
    )


def _ids(prefix: str) -> Iterator[str]:
    n = 0
    while True:
        n += 1
        yield f"{prefix}{n:06d}"


def _event(
    ids: Iterator[str], attempt_no: int, kind: EventKind, actor: str, now: int, evidence: JSONObject
) -> Event:
    return Event(next(ids), INSTANCE, attempt_no, kind, actor, T0 + now * STEP, evidence)


def _report(
    ids: Iterator[str], a: TrueAttempt, kind: EventKind, now: int, evidence: JSONObject
) -> Event:
    a.seq += 1
    return Event(
        next(ids),
        INSTANCE,
        a.attempt_no,
        kind,
        "worker",
        T0 + now * STEP,
        evidence,
        seq=a.seq,
        attempt_token=a.token,
    )


def _completion(ids: Iterator[str], a: TrueAttempt, now: int) -> Event:
    evidence: JSONObject = {"exit_code": a.exit_code, "error_category": a.category or "none"}
    return _report(ids, a, EventKind.COMPLETED, now, evidence)


def _observed(event: Event, now: int) -> Event:
    return Event(
        event.event_id,
        event.instance_id,
        event.attempt_no,
        event.kind,
        event.actor,
        event.event_time,
        event.evidence,
        event.seq,
        T0 + now * STEP,
        event.attempt_token,
    )


TERMINAL_TRUTH = {
    Fate.SUCCEED: AttemptState.SUCCESS,
    Fate.FAIL: AttemptState.FAILED,
    Fate.SKIP: AttemptState.SKIPPED,
}

__all__ = [
    "INSTANCE",
    "TERMINAL_TRUTH",
    "Fate",
    "InstanceState",
    "Recorded",
    "Scenario",
    "Simulation",
    "simulate",
]
