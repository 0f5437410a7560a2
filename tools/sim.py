"""A deterministic simulator: the real scheduler and the real ledger against a lying engine.

One seed chooses everything: what users do (trigger with idempotency keys, cancel, clear,
override), what the simulated engine does with each attempt (and how it lies), when the
scheduler crashes. Time is a simulated clock that the ledger and the scheduler both read; it
advances by steps, nothing sleeps. The scheduler is the real ``Scheduler`` over a real
``Ledger`` on SQLite (a file on a tmpfs); worker reports go through the outbox and the
scheduler's intake with the attempt's token, as a worker's do. After every step the
invariants of ``docs/reliability.md`` are checked; a failure names the seed and the command
that replays it.

Usage: ``python -m tools.sim --seeds 200`` or ``python -m tools.sim --seed 123`` (``make sim``).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import hashlib
import logging
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from random import Random
from typing import Any, ParamSpec, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from veritask import ids
from veritask.core.events import ErrorCategory, OverrideScope
from veritask.core.fold import fold
from veritask.core.states import EngineState, InstanceState, TriggerKind
from veritask.execution import port, transports, wire
from veritask.execution.errors import ExecutorError
from veritask.ledger import audit, dialects, migrate, pools, scheduler_lease, schema
from veritask.ledger.ledger import Ledger
from veritask.ledger.vocabulary import AlertCategory
from veritask.scheduling import scheduler as scheduler_module
from veritask.scheduling import sharing, triggers
from veritask.scheduling.scheduler import Scheduler
from veritask.scheduling.settings import Settings
from veritask.scheduling.tokens import AttemptTokens
from veritask.services import errors as service_errors
from veritask.services import overrides, reruns
from veritask.services import pools as service_pools
from veritask.services import runs as service_runs
from veritask.services.platform import Platform

T0 = datetime(2026, 1, 1, tzinfo=UTC)
STEP = timedelta(seconds=1)
#: Steps with faults, then at most this many quiet ones for every run to end.
STEPS = 40
QUIET_STEPS = 60
POOL = "simpool"
POOL_SLOTS = 2
SECRET = b"simulator-secret-0123456789abcdef"
EVIDENCE_WINDOW = timedelta(seconds=4)
DEFINITION = """\
name: sim
concurrency: allow
defaults:
  retry: {{max_retries: 1, backoff: fixed, delay: 2s, jitter: 0}}
  lease: 3s
  evidence_window: {window}s
  on_unknown: {on_unknown}
  timeout: 60s
tasks:
  a: {{run: "true", executor: sim, pool: {pool}}}
  b: {{run: "true", executor: sim, pool: {pool}, after: [a]}}
  c: {{run: "true", executor: sim, pool: {pool}, after: [a]}}
"""
SETTINGS = Settings(
    idle_sleep=timedelta(0),
    monitor_every=STEP,
    reconcile_every=STEP,
    full_scan_every=STEP,  # every tick reads every run: no wall-clock discovery timer matters
    leaf_settle=timedelta(0),
    gather_window=timedelta(0),
    submit_grace=timedelta(seconds=3),
    queued_check=timedelta(seconds=3),
    cancel_window=timedelta(seconds=5),
)

_P = ParamSpec("_P")
_T = TypeVar("_T")


class SimSource(StrEnum):
    """Where the simulated engine's answers come from."""

    SIM = "sim"


class Crash(BaseException):
    """The scheduler process dies here (no ``except Exception`` of the code catches it)."""


class Violation(AssertionError):
    """An invariant that does not hold."""


# -- time, ids, submissions ------------------------------------------------------------------


class Clock:
    """The simulated time, read by the ledger and the scheduler."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


class Ids:
    """Time-ordered ids from the simulated clock and a counter: the same for the same seed."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.count = 0

    def __call__(self, unix_ms: int | None = None) -> str:
        self.count += 1
        millis = int(self.clock().timestamp() * 1000) if unix_ms is None else unix_ms
        value = (millis << 80) | (7 << 76) | (0b10 << 62) | self.count
        return str(uuid.UUID(int=value))


class Inline(Executor):
    """Runs each submission at once in the loop's thread (no threads: a seed replays)."""

    def submit(self, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs) -> Future[_T]:
        done: Future[_T] = Future()
        done.set_result(fn(*args, **kwargs))
        return done


def inline_pool(workers: int) -> Executor:
    return Inline()


# -- the engine ------------------------------------------------------------------------------


@dataclasses.dataclass
class SimAttempt:
    spec: port.AttemptSpec
    external_id: str
    start_at: datetime
    end_at: datetime
    succeeds: bool
    state: EngineState = EngineState.PENDING
    seq: int = 0
    next_beat: datetime = T0
    silent_until: datetime | None = None
    unknown_until: datetime | None = None
    cancelled: bool = False
    ignores_cancel: bool = False
    vanished: bool = False
    ended_at: datetime | None = None
    exit_code: int | None = None
    category: ErrorCategory | None = None

    @property
    def running(self) -> bool:
        return self.state in (EngineState.PENDING, EngineState.RUNNING) and not self.vanished


class SimEngine:
    """An executor (``port.Executor``) whose attempts run in simulated time and which lies and
    fails as the seed chooses. Its workers' reports are files in the scheduler's outbox, each
    with the attempt's token, delivered late, twice or out of order."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.attempts: dict[str, SimAttempt] = {}
        self.by_key: dict[tuple[str, int], SimAttempt] = {}
        #: Reports on their way: (when it arrives, order, report).
        self.wire: list[tuple[datetime, int, wire.WorkerEvent]] = []
        self.sent = 0
        #: The ids of the reports sent under a wrong token.
        self.forged: set[str] = set()
        #: Twin attempts seen: (instance, attempt numbers).
        self.twins: list[str] = []

    # the port

    def submit(self, *, spec: port.AttemptSpec) -> port.Submission:
        world = self.world
        key = (spec.instance_id, spec.attempt_no)
        if key in self.by_key:
            return port.Submission(self.by_key[key].external_id, created=False)
        if world.fault("refuse_submit", 0.08):
            raise ExecutorError("the simulated engine refuses the submission", retryable=True)
        now = world.clock()
        start = now + STEP * world.rng.randint(0, 2)
        attempt = SimAttempt(
            spec=spec,
            external_id=f"sim-{spec.instance_id}-{spec.attempt_no}",
            start_at=start,
            end_at=start + STEP * world.rng.randint(1, 6),
            succeeds=world.rng.random() < 0.8,
            next_beat=start,
        )
        if world.fault("ignore_cancel", 0.1):
            attempt.ignores_cancel = True  # it finishes (successfully) after a stop request
        if world.fault("go_silent", 0.15):
            attempt.silent_until = start + STEP * world.rng.randint(3, 10)
            attempt.end_at = max(attempt.end_at, attempt.silent_until)
            if world.fault("unknown_while_silent", 0.5):
                # The engine cannot say what became of it meanwhile (its host unreachable).
                attempt.unknown_until = attempt.silent_until + STEP * world.rng.randint(0, 4)
        self.attempts[attempt.external_id] = attempt
        self.by_key[key] = attempt
        self._check_twins(spec.instance_id)
        if world.fault("lose_answer", 0.08):
            # A timeout: the engine may hold it (retryable). An engine that says "refused" for
            # good and runs it anyway is not simulated: see docs/reliability.md.
            raise ExecutorError("the simulated engine's answer was lost", retryable=True)
        return port.Submission(attempt.external_id, created=True)

    def describe(self, *, external_id: str) -> port.Observation:
        world = self.world
        attempt = self.attempts.get(external_id)
        if attempt is None or attempt.vanished:
            return port.Observation(external_id, EngineState.NOT_FOUND, world.source)
        unknown = attempt.unknown_until is not None and world.clock() < attempt.unknown_until
        if attempt.running and (unknown or world.fault("answer_unknown", 0.05)):
            return port.Observation(external_id, EngineState.UNKNOWN, world.source)
        details: dict[str, port.DetailValue] = {"sim": True}
        if not attempt.running:
            details["no_process"] = True
        return port.Observation(
            external_id,
            attempt.state,
            world.source,
            exit_code=attempt.exit_code,
            error_category=attempt.category,
            details=details,
        )

    def cancel(self, *, external_id: str) -> None:
        attempt = self.attempts.get(external_id)
        if attempt is not None and attempt.running:
            attempt.cancelled = True

    def cleanup(self, *, external_id: str) -> None:
        pass  # kept: the invariants read what the engine ran

    # the world's side

    def step(self, now: datetime) -> None:
        """Advance every attempt to ``now``; deliver the reports whose time has come."""
        world = self.world
        for attempt in list(self.attempts.values()):
            if not attempt.running:
                continue
            if attempt.state is EngineState.PENDING and now >= attempt.start_at:
                attempt.state = EngineState.RUNNING
                self._report(attempt, "started", _started(attempt))
            if attempt.state is not EngineState.RUNNING:
                continue
            if world.fault("vanish", 0.005):
                attempt.vanished = True  # the engine lost the process and every trace of it
                continue
            if attempt.cancelled and not attempt.ignores_cancel:
                self._end(attempt, now, succeeded=False, category="cancelled", signal=15)
                continue
            if now >= attempt.end_at:
                succeeded = attempt.succeeds or (attempt.ignores_cancel and attempt.cancelled)
                attempt.succeeds = succeeded
                self._end(attempt, now, succeeded=succeeded)
                continue
            if world.fault("forged_report", 0.01):
                self._forge(attempt)
            silent = attempt.silent_until is not None and now < attempt.silent_until
            if not silent and now >= attempt.next_beat:
                attempt.next_beat = now + attempt.spec.heartbeat_interval
                self._report(attempt, "heartbeat", {})
        self._deliver(now)

    def _end(
        self,
        attempt: SimAttempt,
        now: datetime,
        *,
        succeeded: bool,
        category: str | None = None,
        signal: int | None = None,
    ) -> None:
        attempt.state = EngineState.SUCCEEDED if succeeded else EngineState.FAILED
        attempt.succeeds = succeeded
        attempt.ended_at = now
        # What ``describe`` says from now on: the same as the worker's report.
        attempt.exit_code = 0 if succeeded else (None if signal else 1)
        attempt.category = ErrorCategory("none" if succeeded else (category or "task_error"))
        evidence: wire.CompletedEvidence = {
            "exit_code": attempt.exit_code,
            "signal": signal,
            "error_category": attempt.category.value,
            "commit_marker": None,
            "log_path": "",
            "output": None,
        }
        self._report(attempt, "completed", evidence)

    def _report(self, attempt: SimAttempt, kind: wire.WorkerEventKind, evidence: Any) -> None:
        world = self.world
        attempt.seq += 1
        event = wire.make_event(
            kind=kind,
            instance_id=attempt.spec.instance_id,
            attempt_no=attempt.spec.attempt_no,
            attempt_token=attempt.spec.attempt_token,
            seq=attempt.seq,
            evidence=evidence,
            event_time=world.clock(),
        )
        delay = timedelta(0)
        if world.fault("late_report", 0.1):
            delay = STEP * world.rng.randint(2, 8)  # late, and so out of order
        self._send(world.clock() + delay, event)
        if world.fault("duplicate_report", 0.05):
            self._send(world.clock() + delay + STEP * world.rng.randint(1, 5), event)

    def _forge(self, attempt: SimAttempt) -> None:
        """A success report of a running attempt under a token that is not the attempt's (an
        impostor, or a corrupted file): it must never be applied."""
        evidence: wire.CompletedEvidence = {
            "exit_code": 0,
            "signal": None,
            "error_category": "none",
            "commit_marker": None,
            "log_path": "",
            "output": None,
        }
        event = wire.make_event(
            kind="completed",
            instance_id=attempt.spec.instance_id,
            attempt_no=attempt.spec.attempt_no,
            attempt_token="forged-" + attempt.spec.attempt_token[:8],
            seq=10_000 + attempt.seq,
            evidence=evidence,
            event_time=self.world.clock(),
        )
        self.forged.add(event["event_id"])
        self._send(self.world.clock(), event)

    def _send(self, at: datetime, event: wire.WorkerEvent) -> None:
        self.sent += 1
        self.wire.append((at, self.sent, event))

    def _deliver(self, now: datetime) -> None:
        due = sorted(item for item in self.wire if item[0] <= now)
        self.wire = [item for item in self.wire if item[0] > now]
        for _, _, event in due:
            # Where the attempt's spec says: the outbox of the scheduler that submitted it.
            callback = self._spec_of(event).callback
            assert isinstance(callback, port.OutboxCallback)
            transports.post(callback.directory, event)

    def _spec_of(self, event: wire.WorkerEvent) -> port.AttemptSpec:
        return self.by_key[(event["instance_id"], event["attempt_no"])].spec

    def _check_twins(self, instance_id: str) -> None:
        running = [
            a.spec.attempt_no
            for a in self.attempts.values()
            if a.spec.instance_id == instance_id and a.running
        ]
        if len(running) > 1:
            self.twins.append(f"instance {instance_id}: attempts {running} run at once")


def _started(attempt: SimAttempt) -> wire.StartedEvidence:
    return {
        "worker": "sim:1",
        "host": "sim",
        "pid": 1000 + attempt.spec.attempt_no,
        "pid_start_time": attempt.spec.attempt_no,
        "pgid": 1000 + attempt.spec.attempt_no,
    }


# -- the world -------------------------------------------------------------------------------


class Errors(logging.Handler):
    """The errors the platform logs: each is a bug it swallowed to go on (a failed tick, a
    run that could not be advanced), so each is a violation."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


class World:
    """One seed's simulation: the database, the engine, the scheduler, the users."""

    def __init__(self, seed: int, directory: Path, template: Path) -> None:
        self.seed = seed
        self.rng = Random(seed)
        self.faults: collections.Counter[str] = collections.Counter()
        #: Known findings met (counted, not failed): docs/reliability.md.
        self.findings: collections.Counter[str] = collections.Counter()
        self.clock = Clock()
        self.ids = Ids(self.clock)
        self.source = SimSource.SIM
        self.home = directory
        database = directory / "veritask.db"
        shutil.copyfile(template, database)
        self.engine: Engine = dialects.create_engine(f"sqlite:///{database}")
        self.platform = Platform(Ledger(self.engine, clock=self.clock), directory)
        self.sim = SimEngine(self)
        #: One scheduler, or two sharing the runs (by seed); None while one is down.
        count = self.rng.choice([1, 2])
        self.schedulers: dict[str, Scheduler | None] = {f"sim-{n}": None for n in "ab"[:count]}
        self.down_until: dict[str, int] = dict.fromkeys(self.schedulers, 0)
        self.crash_armed = False
        self.crash_at: str | None = None
        self.committed = False
        #: Idempotency key -> the run each trigger with it answered.
        self.keyed: dict[str, set[str]] = collections.defaultdict(set)
        self.runs: list[str] = []
        self.errors = Errors()
        self.steps = 0
        #: The row version of each instance when its fold was last checked.
        self.folded: dict[str, int] = {}
        sa.event.listen(self.engine, "commit", self._on_commit)
        sa.event.listen(self.engine, "begin", self._on_begin)

    def fault(self, kind: str, chance: float) -> bool:
        if self.quiet or self.rng.random() >= chance:
            return False
        self.faults[kind] += 1
        return True

    quiet = False

    # the scheduler, its crashes and restarts

    def start_scheduler(self, me: str) -> Scheduler:
        """Start (or restart) the scheduler ``me``: its row in ``schedulers``, its outbox (a
        restart keeps the one it had, as a host's does), its recovery."""
        ledger = Ledger(self.engine, clock=self.clock)
        with self.engine.begin() as connection:
            scheduler_lease.forget_scheduler(connection, me)
            scheduler_lease.register_scheduler(
                connection, scheduler_id=me, host="sim", pid=1, now=self.clock()
            )
        sharing_with = None
        if len(self.schedulers) > 1:
            # Read who is alive at every tick (``read_every`` 0): no wall-clock timer.
            sharing_with = sharing.Membership(ledger, me, read_every=0.0)
        scheduler = Scheduler(
            ledger,
            executors={"sim": self.sim, "wait": self.sim},
            tokens=AttemptTokens(SECRET),
            outbox=self.home / f"outbox-{me}",
            settings=SETTINGS,
            submit_pool=inline_pool,
            membership=sharing_with,
        )
        self.schedulers[me] = scheduler
        self._guarded(me, scheduler.recover)
        return scheduler

    def crash(self, me: str) -> None:
        """The process dies: nothing of it is closed or flushed; its successor starts over
        after a while (its heartbeat stops: the other one takes its runs once it is stale)."""
        scheduler = self.schedulers.get(me)
        if scheduler is not None:
            # What the kernel frees when a process dies: its inotify watch and wake pipe.
            scheduler._outbox_watch.close()
            scheduler._wake.close()
        self.schedulers[me] = None
        self.down_until[me] = self.steps + self.rng.randint(0, 25)

    def _guarded(self, me: str, action: Callable[[], object]) -> None:
        """Run a scheduler action with crashes armed; a crash kills the scheduler."""
        if not self.quiet and self.rng.random() < 0.03:
            # Armed: it fires at that point of this action, if the action gets there.
            self.crash_at = self.rng.choice(["before_commit", "after_commit", "unknown_commit"])
            self.crash_armed = True
        self.committed = False
        try:
            action()
        except Crash as crash:
            self.faults[f"crash_{crash}"] += 1
            self.crash(me)
        finally:
            self.crash_armed = False
            self.crash_at = None

    def _on_commit(self, connection: sa.Connection) -> None:
        if not self.crash_armed:
            return
        if self.crash_at == "after_commit":
            self.committed = True  # the process dies as it begins its next transaction
            return
        self.crash_armed = False
        if self.crash_at == "unknown_commit":
            # The commit lands, and the process dies before it hears so.
            connection.connection.dbapi_connection.commit()  # type: ignore[union-attr]
        raise Crash(self.crash_at)

    def _on_begin(self, connection: sa.Connection) -> None:
        if self.crash_armed and self.committed:
            self.crash_armed = False
            raise Crash("after_commit")

    # users

    def user_acts(self) -> None:
        rng = self.rng
        roll = rng.random()
        try:
            if roll < 0.12:
                self.faults["user_trigger"] += 1
                key = rng.choice([None, "k1", "k2", "k3"])
                made = service_runs.trigger_run(
                    self.platform, "sim", actor="user:sim", kind=TriggerKind.API, key=key
                )
                if made.run_id not in self.runs:
                    self.runs.append(made.run_id)
                if key is not None:
                    self.keyed[key].add(made.run_id)
            elif roll < 0.15 and self.runs:
                self.faults["user_cancel"] += 1
                service_runs.cancel_run(
                    self.platform, rng.choice(self.runs), actor="user:sim", reason="simulated"
                )
            elif roll < 0.18 and self.runs:
                self.faults["user_clear"] += 1
                reruns.clear(
                    self.platform,
                    rng.choice(self.runs),
                    failed=rng.random() < 0.5,
                    reason="simulated",
                    actor="user:sim",
                )
            elif roll < 0.20 and self.runs:
                instance = rng.choice(self._instances(rng.choice(self.runs)))
                self.faults["user_override"] += 1
                overrides.override(
                    self.platform,
                    instance,
                    to_state=rng.choice(overrides.OVERRIDE_STATES),
                    scope=OverrideScope.INSTANCE,
                    reason="simulated",
                    actor="user:sim",
                )
        except service_errors.ServiceError:
            pass  # refused (409, 400): a user's request at the wrong moment

    def _instances(self, run_id: str) -> list[str]:
        t = schema.task_instances.c
        with dialects.read_transaction(self.engine) as connection:
            return sorted(connection.execute(sa.select(t.id).where(t.run_id == run_id)).scalars())

    # the loop

    def step(self) -> None:
        self.steps += 1
        self.clock.now += STEP
        if not self.quiet:
            self.user_acts()
        self.sim.step(self.clock.now)
        for me in sorted(self.schedulers):
            if self.schedulers[me] is None and (self.quiet or self.steps >= self.down_until[me]):
                self.faults["restart"] += 1
                self.start_scheduler(me)
            scheduler = self.schedulers[me]
            if scheduler is None:
                continue
            with self.engine.begin() as connection:  # its lease thread's heartbeat
                scheduler_lease.beat(connection, me, self.clock())
            self._guarded(me, scheduler.tick)

    def settled(self) -> bool:
        """No run to move any more (a CANCELLING run whose stops are all unconfirmed waits
        for nothing the scheduler can do) and no report on its way."""
        r, t = schema.runs.c, schema.task_instances.c
        moving = ["QUEUED", "RUNNING"]
        with dialects.read_transaction(self.engine) as connection:
            left = connection.execute(
                sa.select(sa.func.count()).where(r.execution_state.in_(moving))
            ).scalar_one()
            cancelling = connection.execute(
                sa.select(sa.func.count())
                .select_from(schema.task_instances.join(schema.runs, t.run_id == r.id))
                .where(r.execution_state == "CANCELLING")
                .where(t.state.not_in([*_TERMINAL, InstanceState.CANCEL_FAILED.value]))
            ).scalar_one()
        return left == 0 and cancelling == 0 and not self.sim.wire

    def close(self) -> None:
        for me in sorted(self.schedulers):
            self.crash(me)
        self.engine.dispose()


# -- the invariants ---------------------------------------------------------------------------


def check(world: World, *, at_rest: bool) -> None:
    """The invariants of docs/reliability.md; raises ``Violation`` naming the first broken.

    After every step: the snapshots of the instances that changed equal the folds of their
    events, no twins, the pool's slots, the idempotency keys. At the end (``at_rest``), the
    whole audit (``veritask verify``: every fold, every run, the hash chains, the invariants
    at rest), the evidence of every terminal state in the whole history, and what must have
    ended.
    """
    problems = [f"the scheduler logged an error: {m}" for m in world.errors.messages]
    problems += _fold_problems(world)
    problems += world.sim.twins
    problems += _pool_problems(world)
    problems += _keys_problems(world)
    if at_rest:
        report = audit.verify(world.platform.ledger)
        problems += report.mismatches + report.violations
        if not report.chains.ok:
            problems.append("the event chains do not verify")
        problems += _evidence_problems(world)
        problems += _rest_problems(world)
        problems += _platform_alerts(world)
    if problems:
        raise Violation(problems[0])


def _fold_problems(world: World) -> list[str]:
    """Every instance whose row moved since the last step: its snapshot is its events' fold."""
    t = schema.task_instances.c
    with dialects.read_transaction(world.engine) as connection:
        versions = dict(connection.execute(sa.select(t.id, t.version)).all())
    fresh = Ledger(world.engine)  # no cache: the snapshot as stored
    found: list[str] = []
    for instance_id, version in sorted(versions.items()):
        if world.folded.get(instance_id) == version:
            continue
        world.folded[instance_id] = version
        loaded = fresh.snapshot(instance_id)
        policy = fresh.policy_of(instance_id)
        if loaded is None or policy is None:
            found.append(f"instance {instance_id}: no snapshot or policy")
            continue
        if loaded[0] != fold(instance_id, fresh.recorded_events(instance_id), policy):
            found.append(f"instance {instance_id}: its snapshot is not the fold of its events")
    return found


def _pool_problems(world: World) -> list[str]:
    found: list[str] = []
    with dialects.read_transaction(world.engine) as connection:
        used = pools.usage(connection, [POOL]).get(POOL, 0)
    if used > POOL_SLOTS:
        found.append(f"pool {POOL} holds {used} slots of {POOL_SLOTS}")
    running = sum(1 for a in world.sim.attempts.values() if a.running and not a.cancelled)
    if running > POOL_SLOTS + _fenced_running(world):
        found.append(f"the engine runs {running} attempts of a {POOL_SLOTS}-slot pool")
    return found


def _fenced_running(world: World) -> int:
    """Attempts the engine still runs that the ledger let go (fenced, superseded): their
    slots were released on the ledger's word that the attempt is over or abandoned."""
    a = schema.attempts.c
    with dialects.read_transaction(world.engine) as connection:
        live = {
            (row.instance_id, row.attempt_no)
            for row in connection.execute(
                sa.select(a.instance_id, a.attempt_no).where(
                    a.state.in_(["SCHEDULED", "QUEUED", "RUNNING", "LOST", "CANCELLING"])
                )
            )
        }
    return sum(1 for k, x in world.sim.by_key.items() if x.running and k not in live)


def _keys_problems(world: World) -> list[str]:
    found = [f"key {k} gave runs {sorted(v)}" for k, v in world.keyed.items() if len(v) > 1]
    r = schema.runs.c
    with dialects.read_transaction(world.engine) as connection:
        for key, count in connection.execute(
            sa.select(r.idempotency_key, sa.func.count())
            .group_by(r.idempotency_key)
            .having(sa.func.count() > 1)
        ):
            found.append(f"idempotency key {key} has {count} runs")
    return found


def _evidence_problems(world: World) -> list[str]:
    """Over the whole history: no SUCCESS but on the engine's success of that attempt (or an
    override); LOST -> FAILED only by the attempt's own report or after the evidence window."""
    found: list[str] = []
    e = schema.events.c
    with dialects.read_transaction(world.engine) as connection:
        events = connection.execute(
            sa.select(e.instance_id, e.attempt_no, e.kind, e.from_state, e.to_state, e.event_time)
            .where(e.instance_id.is_not(None), e.outcome == "applied")
            .order_by(e.position)
        ).all()
    forged_ids = sorted(world.sim.forged)
    with dialects.read_transaction(world.engine) as connection:
        forged = connection.execute(
            sa.select(e.event_id, e.outcome).where(e.event_id.in_(forged_ids))
        ).all()
    # Refused reports go to their own table: a forged one in the history was recorded.
    found += [f"a report under a wrong token was recorded {outcome}" for _, outcome in forged]
    with dialects.read_transaction(world.engine) as connection:
        refused = connection.execute(
            sa.select(sa.func.count()).where(schema.rejected_events.c.event_id.in_(forged_ids))
        ).scalar_one()
    if refused < len(forged_ids) and not world.sim.wire:
        found.append(f"{len(forged_ids) - refused} reports under a wrong token were not refused")
    lost_since: dict[str, datetime] = {}
    absent_since: dict[str, datetime] = {}
    newest: dict[str, int] = {}
    fenced: set[tuple[str, int]] = set()
    for ev in events:
        instance = ev.instance_id
        if ev.kind == "attempt_opened":
            newest[instance] = max(newest.get(instance, 0), ev.attempt_no)
        if ev.kind == "fenced":
            fenced.add((instance, ev.attempt_no))
        if ev.kind in _WORKER_KINDS and (
            (instance, ev.attempt_no) in fenced or ev.attempt_no < newest.get(instance, 0)
        ):
            found.append(
                f"instance {instance}: a report ({ev.kind}) of attempt {ev.attempt_no}, "
                "fenced or superseded, was applied (not recorded stale)"
            )
        if ev.to_state == "SUCCESS" and ev.from_state != "SUCCESS" and ev.kind != "override":
            attempt = world.sim.by_key.get((instance, ev.attempt_no))
            if attempt is None or attempt.state is not EngineState.SUCCEEDED:
                found.append(
                    f"instance {instance}: SUCCESS ({ev.kind}) without the engine's success "
                    f"of attempt {ev.attempt_no}"
                )
        if ev.kind == "attempt_opened":
            absent_since.pop(instance, None)
        if ev.kind == "engine_observed" and ev.from_state == ev.to_state == "RUNNING":
            # The engine's answer on a RUNNING attempt (not found): its window counts from it.
            absent_since.setdefault(instance, _aware(ev.event_time))
        if ev.from_state == "LOST" and ev.to_state in ("FAILED", "UP_FOR_RETRY"):
            starts = [t for t in (lost_since.get(instance), absent_since.get(instance)) if t]
            found += _lost_decided(world, ev, min(starts) if starts else None)
        if ev.to_state == "LOST" and ev.from_state != "LOST":
            lost_since[instance] = _aware(ev.event_time)
        elif ev.from_state == "LOST" and ev.to_state != "LOST":
            lost_since.pop(instance, None)
    return found


_WORKER_KINDS = frozenset(wire.WORKER_EVENT_KINDS)


def _platform_alerts(world: World) -> list[str]:
    """The platform alerts (conflicting evidence, a run that could not be advanced): the
    simulated engine never contradicts itself, so each is a bug."""
    al = schema.alerts.c
    with dialects.read_transaction(world.engine) as connection:
        messages = connection.execute(
            sa.select(al.message).where(al.category == AlertCategory.PLATFORM.value)
        ).scalars()
        return [f"platform alert: {message}" for message in messages]


def _lost_decided(world: World, ev: Any, lost_since: datetime | None) -> list[str]:
    """A LOST attempt failed (or is retried) on evidence only: its own report, the engine's
    record of its end, an override, or ``on_unknown`` once its evidence window passed."""
    where = f"instance {ev.instance_id}: LOST -> {ev.to_state} ({ev.kind})"
    if ev.kind in ("completed", "override"):
        return []
    if ev.kind == "fenced":
        late_enough = (
            lost_since is not None and _aware(ev.event_time) - lost_since >= EVIDENCE_WINDOW
        )
        return [] if late_enough else [f"{where} before its evidence window"]
    attempt = world.sim.by_key.get((ev.instance_id, ev.attempt_no))
    ended = attempt is not None and not attempt.running and not attempt.vanished
    if ev.kind == "engine_observed" and ended:
        return []
    return [f"{where} without the engine's record of its end"]


def _rest_problems(world: World) -> list[str]:
    """Nothing CANCELLING at the end; every run ended, but for the one known stuck case."""
    found: list[str] = []
    t, r = schema.task_instances.c, schema.runs.c
    active = ["QUEUED", "RUNNING", "CANCELLING"]
    with dialects.read_transaction(world.engine) as connection:
        for (instance_id,) in connection.execute(
            sa.select(t.id).where(t.state == InstanceState.CANCELLING.value)
        ):
            found.append(f"instance {instance_id}: still CANCELLING at the end")
        unfinished = connection.execute(
            sa.select(r.id, r.execution_state, t.id.label("instance_id"), t.state, t.epoch)
            .join(schema.task_instances, t.run_id == r.id)
            .where(r.execution_state.in_(active), t.state.not_in(_TERMINAL))
        ).all()
    stuck: dict[str, list[Any]] = collections.defaultdict(list)
    for row in unfinished:
        stuck[row.id].append(row)
    for run_id, rows in sorted(stuck.items()):
        if all(_never_held_cancel(world, row) for row in rows):
            # Known: a stop of an attempt the engine refused stays unconfirmed (see
            # docs/reliability.md, "What it found"); counted, not failed.
            world.findings["run stuck CANCELLING on a never-submitted attempt"] += 1
            continue
        if all(_unaskable_fenced(world, row) for row in rows):
            # Known: a fenced attempt the engine was never asked about (no external id) and
            # that never reported its end holds its successor back for ever.
            world.findings["successor waits for ever for an unaskable fenced attempt"] += 1
            continue
        if _ghosts(world) and all(row.state == InstanceState.CREATED.value for row in rows):
            # The same case, worse: those unconfirmed stops hold their pool slots for ever,
            # and the runs after them wait for the pool (docs/reliability.md).
            world.findings["run waits for ever for pool slots such stops hold"] += 1
            continue
        states = sorted(f"{row.state}" for row in rows)
        found.append(f"run {run_id}: still {rows[0].execution_state} at the end ({states})")
    if world.sim.wire:
        found.append("reports still on their way at the end")
    return found


def _unaskable_fenced(world: World, row: Any) -> bool:
    """The row's instance waits to retry an attempt fenced with no external id."""
    if row.state != InstanceState.UP_FOR_RETRY.value:
        return False
    a = schema.attempts.c
    with dialects.read_transaction(world.engine) as connection:
        found = connection.execute(
            sa.select(a.state, a.external_id).where(
                a.instance_id == row.instance_id, a.attempt_no == row.epoch
            )
        ).first()
    return found is not None and found.state == "ABANDONED" and found.external_id is None


def _ghosts(world: World) -> int:
    """Attempts CANCEL_FAILED that the engine never held (the known case)."""
    a = schema.attempts.c
    with dialects.read_transaction(world.engine) as connection:
        rows = connection.execute(
            sa.select(a.instance_id, a.attempt_no).where(
                a.state == InstanceState.CANCEL_FAILED.value
            )
        ).all()
    return sum(1 for row in rows if (row.instance_id, row.attempt_no) not in world.sim.by_key)


def _never_held_cancel(world: World, row: Any) -> bool:
    return bool(
        row.execution_state == "CANCELLING"
        and row.state == InstanceState.CANCEL_FAILED.value
        and (row.instance_id, row.epoch) not in world.sim.by_key
    )


_TERMINAL = [
    s.value
    for s in (
        InstanceState.SUCCESS,
        InstanceState.FAILED,
        InstanceState.START_FAILED,
        InstanceState.TIMEOUT,
        InstanceState.CANCELLED,
        InstanceState.SKIPPED,
        InstanceState.UPSTREAM_FAILED,
        InstanceState.REMOVED,
    )
]


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


# -- running seeds ----------------------------------------------------------------------------


@dataclasses.dataclass
class Outcome:
    seed: int
    faults: collections.Counter[str]
    findings: collections.Counter[str]
    violation: str | None = None
    step: int | None = None
    #: A hash of the whole recorded history: the same seed gives the same one.
    digest: str = ""


@contextlib.contextmanager
def deterministic(clock: Clock) -> Iterator[None]:
    """Meanwhile every id the platform makes comes from the simulated clock and a counter,
    and no wall-clock grace decides which scheduler records a report."""
    made = Ids(clock)
    original = ids.time_ordered_id
    grace = scheduler_module._FOREIGN_GRACE_SECONDS
    ids.time_ordered_id = made
    # A report of another scheduler's run is recorded at once, not after a second of wall
    # time: that is allowed (the owner may be dead) and does not depend on how fast we run.
    scheduler_module._FOREIGN_GRACE_SECONDS = 0.0
    try:
        yield
    finally:
        ids.time_ordered_id = original
        scheduler_module._FOREIGN_GRACE_SECONDS = grace


def template(directory: Path) -> Path:
    """A migrated SQLite file each seed's database is copied from."""
    path = directory / "template.db"
    if not path.exists():
        migrate.upgrade(f"sqlite:///{path}")
    return path


def run_seed(
    seed: int, directory: Path, migrated: Path, *, steps: int = STEPS, quiet: int = QUIET_STEPS
) -> Outcome:
    """One seed: ``steps`` steps of faults, then up to ``quiet`` without, until all ended."""
    home = directory / f"seed-{seed}"
    home.mkdir(parents=True)
    world = World(seed, home, migrated)
    outcome = Outcome(seed, world.faults, world.findings)
    # The faults make the platform warn (a refused submission, a lost lease): expected here.
    # Its errors are violations (``Errors``).
    platform_log = logging.getLogger("veritask")
    level = platform_log.level
    platform_log.setLevel(logging.ERROR)
    platform_log.addHandler(world.errors)
    try:
        with deterministic(world.clock):
            definition = DEFINITION.format(
                window=int(EVIDENCE_WINDOW.total_seconds()),
                on_unknown=world.rng.choice(["retry", "fail"]),
                pool=POOL,
            )
            triggers.apply_definition(world.platform.ledger, definition, actor="user:sim")
            service_pools.set_pool(world.platform, POOL, slots=POOL_SLOTS, actor="user:sim")
            if len(world.schedulers) > 1:
                world.faults["two_schedulers"] += 1
            for me in sorted(world.schedulers):
                world.start_scheduler(me)
            try:
                for _ in range(steps):
                    world.step()
                    check(world, at_rest=False)
                world.quiet = True
                for _ in range(quiet):
                    world.step()
                    check(world, at_rest=False)
                    if world.settled():
                        break
                check(world, at_rest=True)
            except Violation as exc:
                outcome.violation = str(exc)
                outcome.step = world.steps
        outcome.digest = history_digest(world.engine)
    finally:
        platform_log.removeHandler(world.errors)
        platform_log.setLevel(level)
        world.close()
        shutil.rmtree(home, ignore_errors=True)
    return outcome


def history_digest(engine: Engine) -> str:
    """A hash of every recorded event (ids, kinds, states, times) in order."""
    e = schema.events.c
    with dialects.read_transaction(engine) as connection:
        rows = connection.execute(
            sa.select(
                e.event_id,
                e.instance_id,
                e.kind,
                e.attempt_no,
                e.from_state,
                e.to_state,
                e.event_time,
                e.outcome,
            ).order_by(e.position)
        ).all()
    return hashlib.sha256(repr([tuple(row) for row in rows]).encode()).hexdigest()[:16]


def scratch_directory() -> Path:
    """A tmpfs when there is one: the database's writes never touch a disk."""
    shm = Path("/dev/shm")
    base = shm if shm.is_dir() else None
    return Path(tempfile.mkdtemp(prefix="veritask-sim-", dir=base))


def run_seeds(seeds: list[int], *, steps: int = STEPS) -> list[Outcome]:
    directory = scratch_directory()
    try:
        migrated = template(directory)
        return [run_seed(seed, directory, migrated, steps=steps) for seed in seeds]
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.sim", description=__doc__)
    parser.add_argument("--seeds", type=int, default=200, help="how many seeds, from --first")
    parser.add_argument("--first", type=int, default=0, help="the first seed")
    parser.add_argument("--seed", type=int, default=None, help="replay this one seed")
    parser.add_argument("--steps", type=int, default=STEPS, help="steps of faults per seed")
    args = parser.parse_args(argv)
    if args.seeds < 1:
        parser.error("--seeds must be 1 or more")
    seeds = (
        [args.seed] if args.seed is not None else list(range(args.first, args.first + args.seeds))
    )
    started = time.monotonic()
    outcomes = run_seeds(seeds, steps=args.steps)
    took = time.monotonic() - started
    faults: collections.Counter[str] = collections.Counter()
    findings: collections.Counter[str] = collections.Counter()
    for outcome in outcomes:
        faults.update(outcome.faults)
        findings.update(outcome.findings)
    failed = [o for o in outcomes if o.violation is not None]
    print(f"seeds: {len(outcomes)} ({seeds[0]}..{seeds[-1]}) in {took:.1f}s")
    print(f"seeds per second: {len(outcomes) / took:.1f}")
    print("faults injected: " + ", ".join(f"{k}={v}" for k, v in sorted(faults.items())))
    for finding, count in sorted(findings.items()):
        print(f"known finding met {count} times: {finding}")
    steps = "" if args.steps == STEPS else f" STEPS={args.steps}"
    for outcome in failed:
        print(f"seed {outcome.seed} failed at step {outcome.step}: {outcome.violation}")
        print(f"  replay: make sim SEED={outcome.seed}{steps}")
    if len(outcomes) == 1:
        print(f"history digest: {outcomes[0].digest}")
    print(f"violations: {len(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
